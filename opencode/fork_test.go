package opencode_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// TestForkSession records what OpenCode 1.18.33's own fork (POST /session/{id}/fork) gives a
// background task that continues a conversation, as the native fork mode would use it:
//
//   - The new session has no parentID and holds copies of the messages (new ids, the same
//     texts and tool results); with a messageID only those created before it.
//   - Prompted with the parent's agent and model, its first model request repeats the
//     parent's last request as a prefix (system prompt, tools and messages, as the provider
//     gets them) and adds the new prompt: a provider's prompt cache, which matches on the
//     exact prefix, reads all of it from the cache. The subtest asserts at least 95% of the
//     parent's request is shared.
//
// It runs on the shared server beside other tests: the requests it judges are those that
// hold its tag.
func TestForkSession(t *testing.T) {
	t.Parallel()
	srv := sharedServer(t)
	c := srv.Client()
	ctx := context.Background()
	tag := "[fork-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "]"
	secret := "SECRET-" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	parent, err := c.CreateSession(ctx, opencode.CreateSessionRequest{Title: "parent"})
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{tag + " RUN:echo " + secret, tag + " what did it print?"} {
		if _, err := c.Prompt(ctx, parent.ID, opencode.PromptRequest{Agent: "build", Parts: []opencode.TextPartInput{opencode.NewText(text)}}); err != nil {
			t.Fatal(err)
		}
	}
	parentMsgs, err := c.Messages(ctx, parent.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	before := len(srv.Model.Requests())
	last := lastRequest(t, srv.Model.Requests(), tag)

	child, err := c.ForkSession(ctx, parent.ID, opencode.ForkSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if child.ParentID != "" || child.ID == parent.ID {
		t.Errorf("fork = %+v: want a session of its own, with no parent", child)
	}
	copied, err := c.Messages(ctx, child.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(copied) != len(parentMsgs) || copied[0].Info.ID == parentMsgs[0].Info.ID || copied[0].Parts[0].Text != parentMsgs[0].Parts[0].Text {
		t.Errorf("fork holds %d messages (first %s), want copies of the parent's %d", len(copied), copied[0].Info.ID, len(parentMsgs))
	}
	partial, err := c.ForkSession(ctx, parent.ID, opencode.ForkSessionRequest{MessageID: parentMsgs[2].Info.ID})
	if err != nil {
		t.Fatal(err)
	}
	if msgs, err := c.Messages(ctx, partial.ID, 0); err != nil || len(msgs) != 2 {
		t.Errorf("fork at the third message holds %d messages (%v), want the 2 before it", len(msgs), err)
	}

	if err := c.PromptAsync(ctx, child.ID, opencode.PromptRequest{Agent: "build",
		Parts: []opencode.TextPartInput{opencode.NewText(tag + " task: QUOTE:" + "SECRET-")}}); err != nil {
		t.Fatal(err)
	}
	var reply string
	if !testmain.Eventually(60*time.Second, func() bool {
		msgs, err := c.Messages(ctx, child.ID, 1)
		if err != nil || len(msgs) != 1 || msgs[0].Info.Role != opencode.RoleAssistant || msgs[0].Info.Finish != "stop" {
			return false
		}
		for _, p := range msgs[0].Parts {
			reply += p.Text
		}
		return true
	}) {
		t.Fatal("the fork did not answer")
	}
	if !strings.Contains(reply, secret) {
		t.Errorf("the fork's reply %q does not quote %s, seen only in the parent's tool output", reply, secret)
	}
	first := lastRequest(t, srv.Model.Requests()[before:], tag)
	a, b := last.Rendered(), first.Rendered()
	shared := commonPrefix(a, b)
	t.Logf("parent's last request %d bytes, the fork's first %d, shared prefix %d (%.1f%%)", len(a), len(b), shared, 100*float64(shared)/float64(len(a)))
	if float64(shared) < 0.95*float64(len(a)) {
		t.Errorf("the fork's first request shares %d of the parent's last request's %d bytes, want at least 95%%", shared, len(a))
	}
}

// lastRequest returns the last chat request of reqs that holds tag.
func lastRequest(t *testing.T, reqs []opencodetest.Request, tag string) opencodetest.Request {
	t.Helper()
	for i := len(reqs) - 1; i >= 0; i-- {
		if reqs[i].Kind == opencodetest.KindChat && reqs[i].Contains(tag) {
			return reqs[i]
		}
	}
	t.Fatalf("no request holds %s", tag)
	return opencodetest.Request{}
}

// commonPrefix returns the length of the longest common prefix of a and b, in bytes.
func commonPrefix(a, b string) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}
