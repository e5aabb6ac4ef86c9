package asyncagents_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/asyncagentstest"
	"github.com/asyncagents/asyncagents/opencode"
)

// heldCreates holds every CreateSession until gate is closed.
type heldCreates struct {
	opencode.Client
	gate    chan struct{}
	reached chan struct{}
}

func (c *heldCreates) CreateSession(ctx context.Context, req opencode.CreateSessionRequest) (*opencode.Session, error) {
	select {
	case c.reached <- struct{}{}:
	default:
	}
	select {
	case <-c.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return c.Client.CreateSession(ctx, req)
}

// Issue 34, item 1: Launch returns the task as soon as it is recorded. While its session is
// still being made, the task is running and starting, with no session: Output shows it so,
// Steer is refused as busy, and a Cancel ends it at once, with one notification; the session
// its start makes after that is deleted and gets no prompt.
func TestLaunchReturnsBeforeItsStart(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t)
	c := &heldCreates{Client: f, gate: make(chan struct{}), reached: make(chan struct{}, 1)}
	m := asyncagentstest.NewManager(t, c, fastPoll, asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply))
	caller := asyncagentstest.NewParent(t, f)
	sessions := f.SessionCount()
	task, err := m.Launch(context.Background(), asyncagents.LaunchInput{Caller: caller, Description: "held start", Agent: "general", Prompt: "RUN:echo never"})
	if err != nil {
		t.Fatal(err)
	}
	if task.Status != asyncagents.StatusRunning || !task.Starting || task.SessionID != "" || !strings.HasPrefix(task.ID, "tsk_") {
		t.Fatalf("Launch = %+v; want a running task, starting, with no session yet", task)
	}
	select {
	case <-c.reached:
	case <-time.After(10 * time.Second):
		t.Fatal("the start never asked for the session")
	}
	out, err := m.Output(context.Background(), caller, task.ID, asyncagents.OutputOptions{FullSession: true})
	if err != nil || !out.Task.Starting || len(out.Messages) != 0 {
		t.Errorf("Output of a starting task = %+v, %v", out.Task, err)
	}
	if text := asyncagents.FormatOutput(out, time.Now()); !strings.Contains(text, "Starting:") {
		t.Errorf("the output tool's text of a starting task = %q", text)
	}
	if _, err := m.Steer(context.Background(), caller, task.ID, "change course"); !errors.Is(err, asyncagents.ErrTaskBusy) {
		t.Errorf("Steer of a starting task = %v, want ErrTaskBusy", err)
	}
	cancelled, err := m.Cancel(context.Background(), caller, task.ID)
	if err != nil || cancelled.Status != asyncagents.StatusCancelled {
		t.Fatalf("Cancel of a starting task = %+v, %v", cancelled, err)
	}
	close(c.gate) // the start makes its session now, and deletes it
	waitFor(t, 10*time.Second, func() bool { return f.SessionCount() == sessions })
	asyncagentstest.AwaitTask(t, m, task.ID, asyncagentstest.Delivered)
	if got := asyncagentstest.Notifications(t, f, caller.SessionID); len(got) != 1 {
		t.Errorf("notifications = %q, want one", got)
	}
}

// Issue 34, item 1: "A failure in that work ends the task in error with its reason and
// exactly one notification."
func TestStartFailureEndsTheTaskOnce(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t)
	m := asyncagentstest.NewManager(t, f, fastPoll, asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply))
	caller := asyncagentstest.NewParent(t, f)
	f.FailCalls("CreateSession", 1, &opencode.APIError{StatusCode: 500, Message: "disk full"})
	task, err := m.Launch(context.Background(), asyncagents.LaunchInput{Caller: caller, Description: "doomed", Agent: "general", Prompt: "x"})
	if err != nil {
		t.Fatalf("Launch = %v; a failure of the start is the task's", err)
	}
	got := asyncagentstest.Await(t, m, caller, task.ID)
	if got.Status != asyncagents.StatusError || !strings.Contains(got.Error, "create task session") || got.Starting {
		t.Errorf("task = %s %q (starting %v), want error naming the session's creation", got.Status, got.Error, got.Starting)
	}
	asyncagentstest.AwaitTask(t, m, task.ID, asyncagentstest.Delivered)
	if notes := asyncagentstest.Notifications(t, f, caller.SessionID); len(notes) != 1 {
		t.Errorf("notifications = %q, want one", notes)
	}
}

// Issue 34, item 1: "a host that stops mid-start leaves a task the next Manager finishes or
// fails, never one stuck." A record left starting (no session yet) is ended in error by the
// next Manager on the store, which tells the parent once.
func TestTaskLeftStartingEndsAtTheNextStart(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t)
	store := &asyncagents.MemoryStore{}
	caller := asyncagentstest.NewParent(t, f)
	now := time.Now()
	left := asyncagents.Task{ID: "tsk_left0000000000starting", ParentSessionID: caller.SessionID, Description: "left starting",
		Prompt: "x", Agent: "general", Status: asyncagents.StatusRunning, Starting: true, Started: now, BatchID: "tsk_left0000000000starting"}
	if err := store.Save(context.Background(), left); err != nil {
		t.Fatal(err)
	}
	m := asyncagentstest.NewManager(t, f, fastPoll, asyncagents.WithStore(store), asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply))
	got := asyncagentstest.AwaitTask(t, m, left.ID, asyncagentstest.Delivered)
	if got.Status != asyncagents.StatusError || !strings.Contains(got.Error, "while the task was starting") {
		t.Errorf("task left starting = %s %q", got.Status, got.Error)
	}
	if notes := asyncagentstest.Notifications(t, f, caller.SessionID); len(notes) != 1 {
		t.Errorf("notifications = %q, want one", notes)
	}
}
