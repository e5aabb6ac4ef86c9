package asyncagents_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/asyncagentstest"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// state is everything an operation could change: the Manager's tasks, the store's records
// and the sessions the server was asked to create.
type state struct {
	Tasks, Stored []asyncagents.Task
	Created       int64
}

// R, errors.go: every operation that returns one of the sentinel errors has changed no task
// (in the Manager and in the store) and created nothing on the server. One case per sentinel
// path of the error table; each compares the state before and after.
func TestSentinelErrorsChangeNothing(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	c := &countingClient{Client: f}
	store := &asyncagents.MemoryStore{}
	gone := asyncagentstest.NewParent(t, f)
	// A task whose session the server no longer has (deleted, or expired).
	expired := asyncagents.Task{ID: "ses_expiredexpiredexpired", ParentSessionID: gone.SessionID, BatchID: "ses_expiredexpiredexpired",
		Description: "expired", Prompt: "p", Agent: "general", Status: asyncagents.StatusCompleted, Started: time.Now(), Completed: time.Now()}
	if err := store.Save(context.Background(), expired); err != nil {
		t.Fatal(err)
	}
	m := asyncagentstest.NewManager(t, c, fastPoll, asyncagents.WithStore(store), asyncagents.WithMaxActivePerParent(3), asyncagents.WithNestingDepth(1))
	caller := asyncagentstest.NewParent(t, f)
	running := asyncagentstest.Launch(t, m, caller, "held")
	asyncagentstest.Launch(t, m, caller, "held too")
	done := asyncagentstest.Launch(t, m, caller, "ends")
	asyncagentstest.Release(t, f, done.SessionID, opencodetest.Text("done"))
	asyncagentstest.Await(t, m, caller, done.ID)
	fresh := asyncagentstest.Launch(t, m, gone, "ended, never read") // completed, its result not retrieved yet
	asyncagentstest.Release(t, f, fresh.SessionID, opencodetest.Text("unread"))
	asyncagentstest.AwaitTask(t, m, fresh.ID, func(tk asyncagents.Task) bool { return tk.Status == asyncagents.StatusCompleted })
	ctx := context.Background()
	snapshot := func() state {
		tasks, err := m.ListAll("")
		if err != nil {
			t.Fatal(err)
		}
		stored, err := store.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(stored, func(a, b asyncagents.Task) int { return strings.Compare(a.ID, b.ID) })
		return state{Tasks: tasks, Stored: stored, Created: c.snapshot()["CreateSession"]}
	}
	in := func(mod func(*asyncagents.LaunchInput)) asyncagents.LaunchInput {
		i := asyncagents.LaunchInput{Caller: caller, Description: "d", Agent: "general", Prompt: "p"}
		mod(&i)
		return i
	}
	task := tools(m)["asyncagents_task"]
	cases := []struct {
		name string
		want error
		op   func() error
	}{
		{"Launch fork+resume", asyncagents.ErrForkResumeConflict, func() error {
			_, err := m.Launch(ctx, in(func(i *asyncagents.LaunchInput) { i.Fork, i.Resume = true, running.ID }))
			return err
		}},
		{"Launch empty description", asyncagents.ErrInvalidInput, func() error {
			_, err := m.Launch(ctx, in(func(i *asyncagents.LaunchInput) { i.Description = "" }))
			return err
		}},
		{"Launch bad model", asyncagents.ErrInvalidInput, func() error {
			_, err := m.Launch(ctx, in(func(i *asyncagents.LaunchInput) { i.Model = "nomodel" }))
			return err
		}},
		{"Launch negative deadline", asyncagents.ErrInvalidInput, func() error {
			_, err := m.Launch(ctx, in(func(i *asyncagents.LaunchInput) { i.Deadline = -time.Second }))
			return err
		}},
		{"Launch unknown caller session", asyncagents.ErrInvalidInput, func() error {
			_, err := m.Launch(ctx, in(func(i *asyncagents.LaunchInput) { i.Caller.SessionID = "ses_nosuchsession" }))
			return err
		}},
		{"Launch unknown agent", asyncagents.ErrUnknownAgent, func() error {
			_, err := m.Launch(ctx, in(func(i *asyncagents.LaunchInput) { i.Caller, i.Agent = gone, "nosuchagent" }))
			return err
		}},
		{"Launch from a task at the deepest level", asyncagents.ErrNestingDepth, func() error {
			_, err := m.Launch(ctx, in(func(i *asyncagents.LaunchInput) { i.Caller.SessionID = running.SessionID }))
			return err
		}},
		{"Launch over the per-parent cap", asyncagents.ErrTaskLimit, func() error {
			if _, err := m.Launch(ctx, in(func(*asyncagents.LaunchInput) {})); err != nil { // the third active
				return err
			}
			return errors.New("unreachable")
		}},
		{"Output negative timeout", asyncagents.ErrInvalidInput, func() error {
			_, err := m.Output(ctx, caller, done.ID, asyncagents.OutputOptions{Timeout: -1})
			return err
		}},
		{"Output message limit", asyncagents.ErrInvalidInput, func() error {
			_, err := m.Output(ctx, caller, done.ID, asyncagents.OutputOptions{FullSession: true, MessageLimit: 1000})
			return err
		}},
		{"Output unknown since id of a completed task not yet retrieved", asyncagents.ErrInvalidInput, func() error {
			_, err := m.Output(ctx, gone, fresh.ID, asyncagents.OutputOptions{FullSession: true, SinceMessageID: "msg_nosuchmessage"})
			return err
		}},
		{"Output blocking with an unknown since id", asyncagents.ErrInvalidInput, func() error {
			_, err := m.Output(ctx, caller, running.ID, asyncagents.OutputOptions{Block: true, FullSession: true, SinceMessageID: "msg_nosuch"})
			return err
		}},
		{"Output unknown task", asyncagents.ErrTaskNotFound, func() error {
			_, err := m.Output(ctx, caller, "ses_nosuchtask", asyncagents.OutputOptions{})
			return err
		}},
		{"Output ambiguous prefix", asyncagents.ErrAmbiguousID, func() error {
			_, err := m.Output(ctx, caller, running.ID[:8], asyncagents.OutputOptions{})
			return err
		}},
		{"Output another parent's task", asyncagents.ErrTaskNotFound, func() error {
			_, err := m.Output(ctx, gone, done.ID, asyncagents.OutputOptions{})
			return err
		}},
		{"Resume empty prompt", asyncagents.ErrInvalidInput, func() error {
			_, err := m.Resume(ctx, caller, done.ID, " ")
			return err
		}},
		{"Resume a running task", asyncagents.ErrTaskBusy, func() error {
			_, err := m.Resume(ctx, caller, running.ID, "more")
			return err
		}},
		{"Resume a deleted session", asyncagents.ErrSessionExpired, func() error {
			_, err := m.Resume(ctx, gone, expired.ID, "more")
			return err
		}},
		{"Resume over the per-parent cap", asyncagents.ErrTaskLimit, func() error {
			_, err := m.Resume(ctx, caller, done.ID, "more") // three would be active
			return err
		}},
		{"Cancel an ended task", asyncagents.ErrNotRunning, func() error {
			_, err := m.Cancel(ctx, caller, done.ID)
			return err
		}},
		{"Cancel unknown task", asyncagents.ErrTaskNotFound, func() error {
			_, err := m.Cancel(ctx, caller, "ses_nosuchtask")
			return err
		}},
		{"Cancel empty caller", asyncagents.ErrInvalidInput, func() error {
			_, err := m.Cancel(ctx, asyncagents.Caller{}, done.ID)
			return err
		}},
		{"List unknown status", asyncagents.ErrInvalidInput, func() error {
			_, err := m.List(caller, "sleeping")
			return err
		}},
		{"ListAll unknown status", asyncagents.ErrInvalidInput, func() error {
			_, err := m.ListAll("sleeping")
			return err
		}},
		{"Subscribe bad buffer", asyncagents.ErrInvalidInput, func() error {
			_, _, err := m.Subscribe(-1)
			return err
		}},
		{"Clear empty caller", asyncagents.ErrInvalidInput, func() error {
			_, err := m.Clear(ctx, asyncagents.Caller{})
			return err
		}},
		{"Get unknown task", asyncagents.ErrTaskNotFound, func() error {
			_, err := m.Get("ses_nosuchtask")
			return err
		}},
		{"task tool bad arguments", asyncagents.ErrInvalidInput, func() error {
			_, err := task.Handler(ctx, caller, json.RawMessage(`{"prompt":"p","description":"d","agent":"general","deadline":1e300}`))
			return err
		}},
	}
	// One more active task makes the per-parent cases hit the cap (3).
	if more, err := m.Launch(ctx, in(func(*asyncagents.LaunchInput) {})); err != nil {
		t.Fatal(err)
	} else {
		asyncagentstest.Started(t, m, more)
	}
	for _, tc := range cases {
		before := snapshot()
		err := tc.op()
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
			continue
		}
		if diff := cmp.Diff(before, snapshot()); diff != "" {
			t.Errorf("%s returned %v and changed (-before +after):\n%s", tc.name, tc.want, diff)
		}
	}

	// After Close: ErrClosed, and nothing changes.
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	byID := func(a, b asyncagents.Task) int { return strings.Compare(a.ID, b.ID) }
	stored, _ := store.Load(ctx)
	slices.SortFunc(stored, byID)
	for name, op := range map[string]func() error{
		"Launch": func() error { _, err := m.Launch(ctx, in(func(*asyncagents.LaunchInput) {})); return err },
		"Output": func() error { _, err := m.Output(ctx, caller, done.ID, asyncagents.OutputOptions{}); return err },
		"Resume": func() error { _, err := m.Resume(ctx, caller, done.ID, "x"); return err },
		"Cancel": func() error { _, err := m.Cancel(ctx, caller, running.ID); return err },
		"List":   func() error { _, err := m.List(caller, ""); return err },
		"Clear":  func() error { _, err := m.Clear(ctx, caller); return err },
		"Get":    func() error { _, err := m.Get(done.ID); return err },
	} {
		if err := op(); !errors.Is(err, asyncagents.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
	after, _ := store.Load(ctx)
	if slices.SortFunc(after, byID); !cmp.Equal(stored, after) {
		t.Error("operations after Close changed the store")
	}
}
