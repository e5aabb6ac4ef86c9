package asyncagents_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/asyncagentstest"
	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// digestsIn returns the progress digests in session id's messages.
func digestsIn(t *testing.T, c opencode.Client, id string) []string {
	t.Helper()
	msgs, err := c.Messages(context.Background(), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range msgs {
		for _, p := range m.Parts {
			if p.Synthetic && strings.HasPrefix(p.Text, "Background tasks still running") {
				out = append(out, p.Text)
			}
		}
	}
	return out
}

// A parent whose task runs longer than the digest's threshold, idle after a turn of its
// model, is shown the task's progress: one digest, posted without reply (no turn starts), and
// no second one until the parent's model took another turn.
func TestProgressDigestWhileTasksRun(t *testing.T) {
	t.Parallel()
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	m := asyncagentstest.NewManager(t, f, fastPoll, asyncagents.WithProgressDigest(500*time.Millisecond, time.Second))
	caller := asyncagentstest.NewParent(t, f)
	// The parent's model took a turn: its reply is its newest message.
	done := make(chan error, 1)
	go func() {
		_, err := f.Prompt(context.Background(), caller.SessionID, opencode.PromptRequest{Parts: []opencode.TextPartInput{opencode.NewText("hello")}})
		done <- err
	}()
	if !testmain.Eventually(10*time.Second, func() bool { return f.Release(caller.SessionID, opencodetest.Text("hi")) == nil }) {
		t.Fatal("the parent's run was never held")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	task := asyncagentstest.Launch(t, m, caller, "long work")
	if !testmain.Eventually(10*time.Second, func() bool { return len(digestsIn(t, f, caller.SessionID)) == 1 }) {
		t.Fatalf("no digest in the parent: %q", digestsIn(t, f, caller.SessionID))
	}
	d := digestsIn(t, f, caller.SessionID)[0]
	if !strings.Contains(d, task.DisplayID) || !strings.Contains(d, `"test"`) || len(d) > 1024 {
		t.Errorf("digest %q does not name the task", d)
	}
	time.Sleep(2500 * time.Millisecond) // two intervals: the parent took no turn since
	if got := digestsIn(t, f, caller.SessionID); len(got) != 1 {
		t.Errorf("%d digests without a turn between them", len(got))
	}
	msgs, _ := f.Messages(context.Background(), caller.SessionID, 1)
	if len(msgs) != 1 || msgs[0].Info.Role != opencode.RoleUser {
		t.Errorf("the digest started a turn: newest message %+v", msgs)
	}
}
