package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
)

// The checks of the contracts of stores that several Managers share: the lease checks here,
// the hand-over checks in handoff.go, the slot checks in slots.go.

// TestLeaseStore runs the checks of [asyncagents.LeaseStore]'s contract on stores that open
// gives, and those of [asyncagents.HandoffStore]'s, [asyncagents.SlotStore]'s and
// [asyncagents.LimitStore]'s when its stores are ones (the checks of a contract they do not
// implement are not run), and returns
// every violation, joined with [errors.Join]; nil when the stores keep the contracts. ctx is
// passed to the stores' methods.
//
// Several stores share one database in these contracts, so open is called once per store,
// not per check: each call opens a new store, with a holder identity of its own, over the
// data of key (a database, a [SharedMemory]), which has no tasks, leases, hand-over requests
// or slots at the first call for a key. Each check has a key of its own, a short name of
// letters that is safe in a file name. server is the name that the store's Server must
// return: "" or a name such as "opencode-us-2". Every store that open gives must have the
// same lease duration, and a short one, from 300 ms to a few seconds: the checks wait for
// leases to expire, about seven times in all (with leases of 1 s, TestLeaseStore takes about
// 8 s). TestLeaseStore closes every store it gets (with Close, when the store is an
// [io.Closer]) before it returns.
//
// The checks tell time by the local clock and take the store's clock to agree with it (a
// database on the same machine, or one whose clock is kept in sync): a lease taken by a call
// that began at an instant must not expire before the lease duration has passed since. They
// wait for what is due (a lease's expiry) with a deadline of 10 s past it. A check whose own
// timing failed (a renewal that came late on a loaded machine, so that another store could
// rightly claim the task) stops there without a violation ([RunLeaseStore] logs why).
func TestLeaseStore(ctx context.Context, open func(key, server string) (asyncagents.LeaseStore, error)) error {
	var errs []error
	for _, c := range leaseChecks {
		r := &leaseRun{run: run{ctx: ctx, key: c.name}, open: open}
		c.f(r)
		r.closeAll()
		errs = append(errs, r.errs...)
	}
	return errors.Join(errs...)
}

// RunLeaseStore runs each check of [TestLeaseStore] as a subtest of t, named by its key, and
// reports its violations with t.Error; a check of a contract the stores do not implement is
// skipped, and one whose own timing failed logs why it stopped early. open is called as
// TestLeaseStore calls it, with the subtest's t, from the subtest's goroutine; it may end the
// subtest with t.Fatal. For a store on a database server, a key names a database:
//
//	dbs := map[string]string{}
//	storetest.RunLeaseStore(t, func(t *testing.T, key, server string) asyncagents.LeaseStore {
//		if dbs[key] == "" {
//			dbs[key] = newDatabase(t)
//		}
//		s, err := pgstore.Open(t.Context(), dbs[key], pgstore.Options{Lease: time.Second, Server: server})
//		if err != nil {
//			t.Fatal(err)
//		}
//		return s // RunLeaseStore closes it
//	})
func RunLeaseStore(t *testing.T, open func(t *testing.T, key, server string) asyncagents.LeaseStore) {
	t.Helper()
	for _, c := range leaseChecks {
		t.Run(c.name, func(t *testing.T) {
			r := &leaseRun{run: run{ctx: t.Context(), key: c.name}, open: func(key, server string) (asyncagents.LeaseStore, error) {
				return open(t, key, server), nil
			}}
			defer r.closeAll()
			c.f(r)
			for _, note := range r.notes {
				t.Log(note)
			}
			for _, err := range r.errs {
				t.Error(err)
			}
			if r.skip != "" && len(r.errs) == 0 {
				t.Skip(r.skip)
			}
		})
	}
}

// leaseChecks are the checks of TestLeaseStore, in order; each name is also the check's key.
var leaseChecks = []struct {
	name string
	f    func(*leaseRun)
}{
	{"SaveTakesLease", checkSaveTakesLease},
	{"Expiry", checkExpiry},
	{"Renew", checkRenew},
	{"LoadServers", checkLoadServers},
	{"Close", checkClose},
	{"Tasks", checkTasks},
	{"Handover", checkHandover},
	{"WantedExpired", checkWantedExpired},
	{"Slots", checkSlots},
	{"SlotRelease", checkSlotRelease},
	{"SlotsAtOnce", checkSlotsAtOnce},
	{"SlotsFenced", checkSlotsFenced},
	{"Changes", checkChanges},
	{"ChangesBounded", checkChangesBounded},
	{"ChangesAtOnce", checkChangesAtOnce},
	{"AdmitCap", checkAdmitCap},
	{"AdmitBudget", checkAdmitBudget},
	{"AdmitAtOnce", checkAdmitAtOnce},
}

const (
	// pollEvery is how often the checks look again for what is due.
	pollEvery = 10 * time.Millisecond
	// grace is how long past the instant something is due (a lease's expiry) the checks wait
	// for it.
	grace = 10 * time.Second
)

// leaseRun is one lease check's state: a run whose stores open gives.
type leaseRun struct {
	run
	open  func(key, server string) (asyncagents.LeaseStore, error)
	lease time.Duration // of the check's stores; 0 until one is open
	skip  string        // why the check does not apply to the stores, when it does not
	notes []string      // why the check stopped early, its own timing having failed
}

// stopped notes why the check stops early, without a violation.
func (r *leaseRun) stopped(format string, args ...any) {
	r.notes = append(r.notes, fmt.Sprintf("%s: stopped early: "+format, append([]any{r.key}, args...)...))
}

// store opens a store of server on the check's key, or returns nil after recording why there
// is none.
func (r *leaseRun) store(server string) asyncagents.LeaseStore {
	s, err := r.open(r.key, server)
	if !r.opened(s, err) {
		return nil
	}
	switch d := s.LeaseDuration(); {
	case d <= 0:
		r.errorf("LeaseDuration() = %v, want a positive duration", d)
		return nil
	case r.lease == 0:
		r.lease = d
	case d != r.lease:
		r.errorf("LeaseDuration() = %v, unlike the first store's %v: the stores must have the same", d, r.lease)
		return nil
	}
	if got := s.Server(); got != server {
		r.errorf("Server() = %q, want %q, the server it was opened for", got, server)
		return nil
	}
	return s
}

// storesOf opens n stores of server; nil when one cannot be opened.
func (r *leaseRun) storesOf(n int, server string) []asyncagents.LeaseStore {
	ss := make([]asyncagents.LeaseStore, n)
	for i := range ss {
		if ss[i] = r.store(server); ss[i] == nil {
			return nil
		}
	}
	return ss
}

// as returns stores as S (a HandoffStore, a SlotStore), or nil, with r.skip set, when the
// first is not one; a mix is a violation. It returns nil for nil stores (none could be opened).
func as[S asyncagents.LeaseStore](r *leaseRun, stores []asyncagents.LeaseStore) []S {
	if stores == nil {
		return nil
	}
	out := make([]S, len(stores))
	for i, s := range stores {
		var ok bool
		if out[i], ok = s.(S); !ok {
			name := reflect.TypeFor[S]().String()
			if i == 0 {
				r.skip = "the stores are not of type " + name
			} else {
				r.errorf("open gave a %s and a store that is not one (%T)", name, s)
			}
			return nil
		}
	}
	return out
}

// leaseTask returns FullTask(id, n) of server (Task.Server): its Started grows with n.
func leaseTask(id string, n int, server string) asyncagents.Task {
	t := FullTask(id, n)
	t.Server = server
	return t
}

// saveHeld saves t with s, checks that s holds t's lease then, and returns when the Save
// began; false when it failed.
func (r *leaseRun) saveHeld(s asyncagents.LeaseStore, t asyncagents.Task) (time.Time, bool) {
	start := time.Now()
	if !r.save(s, t) {
		return start, false
	}
	r.checkHeld(s, t.ID, start, time.Now(), "after Save")
	return start, true
}

// checkHeld checks s.Held(id) after a call that took or renewed the lease, which began at
// start and ended at end: the lease lasts the lease duration from an instant in between, and
// Held must end before it could expire, so after start and at most the lease duration after
// end.
func (r *leaseRun) checkHeld(s asyncagents.LeaseStore, id string, start, end time.Time, when string) {
	switch h := s.Held(id); {
	case h.IsZero():
		r.errorf("Held(%s) %s is the zero time, want an instant after the call began", id, when)
	case !h.After(start) || h.After(end.Add(r.lease)):
		r.errorf("Held(%s) %s is %v after the call began (it took %v), want after it began and at most the lease duration, %v, after it ended",
			id, when, h.Sub(start), end.Sub(start), r.lease)
	}
}

// checkNotHeld checks that s.Held(id) is the zero time.
func (r *leaseRun) checkNotHeld(s asyncagents.LeaseStore, id, when string) {
	if h := s.Held(id); !h.IsZero() {
		r.errorf("Held(%s) %s is %v from now, want the zero time", id, when, time.Until(h))
	}
}

// checkLost checks that Save of t with s fails with an error matching ErrLeaseLost, and that
// s holds no lease on t afterwards.
func (r *leaseRun) checkLost(s asyncagents.LeaseStore, t asyncagents.Task, when string) {
	if err := s.Save(r.ctx, t); !errors.Is(err, asyncagents.ErrLeaseLost) {
		r.errorf("Save(%s) %s: %v, want an error matching ErrLeaseLost", t.ID, when, err)
	}
	r.checkNotHeld(s, t.ID, "after Save "+when)
}

// claimCall is one Claim: the tasks it returned, and when the call began and ended.
type claimCall struct {
	tasks      []asyncagents.Task
	start, end time.Time
}

// claim calls s.Claim; false after recording its error.
func (r *leaseRun) claim(s asyncagents.LeaseStore) (claimCall, bool) {
	c := claimCall{start: time.Now()}
	var err error
	c.tasks, err = s.Claim(r.ctx)
	c.end = time.Now()
	if err != nil {
		r.errorf("Claim: %v", err)
		return c, false
	}
	r.checkOldestFirst("Claim", c.tasks)
	return c, true
}

// has reports whether task id is among tasks.
func has(tasks []asyncagents.Task, id string) bool {
	return slices.ContainsFunc(tasks, func(t asyncagents.Task) bool { return t.ID == id })
}

// idsOf returns the ids of tasks, in their order.
func idsOf(tasks []asyncagents.Task) []string {
	out := make([]string, len(tasks))
	for i, t := range tasks {
		out[i] = t.ID
	}
	return out
}

// checkOldestFirst checks that tasks, returned by call, are in the order of Started.
func (r *leaseRun) checkOldestFirst(call string, tasks []asyncagents.Task) {
	if !slices.IsSortedFunc(tasks, func(a, b asyncagents.Task) int { return a.Started.Compare(b.Started) }) {
		r.errorf("%s returned %v, not oldest first", call, idsOf(tasks))
	}
}

// sleepUntil waits until the instant at; false, after recording why, when ctx ended first.
func (r *leaseRun) sleepUntil(at time.Time) bool {
	t := time.NewTimer(time.Until(at))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.ctx.Done():
		r.errorf("stopped: %v", context.Cause(r.ctx))
		return false
	}
}

// earlier returns the earlier of a and b.
func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// poll calls f every pollEvery until it returns true (true), or until deadline passes or ctx
// ends (false).
func (r *leaseRun) poll(deadline time.Time, f func() bool) bool {
	for !f() {
		next := time.Now().Add(pollEvery)
		if !next.Before(deadline) || !r.sleepUntil(next) {
			return false
		}
	}
	return true
}
