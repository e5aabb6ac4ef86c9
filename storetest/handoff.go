package storetest

import (
	"slices"
	"time"

	"github.com/asyncagents/asyncagents"
)

// The checks of [asyncagents.HandoffStore]'s contract, run by TestLeaseStore.

// expectTasks calls s.Tasks(parent) and compares the result, in any order, with want.
func (r *leaseRun) expectTasks(s asyncagents.HandoffStore, parent, when string, want ...asyncagents.Task) {
	got, err := s.Tasks(r.ctx, parent)
	if err != nil {
		r.errorf("Tasks(%q) %s: %v", parent, when, err)
		return
	}
	r.compare("Tasks("+parent+") "+when, got, want)
}

// expectWanted calls s.Wanted and compares the result, in any order, with want.
func (r *leaseRun) expectWanted(s asyncagents.HandoffStore, when string, want ...string) {
	got, err := s.Wanted(r.ctx)
	if err != nil {
		r.errorf("Wanted %s: %v", when, err)
		return
	}
	if slices.Sort(got); !slices.Equal(got, want) {
		r.errorf("Wanted %s = %v, want %v", when, got, want)
	}
}

// want calls s.Want(id); false after recording its error.
func (r *leaseRun) want(s asyncagents.HandoffStore, id string) bool {
	if err := s.Want(r.ctx, id); err != nil {
		r.errorf("Want(%s): %v", id, err)
		return false
	}
	return true
}

// wantedCase opens three HandoffStores, a, b and c: a saves t, then other, and b wants t. It
// returns nil stores when they are not HandoffStores or a call failed.
func (r *leaseRun) wantedCase(other asyncagents.Task) ([]asyncagents.HandoffStore, asyncagents.Task) {
	t := leaseTask("ses_wanted", 1, "")
	hs := as[asyncagents.HandoffStore](r, r.storesOf(3, ""))
	if hs == nil || !r.save(hs[0], t, other) || !r.want(hs[1], t.ID) {
		return nil, t
	}
	return hs, t
}

// checkTasks: Tasks returns every store's tasks of a parent, as copies, and takes no lease.
func checkTasks(r *leaseRun) {
	ss := r.storesOf(3, "")
	if ss == nil {
		return
	}
	o := r.store("opencode-us-2")
	if o == nil {
		return
	}
	hs := as[asyncagents.HandoffStore](r, append(ss, o))
	if hs == nil {
		return
	}
	a, b, reader := ss[0], ss[1], hs[2]
	of := func(id string, n int, parent, server string) asyncagents.Task {
		t := leaseTask(id, n, server)
		t.ParentSessionID = parent
		return t
	}
	t1, t2 := of("ses_1", 1, "ses_p1", ""), of("ses_2", 2, "ses_p2", "")
	t3, t4 := of("ses_3", 3, "ses_p1", ""), of("ses_4", 4, "ses_p1", "opencode-us-2")
	if !r.save(a, t1, t2) || !r.save(b, t3) || !r.save(o, t4) {
		return
	}
	r.expectTasks(reader, "ses_p1", "of tasks three stores hold", t1, t3, t4)
	r.expectTasks(reader, "", "of tasks three stores hold", t1, t2, t3, t4)
	r.expectTasks(reader, "ses_nobody", "of a parent without tasks")
	if got, err := reader.Tasks(r.ctx, "ses_p2"); err == nil && len(got) == 1 {
		change(&got[0])
		r.expectTasks(reader, "ses_p2", "after changing a task Tasks returned", t2)
	}
	r.checkNotHeld(reader, t1.ID, "after Tasks returned it")
	stolen := t1
	stolen.Result = "saved by a store that does not hold it"
	r.checkLost(reader, stolen, "of a task another store holds, after Tasks returned it")
	t1.Result = "saved again by its holder"
	if r.save(a, t1) {
		r.expectTasks(reader, "ses_p1", "after a failed Save and its holder's Save", t1, t3, t4)
	}
}

// checkHandover: Want, Wanted, Yield and Claim hand a task over to the store that wants it.
func checkHandover(r *leaseRun) {
	kept := leaseTask("ses_kept", 2, "")
	hs, t := r.wantedCase(kept)
	if hs == nil {
		return
	}
	a, b, c := hs[0], hs[1], hs[2]
	r.expectWanted(a, "of the holder of a task another store wants", t.ID)
	r.expectWanted(b, "of the store that wants a task")
	r.expectWanted(c, "of a store that neither holds nor wants a task")
	if err := a.Yield(r.ctx, t.ID); err != nil {
		r.errorf("Yield(%s): %v", t.ID, err)
		return
	}
	r.checkNotHeld(a, t.ID, "after Yield")
	// Yield is final: a's renewals and saves do not take the lease back.
	if lost, err := a.Renew(r.ctx); err != nil || len(lost) > 0 {
		r.errorf("Renew after Yield, before another store claimed or deleted a task: lost %v, %v; want none", lost, err)
	}
	r.checkLost(a, t, "after Yield")
	// The store that wants the task takes it before the others.
	other, ok := r.claim(c)
	if has(other.tasks, t.ID) {
		r.errorf("Claim of a store that did not want %s took it when its holder yielded it, before the store that did", t.ID)
	}
	cl, ok2 := r.claim(b)
	if !ok || !ok2 {
		return
	}
	if !has(cl.tasks, t.ID) {
		r.errorf("Claim of the store that wanted %s, after its holder yielded it, took %v, not %s", t.ID, idsOf(cl.tasks), t.ID)
		return
	}
	r.checkHeld(b, t.ID, cl.start, cl.end, "after Claim took it")
	r.expectWanted(a, "after the wanted task was handed over")
	r.expectWanted(b, "of the store a wanted task was handed over to")
	r.save(b, t)
	if !has(other.tasks, kept.ID) && !has(cl.tasks, kept.ID) { // its lease did not expire on a loaded machine
		r.save(a, kept) // held all along
	}
}

// checkWantedExpired: a wanted task whose lease expired goes to the store that wants it.
func checkWantedExpired(r *leaseRun) {
	// a saves t, then ctl, whose lease thus expires after t's, and stops renewing.
	ctl := leaseTask("ses_control", 2, "")
	hs, t := r.wantedCase(ctl)
	if hs == nil {
		return
	}
	b, c := hs[1], hs[2]
	// c claims until it takes ctl: t's lease expired too, but it is left to b.
	took := r.poll(time.Now().Add(r.lease+grace), func() bool {
		cl, ok := r.claim(c)
		if has(cl.tasks, t.ID) {
			r.errorf("Claim of a store that did not want %s took it when its lease expired, before the store that did", t.ID)
		}
		return !ok || has(cl.tasks, ctl.ID)
	})
	if !took {
		r.errorf("task %s not claimed %v after its lease of %v could expire", ctl.ID, grace, r.lease)
		return
	}
	if cl, ok := r.claim(b); ok && !has(cl.tasks, t.ID) {
		r.errorf("Claim of the store that wanted %s, after its lease expired, took %v, not %s", t.ID, idsOf(cl.tasks), t.ID)
	}
}
