package asyncagents_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/asyncagentstest"
	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// fastPoll is the status poll of the suite's Managers that need none of their own: half a
// second rather than the default 2 s, so that a run whose end the events did not carry (the
// real server's event stream is live some tens of milliseconds after it answers, and a test
// may drop events) is read soon after it ends.
var fastPoll = asyncagents.WithPollInterval(500 * time.Millisecond)

// parentWithWork creates a parent session that ran a bash command printing a random secret.
func parentWithWork(t *testing.T, c *opencode.HTTPClient) (*opencode.Session, string) {
	t.Helper()
	ctx := ctxT(t, 60*time.Second)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	secret := "PARENT_SECRET=" + hex.EncodeToString(b)
	parent := newSession(t, c, "parent")
	reply, err := c.Prompt(ctx, parent.ID, opencode.PromptRequest{Parts: []opencode.TextPartInput{
		opencode.NewText("RUN:echo " + secret + " ||| echo done")}})
	if err != nil || reply.Info.Finish != "stop" {
		t.Fatalf("parent work: %+v, %v", reply, err)
	}
	return parent, secret
}

// firstRequest returns the first chat request whose last user message holds marker (after
// the synthetic part a native fork's prompt starts with, say).
func firstRequest(t testing.TB, model *opencodetest.Model, marker string) opencodetest.Request {
	t.Helper()
	for _, r := range model.Requests() {
		if _, last := r.LastUser(); r.Kind == opencodetest.KindChat && strings.Contains(last, marker) {
			return r
		}
	}
	t.Fatalf("no model request for %q", marker)
	return opencodetest.Request{}
}

// T-4, T-6, T-10, T-13, F-17 against the real server.
func TestRealServerPlainAndForkedTasks(t *testing.T) {
	srv := shared.Get(t)
	c := srv.Client()
	parent, secret := parentWithWork(t, c)
	m := asyncagentstest.NewManager(t, c, fastPoll)
	ctx := ctxT(t, 90*time.Second)
	caller := asyncagents.Caller{SessionID: parent.ID, Agent: "build"}
	// Markers unique to this run: the shared model's log keeps the requests of earlier runs.
	run := fmt.Sprint(time.Now().UnixNano())
	plainMark, forkedMark := "plain task "+run, "forked task "+run

	plain, err := m.Launch(ctx, asyncagents.LaunchInput{Caller: caller, Description: "plain look", Agent: "general",
		Prompt: plainMark + "\nQUOTE:PARENT_SECRET="})
	if err != nil {
		t.Fatal(err)
	}
	forked, err := m.Launch(ctx, asyncagents.LaunchInput{Caller: caller, Description: "forked look", Agent: "general", Fork: true,
		Prompt: forkedMark + "\nQUOTE:PARENT_SECRET="})
	if err != nil {
		t.Fatal(err)
	}
	forked = asyncagentstest.Started(t, m, forked)
	if plain.Status != asyncagents.StatusRunning || !forked.Forked || forked.ForkStats == nil {
		t.Fatalf("launch snapshots: plain %+v forked %+v", plain, forked)
	}
	// The fork joins the plain task's batch unless the plain task ended before the fork was
	// recorded (it may, while the fork reads the parent).
	if p, err := m.Get(plain.ID); err != nil {
		t.Fatal(err)
	} else if ended := !p.Completed.IsZero() && p.Completed.Before(forked.Started); forked.BatchID != plain.BatchID && !ended {
		t.Errorf("batches: plain %s (completed %v), forked %s (started %v)", plain.BatchID, p.Completed, forked.BatchID, forked.Started)
	}

	po, err := m.Output(ctx, caller, plain.ID, asyncagents.OutputOptions{Block: true, Timeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	fo, err := m.Output(ctx, caller, forked.DisplayID, asyncagents.OutputOptions{Block: true, Timeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if po.Task.Status != asyncagents.StatusCompleted || po.Task.Result != "QUOTE: not found" {
		t.Errorf("plain output = %+v", po.Task)
	}
	if fo.Task.Status != asyncagents.StatusCompleted || !strings.Contains(fo.Task.Result, secret) {
		t.Errorf("forked output = %+v, want it to quote %s", fo.Task, secret)
	}
	if fo.Task.Retrieved.IsZero() {
		t.Error("completed output not marked retrieved (T-9)")
	}

	// What the model was shown: the forked child's first request carries the parent's tool
	// output inside the inherited context; the plain child's does not (F-17).
	fr := firstRequest(t, srv.Model, forkedMark)
	var inherited string
	for _, msg := range fr.Messages {
		if strings.Contains(msg.Content, "<inherited_context>") {
			inherited = msg.Content
		}
	}
	if !strings.Contains(inherited, "[Tool: bash]") || !strings.Contains(inherited, "[Tool result]\n"+secret) {
		t.Errorf("forked child's first request lacks the parent's tool output in <inherited_context>:\n%.2000s", inherited)
	}
	if pr := firstRequest(t, srv.Model, plainMark); pr.Contains(secret) || pr.Contains("<inherited_context>") {
		t.Error("plain child's first request contains the parent's context")
	}

	// T-13: the caller's list, newest first, with the (forked) marker data.
	list, err := m.List(caller, "")
	if err != nil || len(list) != 2 || list[0].ID != forked.ID || !list[0].Forked || list[1].Forked {
		t.Fatalf("List = %+v, %v", list, err)
	}
	if other, _ := m.List(asyncagents.Caller{SessionID: "ses_someoneelse"}, ""); len(other) != 0 {
		t.Errorf("another session sees %d tasks", len(other))
	}
	// The child sessions are children of the parent, with the recursion guard (T-17): at the
	// deepest level the tools that launch tasks, this bridge's, any bridge's and OpenCode's
	// own, are denied.
	sess, err := c.GetSession(ctx, forked.SessionID)
	if err != nil || sess.ParentID != parent.ID || sess.Title != "Background (forked): forked look" {
		t.Errorf("child session = %+v, %v", sess, err)
	}
	for _, tool := range []string{"asyncagents_task", "asyncagents_output", "other_task", "task"} {
		if !slices.ContainsFunc(sess.Permission, func(r opencode.PermissionRule) bool {
			return r.Action == "deny" && r.Pattern == "*" && (r.Permission == tool || strings.HasSuffix(r.Permission, "*") && strings.HasPrefix(tool, strings.TrimSuffix(r.Permission, "*")) || strings.HasPrefix(r.Permission, "*") && strings.HasSuffix(tool, strings.TrimPrefix(r.Permission, "*")))
		}) {
			t.Errorf("child session rules %+v do not deny %s", sess.Permission, tool)
		}
	}

	// T-18: a follow-up in the same session; the reply comes from the plain child's session.
	// By its display id now: the one its launch answered can have grown since, when the
	// forked task's id starts with the same 8 characters (launched in the same 16 ms).
	now, err := m.Get(plain.ID)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := m.Resume(ctx, caller, now.DisplayID, "RUN:echo resumed-ok")
	if err != nil || rt.Status != asyncagents.StatusResumed || rt.ResumeCount != 1 {
		t.Fatalf("Resume = %+v, %v", rt, err)
	}
	if _, err := m.Resume(ctx, caller, plain.ID, "again"); !errors.Is(err, asyncagents.ErrTaskBusy) {
		t.Errorf("resume of a resumed task = %v, want ErrTaskBusy", err)
	}
	ro, err := m.Output(ctx, caller, plain.ID, asyncagents.OutputOptions{Block: true, Timeout: 60 * time.Second})
	if err != nil || ro.Task.Status != asyncagents.StatusCompleted || !strings.Contains(ro.Task.Result, "resumed-ok") {
		t.Fatalf("resumed output = %+v, %v", ro.Task, err)
	}
	if _, err := m.Resume(ctx, caller, plain.ID, " "); !errors.Is(err, asyncagents.ErrInvalidInput) {
		t.Errorf("empty follow-up = %v", err)
	}

	// N-1/N-5/N-8: the parent receives one notification per run.
	got := asyncagentstest.AwaitNotifications(t, c, parent.ID, 3)
	for _, n := range got {
		if !strings.HasPrefix(n, "✓ Agent ") && !strings.HasPrefix(n, "✓ Resume #1 completed") {
			t.Errorf("notification %q, want a run completed", n)
		}
	}
	if len(got) != 3 {
		t.Errorf("%d notifications, want 3: %q", len(got), got)
	}
}

// aborting is the server of the tests that abort or delete busy sessions, apart from the
// shared one: an abort while OpenCode 1.18.33 loads the model fails the other runs waiting
// for that load ("All fibers interrupted" in SessionPrompt.getModel), so no abort reaches a
// server whose unrelated tests may still be at their first prompt.
var aborting warmShared

// warmShared is a shared server that has answered one prompt, and so loaded its model,
// before Get returns it: the aborts of the tests that share it cannot fail each other's runs.
type warmShared struct {
	opencodetest.Shared
	once sync.Once
	err  error
}

func (w *warmShared) Get(t *testing.T) *opencodetest.Server {
	t.Helper()
	srv := w.Shared.Get(t)
	w.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		c := srv.Client()
		var warm *opencode.Session
		if warm, w.err = c.CreateSession(ctx, opencode.CreateSessionRequest{Title: "warm-up"}); w.err == nil {
			_, w.err = c.Prompt(ctx, warm.ID, opencode.PromptRequest{Parts: []opencode.TextPartInput{opencode.NewText("hello")}})
		}
	})
	if w.err != nil {
		t.Fatalf("warming the server up: %v", w.err)
	}
	return srv
}

// waitFor waits until cond holds, failing the test after d.
func waitFor(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	if !testmain.Eventually(d, cond) {
		t.Fatal("condition not met in time")
	}
}

// busy reports whether the server runs session id's agent loop.
func busy(ctx context.Context, c opencode.Client, id string) bool {
	st, err := c.SessionStatus(ctx, "")
	_, ok := st[id]
	return err == nil && ok
}

// T-4 validation: nothing is created on bad input.
func TestRealServerLaunchValidation(t *testing.T) {
	srv := shared.Get(t)
	c := srv.Client()
	ctx := ctxT(t, 60*time.Second)
	caller := asyncagentstest.NewParent(t, c)
	m := asyncagentstest.NewManager(t, c, fastPoll)
	ok := asyncagents.LaunchInput{Caller: caller, Description: "d", Prompt: "p", Agent: "general"}
	bad := func(mut func(*asyncagents.LaunchInput)) asyncagents.LaunchInput { in := ok; mut(&in); return in }
	cases := []struct {
		name string
		in   asyncagents.LaunchInput
		want error
	}{
		{"fork+resume", bad(func(in *asyncagents.LaunchInput) { in.Fork, in.Resume = true, "ses_x" }), asyncagents.ErrForkResumeConflict},
		{"empty prompt", bad(func(in *asyncagents.LaunchInput) { in.Prompt = " " }), asyncagents.ErrInvalidInput},
		{"empty agent", bad(func(in *asyncagents.LaunchInput) { in.Agent = "" }), asyncagents.ErrInvalidInput},
		{"empty description", bad(func(in *asyncagents.LaunchInput) { in.Description = "" }), asyncagents.ErrInvalidInput},
		{"unknown agent", bad(func(in *asyncagents.LaunchInput) { in.Agent = "no-such-agent" }), asyncagents.ErrUnknownAgent},
		{"hidden agent", bad(func(in *asyncagents.LaunchInput) { in.Agent = "compaction" }), asyncagents.ErrUnknownAgent},
		{"unknown caller", bad(func(in *asyncagents.LaunchInput) { in.Caller.SessionID = "ses_zzzzzzzzzzzzzzzzzzzzzzzzzz" }), asyncagents.ErrInvalidInput},
		{"unknown caller fork", bad(func(in *asyncagents.LaunchInput) {
			in.Caller.SessionID, in.Fork = "ses_zzzzzzzzzzzzzzzzzzzzzzzzzz", true
		}), asyncagents.ErrInvalidInput},
	}
	for _, tc := range cases {
		_, err := m.Launch(ctx, tc.in)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
		if tc.name == "unknown agent" && !strings.Contains(err.Error(), "general") {
			t.Errorf("unknown agent error does not name the known agents: %v", err)
		}
	}
	children, err := c.Children(ctx, caller.SessionID)
	if err != nil || len(children) != 0 {
		t.Errorf("bad input created %d sessions (%v)", len(children), err)
	}
	if l, _ := m.List(caller, ""); len(l) != 0 {
		t.Errorf("bad input registered %d tasks", len(l))
	}
}

// T-10 timeout, T-12 cancel, T-6 model error, on the real server.
func TestRealServerTimeoutCancelAndError(t *testing.T) {
	t.Parallel()
	srv := aborting.Get(t)
	c := srv.Client()
	ctx := ctxT(t, 90*time.Second)
	caller := asyncagentstest.NewParent(t, c)
	m := asyncagentstest.NewManager(t, c, fastPoll, asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply))

	// First the model error: right after an abort, OpenCode 1.18.33 may fail the next
	// prompts ("All fibers interrupted" in SessionPrompt.getModel) for a moment.
	failing, err := m.Launch(ctx, asyncagents.LaunchInput{Caller: caller, Description: "failing", Agent: "general", Prompt: "FAIL:400"})
	if err != nil {
		t.Fatal(err)
	}
	out, err := m.Output(ctx, caller, failing.ID, asyncagents.OutputOptions{Block: true, Timeout: 60 * time.Second})
	if err != nil || out.Task.Status != asyncagents.StatusError || !strings.Contains(out.Task.Error, "scripted failure") {
		t.Fatalf("failing task = %+v, %v", out.Task, err)
	}

	slow, err := m.Launch(ctx, asyncagents.LaunchInput{Caller: caller, Description: "slow", Agent: "general", Prompt: "SLEEP:30"})
	if err != nil {
		t.Fatal(err)
	}
	slow = asyncagentstest.Started(t, m, slow)
	out, err = m.Output(ctx, caller, slow.ID, asyncagents.OutputOptions{Block: true, Timeout: 700 * time.Millisecond})
	if err != nil || !out.TimedOut || out.Task.Status != asyncagents.StatusRunning {
		t.Fatalf("blocking output on a running task = %+v, %v", out, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := m.Output(cctx, caller, slow.ID, asyncagents.OutputOptions{Block: true}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled wait = %v", err)
	}
	got, err := m.Cancel(ctx, caller, slow.ID)
	if err != nil || got.Status != asyncagents.StatusCancelled {
		t.Fatalf("Cancel = %+v, %v", got, err)
	}
	if _, err := m.Cancel(ctx, caller, slow.ID); !errors.Is(err, asyncagents.ErrNotRunning) {
		t.Errorf("second Cancel = %v", err)
	}
	// The abort's MessageAbortedError does not turn cancelled into error.
	waitFor(t, 15*time.Second, func() bool { return !busy(ctx, c, slow.SessionID) })
	if tk, _ := m.Get(slow.ID); tk.Status != asyncagents.StatusCancelled {
		t.Errorf("after abort events: %s", tk.Status)
	}

}

// F-2 and F-17 on the real server: a forked task launched after POST /session/{id}/summarize
// inherits the summary and what came after it, not what came before.
func TestRealServerForkAfterSummarize(t *testing.T) {
	srv := shared.Get(t)
	c := srv.Client()
	ctx := ctxT(t, 90*time.Second)
	parent := newSession(t, c, "compacted parent")
	prompt := func(text string) {
		t.Helper()
		if _, err := c.Prompt(ctx, parent.ID, opencode.PromptRequest{Parts: []opencode.TextPartInput{opencode.NewText(text)}}); err != nil {
			t.Fatal(err)
		}
	}
	prompt("RUN:echo BEFORE_BOUNDARY_1234")
	if err := c.Summarize(ctx, parent.ID, opencode.Model{ProviderID: opencodetest.ProviderID, ModelID: opencodetest.ModelID}); err != nil {
		t.Fatal(err)
	}
	prompt("RUN:echo AFTER_BOUNDARY_5678")

	m := asyncagentstest.NewManager(t, c, fastPoll, asyncagents.WithNotifications(false))
	caller := asyncagents.Caller{SessionID: parent.ID, Agent: "build"}
	mark := fmt.Sprint("post-boundary task ", time.Now().UnixNano())
	task, err := m.Launch(ctx, asyncagents.LaunchInput{Caller: caller, Description: "after compaction", Agent: "general", Fork: true,
		Prompt: mark + "\nQUOTE:AFTER_BOUNDARY_"})
	if err != nil {
		t.Fatal(err)
	}
	task = asyncagentstest.Started(t, m, task)
	if st := task.ForkStats; st == nil || !st.CompactionDetected || st.CompactionIndex < 0 {
		t.Fatalf("fork stats = %+v", task.ForkStats)
	}
	out, err := m.Output(ctx, caller, task.ID, asyncagents.OutputOptions{Block: true, Timeout: 60 * time.Second})
	if err != nil || !strings.Contains(out.Task.Result, "AFTER_BOUNDARY_5678") {
		t.Fatalf("output = %+v, %v", out.Task, err)
	}
	r := firstRequest(t, srv.Model, mark)
	if !r.Contains("Scripted summary") || !r.Contains("AFTER_BOUNDARY_5678") {
		t.Error("the child's first request lacks the summary or the post-boundary output")
	}
	if r.Contains("BEFORE_BOUNDARY_1234") {
		t.Error("the child's first request contains output from before the compaction boundary")
	}
}

// noEvents is the real client with the event stream unavailable.
type noEvents struct{ *opencode.HTTPClient }

func (noEvents) Events(context.Context) (opencode.EventStream, error) {
	return nil, errors.New("event stream disabled for this test")
}

// T-7: with no event stream at all, the status poll alone completes a task.
func TestRealServerCompletionByPollingOnly(t *testing.T) {
	srv := shared.Get(t)
	c := srv.Client()
	ctx := ctxT(t, 60*time.Second)
	caller := asyncagentstest.NewParent(t, c)
	m := asyncagentstest.NewManager(t, noEvents{c}, asyncagents.WithPollInterval(200*time.Millisecond), asyncagents.WithNotifications(false))
	task, err := m.Launch(ctx, asyncagents.LaunchInput{Caller: caller, Description: "polled", Agent: "general", Prompt: "RUN:echo polled-ok"})
	if err != nil {
		t.Fatal(err)
	}
	out, err := m.Output(ctx, caller, task.ID, asyncagents.OutputOptions{Block: true, Timeout: 30 * time.Second})
	if err != nil || out.Task.Status != asyncagents.StatusCompleted || !strings.Contains(out.Task.Result, "polled-ok") {
		t.Fatalf("output = %+v, %v", out.Task, err)
	}
}

// T-15: a deleted task session cancels its task; a deleted parent takes its tasks with it.
func TestRealServerSessionDeleted(t *testing.T) {
	t.Parallel()
	srv := aborting.Get(t)
	c := srv.Client()
	ctx := ctxT(t, 60*time.Second)
	caller := asyncagentstest.NewParent(t, c)
	m := asyncagentstest.NewManager(t, c, fastPoll, asyncagents.WithNotifications(false))
	launch := func(prompt string) asyncagents.Task {
		t.Helper()
		task, err := m.Launch(ctx, asyncagents.LaunchInput{Caller: caller, Description: prompt, Agent: "general", Prompt: prompt})
		if err != nil {
			t.Fatal(err)
		}
		return asyncagentstest.Started(t, m, task)
	}

	own := launch("SLEEP:30")
	asyncagentstest.AwaitBusy(t, c, own.SessionID)
	if err := c.DeleteSession(ctx, own.SessionID); err != nil {
		t.Fatal(err)
	}
	_ = c.Abort(ctx, own.SessionID) // OpenCode does not stop a deleted busy session by itself
	asyncagentstest.AwaitTask(t, m, own.ID, func(tk asyncagents.Task) bool {
		return tk.Status == asyncagents.StatusCancelled && tk.Error == "session deleted"
	})

	done := launch("RUN:echo fine")
	if _, err := m.Output(ctx, caller, done.ID, asyncagents.OutputOptions{Block: true, Timeout: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	running := launch("SLEEP:30")
	if err := c.DeleteSession(ctx, caller.SessionID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, func() bool {
		l, _ := m.List(caller, "")
		return len(l) == 0
	})
	for _, id := range []string{own.ID, done.ID, running.ID} {
		if _, err := m.Get(id); !errors.Is(err, asyncagents.ErrTaskNotFound) {
			t.Errorf("task %s of a deleted parent still known: %v", id, err)
		}
	}
	waitFor(t, 15*time.Second, func() bool { return !busy(ctx, c, running.SessionID) })
}

// T-16: a permission request of a task session shows on the task until it ends.
func TestRealServerPermissionAsked(t *testing.T) {
	srv := shared.Get(t)
	c := srv.Client()
	ctx := ctxT(t, 60*time.Second)
	caller := asyncagentstest.NewParent(t, c)
	m := asyncagentstest.NewManager(t, c, fastPoll, asyncagents.WithNotifications(false))
	task, err := m.Launch(ctx, asyncagents.LaunchInput{Caller: caller, Description: "outside", Agent: "build",
		Prompt: "RUN:cat /no/such/file.txt"})
	if err != nil {
		t.Fatal(err)
	}
	got := asyncagentstest.AwaitTask(t, m, task.ID, func(tk asyncagents.Task) bool { return tk.Permission != nil })
	if got.Status != asyncagents.StatusRunning || got.Permission.Permission != "external_directory" || len(got.Permission.Patterns) == 0 {
		t.Fatalf("task = %+v, permission %+v", got, got.Permission)
	}
	cancelled, err := m.Cancel(ctx, caller, task.ID)
	if err != nil || cancelled.Permission != nil {
		t.Fatalf("Cancel = %+v, %v", cancelled, err)
	}
}

// T-17 on the real server: a depth-1 task of WithNestingDepth(2) has no rule against the
// tools; the task it launches gets the deny rule, and cannot launch further.
func TestRealServerNestingDepth(t *testing.T) {
	srv := shared.Get(t)
	c := srv.Client()
	ctx := ctxT(t, 60*time.Second)
	caller := asyncagentstest.NewParent(t, c)
	m := asyncagentstest.NewManager(t, c, fastPoll, asyncagents.WithNestingDepth(2), asyncagents.WithNotifications(false))
	in := asyncagents.LaunchInput{Caller: caller, Description: "top", Agent: "general", Prompt: "RUN:echo top"}
	top, err := m.Launch(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	top = asyncagentstest.Started(t, m, top)
	in.Caller, in.Description, in.Prompt = asyncagents.Caller{SessionID: top.SessionID}, "child", "RUN:echo child"
	child, err := m.Launch(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	child = asyncagentstest.Started(t, m, child)
	for id, want := range map[string]int{top.SessionID: 0, child.SessionID: 1} {
		s, err := c.GetSession(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, r := range s.Permission {
			if r.Permission == "asyncagents_*" && r.Action == "deny" {
				n++
			}
		}
		if n != want {
			t.Errorf("session %s: %d deny rules for the tools (%v), want %d", id, n, s.Permission, want)
		}
	}
	in.Caller = asyncagents.Caller{SessionID: child.SessionID}
	if _, err := m.Launch(ctx, in); !errors.Is(err, asyncagents.ErrNestingDepth) {
		t.Errorf("launch below the depth = %v", err)
	}
}

// T-18 on the real server: a follow-up queued while the task runs is sent when it ends.
func TestRealServerFollowUpQueue(t *testing.T) {
	srv := shared.Get(t)
	c := srv.Client()
	ctx := ctxT(t, 60*time.Second)
	caller := asyncagentstest.NewParent(t, c)
	m := asyncagentstest.NewManager(t, c, fastPoll, asyncagents.WithFollowUpQueue(1), asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply))
	task, err := m.Launch(ctx, asyncagents.LaunchInput{Caller: caller, Description: "slow", Agent: "general", Prompt: "SLEEP:5"}) // running at the resume
	if err != nil {
		t.Fatal(err)
	}
	queued, err := m.Resume(ctx, caller, task.ID, "RUN:echo follow-up-done")
	if err != nil || len(queued.FollowUps) != 1 {
		t.Fatalf("queue = %+v, %v", queued, err)
	}
	asyncagentstest.AwaitTask(t, m, task.ID, func(tk asyncagents.Task) bool {
		return tk.ResumeCount == 1 && tk.Status == asyncagents.StatusCompleted
	})
	tk, _ := m.Get(task.ID)
	if !strings.Contains(tk.Result, "follow-up-done") {
		t.Fatalf("result = %q", tk.Result)
	}
}

// T-22 on the real server: a run past its deadline is aborted and ends in error; with a stale
// timeout shorter than the run, a tool that keeps streaming output is not stale, a tool that
// says nothing for longer is.
func TestRealServerWatchdogs(t *testing.T) {
	t.Parallel()
	srv := aborting.Get(t) // it aborts busy sessions
	c := srv.Client()
	ctx := ctxT(t, 90*time.Second)
	caller := asyncagentstest.NewParent(t, c)
	m := asyncagentstest.NewManager(t, c, asyncagents.WithPollInterval(200*time.Millisecond), asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply),
		asyncagents.WithStaleTimeout(8*time.Second)) // the streaming tool's 0.5 s gaps grow on a loaded machine
	streaming, err := m.Launch(ctx, asyncagents.LaunchInput{Caller: caller, Description: "streams", Agent: "general",
		Prompt: "RUN:for i in 1 2 3 4 5 6 7 8 9 10 11 12; do echo tick $i; sleep 0.5; done"})
	if err != nil {
		t.Fatal(err)
	}
	late, err := m.Launch(ctx, asyncagents.LaunchInput{Caller: caller, Description: "late", Agent: "general",
		Prompt: "SLEEP:30", Deadline: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	silent, err := m.Launch(ctx, asyncagents.LaunchInput{Caller: caller, Description: "silent", Agent: "general", Prompt: "RUN:sleep 30"})
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{late.ID: "deadline of 2s", silent.ID: "stale: no activity"} {
		got := asyncagentstest.Await(t, m, caller, id)
		if got.Status != asyncagents.StatusError || !strings.Contains(got.Error, want) {
			t.Errorf("%s: %s %q, want error containing %q", id, got.Status, got.Error, want)
		}
		waitFor(t, 15*time.Second, func() bool { return !busy(ctx, c, id) })
	}
	if got := asyncagentstest.Await(t, m, caller, streaming.ID); got.Status != asyncagents.StatusCompleted || !strings.Contains(got.Result, "tick 12") {
		t.Errorf("streaming tool: %s %q %q", got.Status, got.Error, got.Result)
	}
}

// T-4a: one server, two projects (the server's own directory and another). Tasks launched
// from a parent session of each project, plain and forked, run in that project: their
// sessions belong to its instance, their model is told its directory, their bash runs there,
// and they complete, are notified and resume as any task, with a client scoped to the first.
func TestRealServerTasksRunInTheirProject(t *testing.T) {
	t.Parallel() // a project of its own on the shared server
	srv := shared.Get(t)
	other, err := srv.NewProject(fmt.Sprintf("other-%d", time.Now().UnixNano()))
	if err != nil {
		t.Fatal(err)
	}
	c := srv.Client() // scoped to srv.Directory, as a host's client or `asyncagents serve` is
	m := asyncagentstest.NewManager(t, c, fastPoll, asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply))
	ctx := ctxT(t, 90*time.Second)
	for _, dir := range []string{srv.Directory, other} {
		parent, err := c.CreateSession(ctx, opencode.CreateSessionRequest{Directory: dir, Title: "parent in " + filepath.Base(dir)})
		if err != nil || parent.Directory != dir {
			t.Fatalf("parent in %s = %+v, %v", dir, parent, err)
		}
		if _, err := c.Prompt(ctx, parent.ID, opencode.PromptRequest{Parts: []opencode.TextPartInput{opencode.NewText("RUN:echo parent work")}}); err != nil {
			t.Fatal(err)
		}
		caller := asyncagents.Caller{SessionID: parent.ID, Agent: "build"}
		for _, mode := range []asyncagents.ForkMode{"", asyncagents.ForkDigest, asyncagents.ForkNative} {
			fork := mode != ""
			mark := fmt.Sprintf("where am I %d", time.Now().UnixNano())
			task, err := m.Launch(ctx, asyncagents.LaunchInput{Caller: caller, Description: "where", Agent: "general", Fork: fork,
				ForkMode: mode, Prompt: mark + "\nRUN:pwd"})
			if err != nil {
				t.Fatal(err)
			}
			task = asyncagentstest.Started(t, m, task)
			if task.Directory != dir {
				t.Errorf("task of a parent in %s has directory %q", dir, task.Directory)
			}
			wantParent := parent.ID
			if mode == asyncagents.ForkNative {
				wantParent = "" // OpenCode's copy is not a child
			}
			if sess, err := c.GetSession(ctx, task.SessionID); err != nil || sess.Directory != dir || sess.ParentID != wantParent {
				t.Errorf("child session = %+v, %v; want directory %s, parent %q", sess, err, dir, wantParent)
			}
			if got := asyncagentstest.Await(t, m, caller, task.ID); got.Status != asyncagents.StatusCompleted {
				t.Fatalf("task in %s (fork %q): %s %q", dir, mode, got.Status, got.Error)
			}
			req := firstRequest(t, srv.Model, mark)
			if sys := req.System(); !strings.Contains(sys, "Working directory: "+dir+"\n") {
				t.Errorf("the task's model (parent in %s, fork %q) was told another directory:\n%.1500s", dir, mode, sys)
			}
			if out := req.ToolResultsSinceUser(); len(out) > 0 {
				t.Logf("first request's tool results: %q", out)
			}
			msgs, err := c.Messages(ctx, task.SessionID, 0)
			if err != nil {
				t.Fatal(err)
			}
			var pwd string
			for _, msg := range msgs {
				for _, p := range msg.Parts {
					if p.Type == opencode.PartTool && p.State != nil && p.State.Status == opencode.ToolCompleted {
						pwd = strings.TrimSpace(p.State.Output)
					}
				}
			}
			if pwd != dir {
				t.Errorf("bash in the task (parent in %s, fork %q) ran in %q", dir, mode, pwd)
			}
		}
		// A follow-up runs where the task does.
		tasks, _ := m.List(caller, "")
		if _, err := m.Resume(ctx, caller, tasks[0].ID, "RUN:pwd"); err != nil {
			t.Fatal(err)
		}
		if got := asyncagentstest.Await(t, m, caller, tasks[0].ID); got.Status != asyncagents.StatusCompleted || got.Directory != dir {
			t.Errorf("resumed task: %s %q in %q", got.Status, got.Error, got.Directory)
		}
		if got := asyncagentstest.AwaitNotifications(t, c, parent.ID, 4); len(got) != 4 {
			t.Errorf("parent notifications = %q, want 4", got)
		}
	}
}
