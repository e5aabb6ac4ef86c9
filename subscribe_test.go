package asyncagents_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/asyncagentstest"
	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// The Manager's change feed (what a status page or dashboard is built on): every change in
// order, removals, a slow reader dropped without blocking the Manager.

func TestSubscribeDeliversChangesInOrder(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	m := asyncagentstest.NewManager(t, f, fastPoll)
	if !testmain.Eventually(10*time.Second, func() bool { return f.Streams() == 1 }) {
		t.Fatal("the Manager did not subscribe to the fake's events")
	}
	caller := asyncagentstest.NewParent(t, f)
	before := asyncagentstest.Launch(t, m, caller, "before")

	sub, tasks, err := m.Subscribe(0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if len(tasks) != 1 || tasks[0].ID != before.ID {
		t.Fatalf("Subscribe: tasks = %+v, want the task launched before", tasks)
	}
	task := asyncagentstest.Launch(t, m, caller, "watched")
	asyncagentstest.Release(t, f, task.SessionID, opencodetest.Bash("echo hi"), opencodetest.Text("done"))
	asyncagentstest.Await(t, m, caller, task.ID)

	var (
		last     uint64
		statuses []asyncagents.Status
		tools    int
	)
	for c := range sub.Changes() {
		if last != 0 && c.Seq != last+1 {
			t.Fatalf("Seq %d after %d: changes must come without gaps", c.Seq, last)
		}
		last = c.Seq
		if c.Task.ID != task.ID {
			continue
		}
		if c.Task.DisplayID == "" {
			t.Errorf("change %d: no display id", c.Seq)
		}
		if n := len(statuses); n == 0 || statuses[n-1] != c.Task.Status {
			statuses = append(statuses, c.Task.Status)
		}
		tools = c.Task.Progress.ToolCalls
		if c.Task.Status == asyncagents.StatusCompleted {
			break
		}
	}
	if want := []asyncagents.Status{asyncagents.StatusRunning, asyncagents.StatusCompleted}; !equalStatuses(statuses, want) {
		t.Errorf("statuses seen = %v, want %v", statuses, want)
	}
	if tools != 1 {
		t.Errorf("tool calls seen at completion = %d, want 1", tools)
	}

	if _, err := m.Clear(context.Background(), caller); err != nil {
		t.Fatal(err)
	}
	removed := map[string]bool{}
	for len(removed) < 2 {
		c := <-sub.Changes()
		if c.Removed {
			removed[c.Task.ID] = true
		}
	}
	if !removed[before.ID] || !removed[task.ID] {
		t.Errorf("removals = %v, want both tasks", removed)
	}
	sub.Close()
	sub.Close()
	for range sub.Changes() { // what was buffered, then the end
	}
	if err := sub.Err(); err != nil {
		t.Errorf("Err after Close = %v, want nil", err)
	}
}

func equalStatuses(a, b []asyncagents.Status) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A reader that does not read is dropped with ErrLagged; the Manager goes on.
func TestSubscribeSlowReaderIsDropped(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	m := asyncagentstest.NewManager(t, f, fastPoll)
	caller := asyncagentstest.NewParent(t, f)
	sub, _, err := m.Subscribe(1)
	if err != nil {
		t.Fatal(err)
	}
	var launched []string
	for range 3 {
		launched = append(launched, asyncagentstest.Launch(t, m, caller, "x").ID)
	}
	n := 0
	for range sub.Changes() {
		n++
	}
	if n != 1 || !errors.Is(sub.Err(), asyncagents.ErrLagged) {
		t.Errorf("read %d changes, Err = %v; want 1 and ErrLagged", n, sub.Err())
	}
	got, err := m.ListAll("")
	if err != nil || len(got) != 3 || got[0].ID != launched[2] || got[2].ID != launched[0] {
		t.Errorf("ListAll = %+v, %v; want the 3 tasks, newest first", got, err)
	}
}

// R: bad input and a closed Manager give typed errors.
func TestSubscribeErrors(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t)
	m := asyncagentstest.NewManager(t, f, fastPoll)
	for _, n := range []int{-1, asyncagents.MaxSubscriptionBuffer + 1} {
		if _, _, err := m.Subscribe(n); !errors.Is(err, asyncagents.ErrInvalidInput) {
			t.Errorf("Subscribe(%d) = %v, want ErrInvalidInput", n, err)
		}
	}
	if _, err := m.ListAll("bogus"); !errors.Is(err, asyncagents.ErrInvalidInput) {
		t.Errorf("ListAll(bogus) = %v, want ErrInvalidInput", err)
	}
	sub, _, err := m.Subscribe(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-sub.Changes(); ok || !errors.Is(sub.Err(), asyncagents.ErrClosed) {
		t.Errorf("after Close: Err = %v, want ErrClosed and a closed channel", sub.Err())
	}
	if _, _, err := m.Subscribe(0); !errors.Is(err, asyncagents.ErrClosed) {
		t.Errorf("Subscribe after Close = %v, want ErrClosed", err)
	}
	if _, err := m.ListAll(""); !errors.Is(err, asyncagents.ErrClosed) {
		t.Errorf("ListAll after Close = %v, want ErrClosed", err)
	}
}
