package asyncagents_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/asyncagentstest"
	"github.com/asyncagents/asyncagents/fork"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// forksClient counts the sessions forked through it.
type forksClient struct {
	opencode.Client
	forks atomic.Int64
	at    atomic.Value // the messageID of the last fork
}

func (c *forksClient) ForkSession(ctx context.Context, id string, req opencode.ForkSessionRequest) (*opencode.Session, error) {
	c.forks.Add(1)
	c.at.Store(req.MessageID)
	return c.Client.ForkSession(ctx, id, req)
}

// F-18: a native fork starts from OpenCode's copy of the caller, cut before the caller's
// message, and runs the prompt after it: the task is forked (native), its session holds the
// caller's messages then the prompt, and it completes as any task.
func TestNativeForkStartsFromTheCallersCopy(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t)
	c := &forksClient{Client: f}
	m := asyncagentstest.NewManager(t, c, fastPoll, asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply))
	caller := asyncagentstest.NewParent(t, f)
	if _, err := f.Prompt(context.Background(), caller.SessionID, opencode.PromptRequest{
		Parts: []opencode.TextPartInput{opencode.NewText("RUN:echo inherited-token")}}); err != nil {
		t.Fatal(err)
	}
	parentMsgs, _ := f.Messages(context.Background(), caller.SessionID, 0)
	caller.MessageID = parentMsgs[len(parentMsgs)-1].Info.ID // the message that "made the call"
	task, err := m.Launch(context.Background(), asyncagents.LaunchInput{Caller: caller, Description: "native", Agent: "build",
		Prompt: "continue", Fork: true, ForkMode: asyncagents.ForkNative})
	if err != nil {
		t.Fatal(err)
	}
	task = asyncagentstest.Started(t, m, task)
	got := asyncagentstest.Await(t, m, caller, task.ID)
	if got.Status != asyncagents.StatusCompleted || !got.Forked || got.ForkMode != asyncagents.ForkNative || got.ForkStats == nil {
		t.Fatalf("task %s forked %v mode %q stats %v: %q", got.Status, got.Forked, got.ForkMode, got.ForkStats, got.Error)
	}
	if c.forks.Load() != 1 || c.at.Load() != caller.MessageID {
		t.Errorf("forks %d at %v, want one at the caller's message %s", c.forks.Load(), c.at.Load(), caller.MessageID)
	}
	msgs, _ := f.Messages(context.Background(), task.SessionID, 0)
	prompt := msgs[len(msgs)-2].Parts
	if len(msgs) != len(parentMsgs)-1+2 || msgs[0].Parts[0].Text != parentMsgs[0].Parts[0].Text || len(prompt) != 2 ||
		!prompt[0].Synthetic || !strings.Contains(prompt[0].Text, "copy of the conversation") || prompt[1].Text != "continue" {
		t.Errorf("the fork's session holds %d messages, want the caller's %d before its message, the prompt and the reply", len(msgs), len(parentMsgs)-1)
	}
	if list, _ := m.List(caller, ""); len(list) != 1 || list[0].Markers() != " (forked)" {
		t.Errorf("the caller's tasks = %+v, want the fork, marked", list)
	}
}

// F-18: a history the fork pipeline would cut to fit its budget falls back to the digest.
func TestNativeForkOverBudgetFallsBackToDigest(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t)
	c := &forksClient{Client: f}
	p, err := fork.New(fork.WithBudget(fork.MinBudget))
	if err != nil {
		t.Fatal(err)
	}
	m := asyncagentstest.NewManager(t, c, fastPoll, asyncagents.WithForkPipeline(p), asyncagents.WithForkMode(asyncagents.ForkNative),
		asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply))
	caller := asyncagentstest.NewParent(t, f)
	for range 3 {
		if _, err := f.Prompt(context.Background(), caller.SessionID, opencode.PromptRequest{
			Parts: []opencode.TextPartInput{opencode.NewText("RUN:echo " + strings.Repeat("x", 600))}}); err != nil {
			t.Fatal(err)
		}
	}
	task, err := m.Launch(context.Background(), asyncagents.LaunchInput{Caller: caller, Description: "too long", Agent: "build",
		Prompt: "continue", Fork: true})
	if err != nil {
		t.Fatal(err)
	}
	got := asyncagentstest.Await(t, m, caller, task.ID)
	if got.ForkMode != asyncagents.ForkDigest || c.forks.Load() != 0 || got.ForkStats.RemovedMessages == 0 && !got.ForkStats.BudgetClipped {
		t.Errorf("mode %q after %d forks, stats %+v: want the digest", got.ForkMode, c.forks.Load(), got.ForkStats)
	}
}

// Bad fork modes are refused: by New, by Launch (nothing created), by the task tool's schema.
func TestForkModeValidated(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t)
	if _, err := asyncagents.New(f, asyncagents.WithForkMode("copy")); !errors.Is(err, asyncagents.ErrInvalidInput) {
		t.Errorf("New = %v", err)
	}
	c := &createsClient{Client: f}
	m := asyncagentstest.NewManager(t, c, fastPoll)
	caller := asyncagentstest.NewParent(t, f)
	if _, err := m.Launch(context.Background(), asyncagents.LaunchInput{Caller: caller, Description: "d", Agent: "build",
		Prompt: "p", Fork: true, ForkMode: "copy"}); !errors.Is(err, asyncagents.ErrInvalidInput) || c.creates.Load() != 0 {
		t.Errorf("Launch = %v after %d sessions created", err, c.creates.Load())
	}
	var task asyncagents.Tool
	for _, tool := range asyncagents.Tools(m) {
		if strings.HasSuffix(tool.Name, "_task") {
			task = tool
		}
	}
	args, _ := json.Marshal(map[string]any{"description": "d", "agent": "build", "prompt": "p", "fork": true, "fork_mode": "copy"})
	if _, err := task.Handler(context.Background(), caller, args); !errors.Is(err, asyncagents.ErrInvalidInput) {
		t.Errorf("task tool = %v", err)
	}
	// The task tool (as the MCP bridge serves it) launches a native fork.
	args, _ = json.Marshal(map[string]any{"description": "d", "agent": "build", "prompt": "p", "fork": true, "fork_mode": "native"})
	if _, err := task.Handler(context.Background(), caller, args); err != nil {
		t.Fatal(err)
	}
	if list, _ := m.List(caller, ""); len(list) != 1 || list[0].ForkMode != asyncagents.ForkNative {
		t.Errorf("tasks after the task tool's native fork: %+v", list)
	}
}

// F-18 on the real server: a native fork inherits the caller's context (it quotes a token
// seen only in the caller's tool output), its first model request repeats the caller's last
// as a prefix (at least 95% of it), and it is a task like any other: notified, resumed, fork
// and resume still refused together.
func TestRealServerNativeForkRepeatsTheCallersPrefix(t *testing.T) {
	t.Parallel()
	srv := shared.Get(t)
	c := srv.Client()
	m := asyncagentstest.NewManager(t, c, fastPoll, asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply))
	parent, secret := parentWithWork(t, c)
	caller := asyncagents.Caller{SessionID: parent.ID, Agent: "build"}
	parentLast := lastChat(t, srv.Model.Requests(), secret)
	task, err := m.Launch(ctxT(t, 60*time.Second), asyncagents.LaunchInput{Caller: caller, Description: "native", Agent: "build",
		Prompt: "[native] QUOTE:PARENT_SECRET=", Fork: true, ForkMode: asyncagents.ForkNative})
	if err != nil {
		t.Fatal(err)
	}
	task = asyncagentstest.Started(t, m, task)
	got := asyncagentstest.Await(t, m, caller, task.ID)
	if got.Status != asyncagents.StatusCompleted || got.ForkMode != asyncagents.ForkNative || !strings.Contains(got.Result, secret) {
		t.Fatalf("task %s mode %q result %q (want %s): %q", got.Status, got.ForkMode, got.Result, secret, got.Error)
	}
	childFirst := firstRequest(t, srv.Model, "[native]")
	a, b := parentLast.Rendered(), childFirst.Rendered()
	shared := 0
	for shared < min(len(a), len(b)) && a[shared] == b[shared] {
		shared++
	}
	t.Logf("caller's last request %d bytes, the fork's first %d, shared prefix %d (%.1f%%)", len(a), len(b), shared, 100*float64(shared)/float64(len(a)))
	if float64(shared) < 0.95*float64(len(a)) {
		t.Errorf("shared prefix %d of %d bytes, want at least 95%%", shared, len(a))
	}
	asyncagentstest.AwaitTask(t, m, task.ID, asyncagentstest.Delivered)
	if _, err := m.Launch(context.Background(), asyncagents.LaunchInput{Caller: caller, Description: "x", Agent: "build",
		Prompt: "x", Fork: true, ForkMode: asyncagents.ForkNative, Resume: task.ID}); !errors.Is(err, asyncagents.ErrForkResumeConflict) {
		t.Errorf("fork and resume = %v", err)
	}
	if _, err := m.Resume(context.Background(), caller, task.ID, "RUN:echo resumed-native"); err != nil {
		t.Fatal(err)
	}
	if got := asyncagentstest.Await(t, m, caller, task.ID); got.Status != asyncagents.StatusCompleted || got.ResumeCount != 1 {
		t.Errorf("after a resume: %s, %d resumes: %q", got.Status, got.ResumeCount, got.Error)
	}
	// A native fork is cancelled as any task.
	long, err := m.Launch(ctxT(t, 60*time.Second), asyncagents.LaunchInput{Caller: caller, Description: "long native", Agent: "build",
		Prompt: "[native-long] SLEEP:30", Fork: true, ForkMode: asyncagents.ForkNative})
	if err != nil {
		t.Fatal(err)
	}
	long = asyncagentstest.Started(t, m, long)
	asyncagentstest.AwaitBusy(t, c, long.SessionID)
	if got, err := m.Cancel(context.Background(), caller, long.ID); err != nil || got.Status != asyncagents.StatusCancelled {
		t.Errorf("Cancel = %s, %v", got.Status, err)
	}
	// Nesting depth: the fork (depth 1, the deepest by default) may not launch tasks, although
	// OpenCode's copy takes no permission rule that hides the tools from it.
	if _, err := m.Launch(context.Background(), asyncagents.LaunchInput{Caller: asyncagents.Caller{SessionID: task.SessionID, Agent: "build"},
		Description: "x", Agent: "build", Prompt: "x"}); !errors.Is(err, asyncagents.ErrNestingDepth) {
		t.Errorf("a launch from the fork = %v, want ErrNestingDepth", err)
	}
	// Deleting the caller takes the task away from the Manager; OpenCode keeps the copy,
	// which is not its child.
	if err := c.DeleteSession(context.Background(), parent.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, func() bool { _, err := m.Get(task.ID); return errors.Is(err, asyncagents.ErrTaskNotFound) })
	if _, err := c.GetSession(context.Background(), task.SessionID); err != nil {
		t.Errorf("the fork's session after its caller was deleted: %v (OpenCode 1.18.33 keeps it)", err)
	}
}

// lastChat returns the last chat request that holds s.
func lastChat(t testing.TB, reqs []opencodetest.Request, s string) opencodetest.Request {
	t.Helper()
	for i := len(reqs) - 1; i >= 0; i-- {
		if reqs[i].Kind == opencodetest.KindChat && reqs[i].Contains(s) {
			return reqs[i]
		}
	}
	t.Fatalf("no request holds %s", s)
	return opencodetest.Request{}
}
