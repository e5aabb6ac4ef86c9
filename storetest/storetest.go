// Package storetest checks that implementations of the stores of [asyncagents] keep their
// contracts, and has a store in memory that keeps them for tests. It is for the authors of
// stores, and of tests of hosts that share one.
//
// [TestStore] checks an [asyncagents.Store] and returns every violation; [Run] runs its checks
// as subtests. The root package runs it against [asyncagents.MemoryStore] and
// [asyncagents.FileStore]. The checks: Load of a new store is empty; Save then Load gives back
// every field of an [asyncagents.Task] (DisplayID and QueuePosition aside, which stores need
// not keep); a Save replaces the task with the same id; Delete removes tasks and ignores
// unknown ids; a few hundred tasks; Saves of different tasks from several goroutines at once;
// the tasks a store returns and the tasks it was given are copies, so changing them changes
// nothing stored; and the tasks are still there after the store is closed and opened again.
//
// [TestLeaseStore] checks the stores that several Managers share, with several stores on the
// same data: the contract of [asyncagents.LeaseStore], and those of
// [asyncagents.HandoffStore], [asyncagents.SlotStore] and [asyncagents.LimitStore] when the
// stores implement them; [RunLeaseStore] runs its checks as subtests. The checks:
//   - SaveTakesLease: Save of a new task takes its lease, and Held then gives an instant before
//     the lease could expire; Held of a task not held is the zero time; another store's Save
//     of the task returns an error matching [asyncagents.ErrLeaseLost], and its Claim takes
//     nothing.
//   - Expiry: Claim takes a lease only once it expired (not before the holder's Held says,
//     nor within the lease duration of the Save), oldest first, each task by one store at a
//     time, as its holder saved it (a refused Save stored nothing); the former holder's Save
//     then fails.
//   - Renew: Renew keeps leases from expiring, and reports those another store claimed or
//     deleted, and only those.
//   - LoadServers: a new store's Load claims the expired tasks of its server, oldest first, and
//     not those another store renews; Claim takes only the tasks of the store's Server.
//   - Close: a store that is an [io.Closer] gives up its leases when closed.
//   - Tasks: Tasks returns the tasks of a parent session, or every task, whoever holds them
//     and of every server, as copies, and takes no lease.
//   - Handover: the holder sees in Wanted the tasks another store asked for with Want; Yield
//     ends its lease at once and for good (the yielder's Renew and Save do not take it back);
//     the next Claim of the store that wants the task takes it, and another's before it does
//     not.
//   - WantedExpired: a wanted task whose lease expired is left to the store that wants it too.
//   - Slots, SlotRelease, SlotsAtOnce: Slots gives at most limit slots of a key, over all the
//     stores, to the queued tasks queued longest, in the order each store queued them, also
//     when the stores ask at once; Release gives a slot back or takes a task out of its queue;
//     each key has slots of its own.
//   - SlotsFenced: a store that lost its tasks' leases (another store claimed them once they
//     expired) neither queues them, nor learns their grants, nor gives their slots back; a
//     task that ended holds no slot, without a Release, and is not queued.
//   - Changes: Changes returns the saves, claims and removals of the tasks other stores hold,
//     not the reader's own, oldest first, with increasing numbers, as summaries (no prompt,
//     result, follow-ups or notifications); nothing, and the same number, when nothing changed;
//     a task the reader gave up and another store claimed; at most limit a call, every task
//     once when read one at a time.
//   - ChangesBounded: a change's description, error and permission request are within the
//     Manager's bounds ([asyncagents.MaxErrorChars] and the others).
//   - ChangesAtOnce: a reader that reads while three stores save at once misses no change.
//   - AdmitCap: Admit counts the active tasks of a parent, and of the session a task counts
//     under, on every store, up to the cap (ErrTaskLimit), and not those that ended; 0 is no cap.
//   - AdmitBudget: Admit and TreeUsage sum what the tasks below a session used on every store,
//     nested tasks and deleted ones included; Admit refuses a task below a session whose tree,
//     or the tree of a session above it, reached the budget (ErrBudget).
//   - AdmitAtOnce: of two launches of a parent at once on two stores under a cap of one,
//     exactly one passes.
//
// [SharedMemory] holds the data that the stores opened on it share, each a [SharedStore]: a
// store in memory that keeps pgstore's semantics (numbered changes and tombstones, fenced
// slots, limits counted over every store) and passes TestLeaseStore, for fast tests of several
// Managers on one store.
//
// The checks start goroutines only while they run, and wait for them; a SharedMemory starts
// none.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/asyncagents/asyncagents"
)

// TestStore runs every check on stores made by newStore and returns every violation,
// joined with [errors.Join]; nil when the store keeps the contract. ctx is passed to the
// store's methods.
//
// Each check calls newStore with a key of its own, a short name of letters that is safe in
// a file name, and must get an empty store. The reopen check closes its store (with Close,
// when the store is an [io.Closer]) and calls newStore again with the same key: it must
// then get a store over the same data — the same file opened again, or for a store that
// does not persist, the same store. Every store TestStore gets it closes before it
// returns.
func TestStore(ctx context.Context, newStore func(key string) (asyncagents.Store, error)) error {
	var errs []error
	for _, c := range checks {
		r := &run{ctx: ctx, key: c.name, newStore: newStore}
		c.f(r)
		r.closeAll()
		errs = append(errs, r.errs...)
	}
	return errors.Join(errs...)
}

// Run runs each check of [TestStore] as a subtest of t, named by its key, and reports its
// violations with t.Error. newStore is called as TestStore calls it, with the subtest's t;
// it may end the subtest with t.Fatal. For a store in files, the key names the file:
//
//	dir := t.TempDir()
//	storetest.Run(t, func(t *testing.T, key string) asyncagents.Store {
//		s, err := asyncagents.NewFileStore(filepath.Join(dir, key+".jsonl"))
//		if err != nil {
//			t.Fatal(err)
//		}
//		return s // Run closes it
//	})
func Run(t *testing.T, newStore func(t *testing.T, key string) asyncagents.Store) {
	t.Helper()
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			r := &run{ctx: t.Context(), key: c.name, newStore: func(key string) (asyncagents.Store, error) {
				return newStore(t, key), nil
			}}
			defer r.closeAll()
			c.f(r)
			for _, err := range r.errs {
				t.Error(err)
			}
		})
	}
}

// checks are the checks of TestStore, in order; each name is also the check's key.
var checks = []struct {
	name string
	f    func(*run)
}{
	{"Empty", checkEmpty},
	{"RoundTrip", checkRoundTrip},
	{"Replace", checkReplace},
	{"Delete", checkDelete},
	{"Many", checkMany},
	{"Concurrent", checkConcurrent},
	{"Copies", checkCopies},
	{"Reopen", checkReopen},
}

// run is one check's state: the stores it opened and the violations it found.
type run struct {
	ctx      context.Context
	key      string
	newStore func(key string) (asyncagents.Store, error)

	mu     sync.Mutex
	errs   []error
	stores []asyncagents.Store // opened and not yet closed
}

func (r *run) errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Errorf("%s: "+format, append([]any{r.key}, args...)...))
}

// open returns a store for the check's key, or nil after recording why there is none.
func (r *run) open() asyncagents.Store {
	s, err := r.newStore(r.key)
	if !r.opened(s, err) {
		return nil
	}
	return s
}

// opened takes what a factory returned: it adds s to the stores to close, or records why there
// is none (false).
func (r *run) opened(s asyncagents.Store, err error) bool {
	switch {
	case err != nil:
		r.errorf("new store: %v", err)
		return false
	case s == nil:
		r.errorf("new store: nil Store")
		return false
	}
	r.stores = append(r.stores, s)
	return true
}

// close closes s when it is an io.Closer.
func (r *run) close(s asyncagents.Store) {
	r.stores = slices.DeleteFunc(r.stores, func(o asyncagents.Store) bool { return o == s })
	if c, ok := s.(io.Closer); ok {
		if err := c.Close(); err != nil {
			r.errorf("Close: %v", err)
		}
	}
}

func (r *run) closeAll() {
	for len(r.stores) > 0 {
		r.close(r.stores[len(r.stores)-1])
	}
}

func (r *run) save(s asyncagents.Store, tasks ...asyncagents.Task) bool {
	for _, t := range tasks {
		if err := s.Save(r.ctx, t); err != nil {
			r.errorf("Save(%s): %v", t.ID, err)
			return false
		}
	}
	return true
}

func (r *run) delete(s asyncagents.Store, ids ...string) bool {
	if err := s.Delete(r.ctx, ids...); err != nil {
		r.errorf("Delete(%s): %v", strings.Join(ids, ", "), err)
		return false
	}
	return true
}

// expect loads s and compares the result, in any order, with want; what says when.
func (r *run) expect(s asyncagents.Store, what string, want ...asyncagents.Task) {
	got, err := s.Load(r.ctx)
	if err != nil {
		r.errorf("Load %s: %v", what, err)
		return
	}
	r.compare("Load "+what, got, want)
}

// compare compares tasks got, in any order, with want; what says which call, when.
func (r *run) compare(what string, got, want []asyncagents.Task) {
	byID := func(a, b asyncagents.Task) int { return strings.Compare(a.ID, b.ID) }
	got, want = slices.SortedFunc(slices.Values(got), byID), slices.SortedFunc(slices.Values(want), byID)
	ids := func(ts []asyncagents.Task) []string {
		out := make([]string, len(ts))
		for i, t := range ts {
			out[i] = t.ID
		}
		return out
	}
	if diff := cmp.Diff(ids(want), ids(got)); diff != "" {
		r.errorf("%s: task ids differ (-want +got):\n%s", what, diff)
		return
	}
	var diffs []string
	for i := range want {
		if diff := cmp.Diff(want[i], got[i], compareTask); diff != "" {
			diffs = append(diffs, fmt.Sprintf("task %s (-want +got):\n%s", want[i].ID, diff))
		}
	}
	if len(diffs) > maxDiffs {
		diffs = append(diffs[:maxDiffs], fmt.Sprintf("and %d more tasks", len(diffs)-maxDiffs))
	}
	if len(diffs) > 0 {
		r.errorf("%s: %d of %d tasks differ: %s", what, len(diffs), len(want), strings.Join(diffs, "\n"))
	}
}

// maxDiffs is how many differing tasks one violation shows.
const maxDiffs = 3

// compareTask compares times with [time.Time.Equal] (cmp uses Equal methods), empty and nil
// maps and slices alike, and ignores DisplayID and QueuePosition.
var compareTask = cmp.Options{
	cmpopts.IgnoreFields(asyncagents.Task{}, "DisplayID", "QueuePosition"),
	cmpopts.EquateEmpty(),
}

func checkEmpty(r *run) {
	if s := r.open(); s != nil {
		r.expect(s, "of a new store")
	}
}

func checkRoundTrip(r *run) {
	s := r.open()
	if s == nil {
		return
	}
	minimal := asyncagents.Task{ID: "ses_minimal", Status: asyncagents.StatusRunning}
	if r.save(s, FullTask("ses_full", 1), minimal) {
		r.expect(s, "after Save", FullTask("ses_full", 1), minimal)
	}
}

func checkReplace(r *run) {
	s := r.open()
	if s == nil {
		return
	}
	done := FullTask("ses_a", 2)
	done.Status, done.Permission, done.Progress.Tools = asyncagents.StatusCompleted, nil, nil
	if r.save(s, FullTask("ses_a", 1), FullTask("ses_b", 1), done) {
		r.expect(s, "after replacing a task", done, FullTask("ses_b", 1))
	}
}

func checkDelete(r *run) {
	s := r.open()
	if s == nil {
		return
	}
	if !r.save(s, FullTask("ses_a", 1), FullTask("ses_b", 2), FullTask("ses_c", 3)) {
		return
	}
	if r.delete(s, "ses_a", "ses_unknown") {
		r.expect(s, "after Delete(ses_a, ses_unknown)", FullTask("ses_b", 2), FullTask("ses_c", 3))
	}
	if r.delete(s) && r.delete(s, "ses_unknown") && r.delete(s, "ses_a") {
		r.expect(s, "after deleting nothing and unknown ids", FullTask("ses_b", 2), FullTask("ses_c", 3))
	}
	if r.delete(s, "ses_b", "ses_c", "ses_b") {
		r.expect(s, "after deleting every task")
	}
	if r.save(s, FullTask("ses_a", 4)) {
		r.expect(s, "after saving a deleted id again", FullTask("ses_a", 4))
	}
}

// manyTasks is how many tasks checkMany saves.
const manyTasks = 300

func checkMany(r *run) {
	s := r.open()
	if s == nil {
		return
	}
	want := map[string]asyncagents.Task{}
	for i := range manyTasks {
		t := FullTask(fmt.Sprintf("ses_%04d", i), i)
		if !r.save(s, t) {
			return
		}
		want[t.ID] = t
	}
	for i := 0; i < manyTasks; i += 3 { // replace every third, delete the next
		t := FullTask(fmt.Sprintf("ses_%04d", i), i+manyTasks)
		if !r.save(s, t) {
			return
		}
		want[t.ID] = t
		if id := fmt.Sprintf("ses_%04d", i+1); r.delete(s, id) {
			delete(want, id)
		}
	}
	r.expect(s, fmt.Sprintf("after %d saves and deletes", manyTasks+2*manyTasks/3), valuesOf(want)...)
}

// Concurrent saves: goroutines × tasks each, with one more goroutine loading meanwhile.
const (
	concurrentWriters = 8
	concurrentTasks   = 10
)

func checkConcurrent(r *run) {
	s := r.open()
	if s == nil {
		return
	}
	var wg sync.WaitGroup
	want := make([]asyncagents.Task, 0, concurrentWriters*concurrentTasks)
	for w := range concurrentWriters {
		var mine []asyncagents.Task
		for i := range concurrentTasks {
			mine = append(mine, FullTask(fmt.Sprintf("ses_w%d_%02d", w, i), w*concurrentTasks+i))
		}
		want = append(want, mine...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, t := range mine {
				// Save the task twice, as a Manager saves each change, the last one winning.
				first := t
				first.Status = asyncagents.StatusRunning
				if !r.save(s, first, t) {
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range concurrentTasks {
			if _, err := s.Load(r.ctx); err != nil {
				r.errorf("Load during Saves: %v", err)
				return
			}
		}
	}()
	wg.Wait()
	r.expect(s, "after concurrent Saves", want...)
}

func checkCopies(r *run) {
	s := r.open()
	if s == nil {
		return
	}
	t := FullTask("ses_copy", 1)
	if !r.save(s, t) {
		return
	}
	change(&t)
	r.expect(s, "after changing the task given to Save", FullTask("ses_copy", 1))
	got, err := s.Load(r.ctx)
	if err != nil || len(got) != 1 {
		r.errorf("Load: %d tasks, %v", len(got), err)
		return
	}
	change(&got[0])
	r.expect(s, "after changing a task Load returned", FullTask("ses_copy", 1))
}

// change changes t's fields and, in place, the maps, slices and pointer targets it has.
func change(t *asyncagents.Task) {
	t.Result = "changed"
	if t.Progress.Tools != nil {
		t.Progress.Tools["changed"] = 1
	}
	if len(t.Progress.LastTools) > 0 {
		t.Progress.LastTools[0] = "changed"
	}
	if t.ForkStats != nil {
		t.ForkStats.TotalChars = -1
	}
	if len(t.Notifications) > 0 {
		t.Notifications[0].Visible = "changed"
	}
	if t.Permission != nil {
		t.Permission.ID = "changed"
		if len(t.Permission.Patterns) > 0 {
			t.Permission.Patterns[0] = "changed"
		}
	}
}

func checkReopen(r *run) {
	s := r.open()
	if s == nil {
		return
	}
	b2 := FullTask("ses_b", 2)
	b2.ForkStats, b2.Forked = nil, false
	if !r.save(s, FullTask("ses_a", 1), FullTask("ses_b", 1), FullTask("ses_c", 1), b2) ||
		!r.delete(s, "ses_c") {
		return
	}
	r.close(s)
	if s = r.open(); s == nil {
		return
	}
	r.expect(s, "after reopening", FullTask("ses_a", 1), b2)
	if !r.save(s, FullTask("ses_d", 1)) || !r.delete(s, "ses_a") {
		return
	}
	r.close(s)
	if s = r.open(); s != nil {
		r.expect(s, "after changing the reopened store and reopening it again", b2, FullTask("ses_d", 1))
	}
}

func valuesOf(m map[string]asyncagents.Task) []asyncagents.Task {
	out := make([]asyncagents.Task, 0, len(m))
	for _, t := range m {
		out = append(out, t)
	}
	return out
}
