package asyncagents_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/asyncagentstest"
	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
	"github.com/asyncagents/asyncagents/pgstore"
	"github.com/asyncagents/asyncagents/storetest"
)

// Task ids are unique per parent across every host of a store, and every host resolves an id
// to the same task (issue 35, case 12), on PostgreSQL: one parent launches tasks through two
// hosts at once, so that their session ids share long prefixes; once each host has read the
// other's tasks, the display ids both hosts show are all different, and a display id shown by
// one host names, on the other, the same task (taken over from its holder).
func TestTaskIDsAreUniqueAcrossHosts(t *testing.T) {
	t.Parallel() // a database of its own
	open := sharedDatabase(t)
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	a := asyncagentstest.NewManager(t, f, asyncagents.WithStore(open()), asyncagents.WithNotifications(false))
	b := asyncagentstest.NewManager(t, f, asyncagents.WithStore(open()), asyncagents.WithNotifications(false))
	parent := asyncagentstest.NewParent(t, f)
	const each = 3
	var mu sync.Mutex
	ids := map[string]*asyncagents.Manager{} // task id → the host that launched it
	var wg sync.WaitGroup
	for _, m := range []*asyncagents.Manager{a, b} {
		for range each {
			wg.Go(func() {
				task, err := m.Launch(t.Context(), asyncagents.LaunchInput{Caller: parent, Description: "at once", Agent: "general", Prompt: "held"})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				ids[task.ID] = m
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	shown := func(m *asyncagents.Manager) map[string]string { // display id → task id
		list, err := m.List(parent, "")
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, tk := range list {
			if _, ok := ids[tk.ID]; ok {
				out[tk.DisplayID] = tk.ID
			}
		}
		return out
	}
	if !testmain.Eventually(20*time.Second, func() bool { return len(shown(a)) == 2*each && len(shown(b)) == 2*each }) {
		t.Fatalf("display ids: A shows %d different, B %d; want %d each", len(shown(a)), len(shown(b)), 2*each)
	}
	for display, id := range shown(a) {
		if ids[id] != a { // a task B launched, as A shows it: B's Output of that id is that task
			out, err := b.Output(t.Context(), parent, display, asyncagents.OutputOptions{})
			if err != nil || out.Task.ID != id {
				t.Errorf("B's Output(%s) = %s, %v; want %s", display, out.Task.ID, err, id)
			}
			continue
		}
		out, err := b.Output(t.Context(), parent, display, asyncagents.OutputOptions{})
		if err != nil || out.Task.ID != id {
			t.Errorf("B's Output of A's task %s = %s, %v; want %s", display, out.Task.ID, err, id)
		}
		break // one takeover is enough
	}
}

// Limits across hosts are global (issue 35, case 3), on PostgreSQL: with a cap of one active
// task per parent on both hosts, a parent with a task running on one host cannot start one on
// the other; with a tree budget, what a parent's cleared tasks used still counts on every host.
func TestLimitsHoldAcrossHosts(t *testing.T) {
	t.Parallel() // a database of its own
	open := sharedDatabase(t)
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	capped := []asyncagents.Option{asyncagents.WithMaxActivePerParent(1), asyncagents.WithNotifications(false)}
	a := asyncagentstest.NewManager(t, f, append(capped, asyncagents.WithStore(open()))...)
	b := asyncagentstest.NewManager(t, f, append(capped, asyncagents.WithStore(open()))...)
	parent := asyncagentstest.NewParent(t, f)
	first := asyncagentstest.Launch(t, a, parent, "held")
	_, err := b.Launch(t.Context(), asyncagents.LaunchInput{Caller: parent, Description: "second", Agent: "general", Prompt: "held"})
	if !errors.Is(err, asyncagents.ErrTaskLimit) {
		t.Errorf("a second task of the parent on the other host: %v, want ErrTaskLimit", err)
	}
	asyncagentstest.Release(t, f, first.SessionID, opencodetest.Text("done"))
	asyncagentstest.Await(t, a, parent, first.ID)
	var last error
	if !testmain.Eventually(10*time.Second, func() bool { // once A has stored the end
		_, last = b.Launch(t.Context(), asyncagents.LaunchInput{Caller: parent, Description: "now", Agent: "general", Prompt: "held"})
		return last == nil
	}) {
		t.Errorf("a task once the first ended: %v", last)
	}
	// A resume is a run that counts too: the first task, ended on A, is not resumed while B
	// runs the parent's other task, and stays as it was.
	before, err := a.Get(first.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Resume(t.Context(), parent, first.ID, "again"); !errors.Is(err, asyncagents.ErrTaskLimit) {
		t.Errorf("a resume of the parent's ended task on A while B runs another: %v, want ErrTaskLimit", err)
	}
	if after, err := a.Get(first.ID); err != nil || after.Status != asyncagents.StatusCompleted || after.ResumeCount != before.ResumeCount || after.Result != before.Result {
		t.Errorf("the task after the refused resume: %s, %d resumes, result %q, %v; want it as it was (%s, %d, %q)",
			after.Status, after.ResumeCount, after.Result, err, before.Status, before.ResumeCount, before.Result)
	}
	if st, err := f.SessionStatus(t.Context(), ""); err != nil || st[first.SessionID].Type != "" {
		t.Errorf("the session of the task after the refused resume: %+v, %v; want it idle", st[first.SessionID], err)
	}
}

// sharedDatabase starts PostgreSQL with a new database, and returns a function that opens
// one more store on it (a host's), with the tests' lease (leaseTestLease), closed when the test
// ends.
func sharedDatabase(t *testing.T) func() *pgstore.Store {
	t.Helper()
	url := sharedPG.Get(t).NewDatabase(t)
	return func() *pgstore.Store {
		s, err := pgstore.Open(t.Context(), url, pgstore.Options{Lease: leaseTestLease})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
}

// openShared opens a store on mem, closed when t ends.
func openShared(t *testing.T, mem *storetest.SharedMemory) *storetest.SharedStore {
	t.Helper()
	s, err := mem.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// unfollowed is a shared store whose change feed never has a change: a host on it knows other
// hosts' tasks only from what it reads itself (List, and an id it is asked for).
type unfollowed struct{ *storetest.SharedStore }

func (u unfollowed) Changes(_ context.Context, after uint64, _ int) ([]asyncagents.Change, uint64, error) {
	return nil, after, nil
}

// A display id that names two stored tasks is ambiguous on a host that knows only one of
// them, the other launched by another host a moment ago and not read yet: the host names both
// and takes neither over, as every host does once it has read both.
func TestPrefixOfATaskNotReadYetIsAmbiguous(t *testing.T) {
	t.Parallel()
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	mem := storetest.NewSharedMemory()
	a := asyncagentstest.NewManager(t, f, asyncagents.WithStore(openShared(t, mem)), asyncagents.WithNotifications(false))
	b := asyncagentstest.NewManager(t, f, asyncagents.WithStore(unfollowed{openShared(t, mem)}), asyncagents.WithNotifications(false))
	for range 50 { // until two launches fall in one 16 ms (task ids start with the time)
		parent := asyncagentstest.NewParent(t, f)
		first := asyncagentstest.Launch(t, a, parent, "first")
		list, err := b.List(parent, "") // b reads the first task
		if err != nil || len(list) != 1 {
			t.Fatalf("b lists %d tasks, %v", len(list), err)
		}
		shown := list[0].DisplayID
		second := asyncagentstest.Launch(t, a, parent, "second")
		if !strings.HasPrefix(second.ID, shown) {
			continue
		}
		_, err = b.Output(t.Context(), parent, shown, asyncagents.OutputOptions{})
		if !errors.Is(err, asyncagents.ErrAmbiguousID) || !strings.Contains(err.Error(), first.ID) || !strings.Contains(err.Error(), second.ID) {
			t.Fatalf("b's Output(%s), %s and %s stored, b having read only the first: %v; want ErrAmbiguousID naming both", shown, first.ID, second.ID, err)
		}
		if tk, _ := a.Get(first.ID); tk.ID != first.ID {
			t.Errorf("a no longer holds the first task")
		}
		return
	}
	t.Skip("no two launches fell in one 16 ms")
}
