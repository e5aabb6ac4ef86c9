package storetest

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/google/go-cmp/cmp"
)

// checkSaveTakesLease: Save of a new task takes its lease; another store's Save of it fails
// with ErrLeaseLost, and its Claim does not take it.
func checkSaveTakesLease(r *leaseRun) {
	ss := r.storesOf(2, "")
	if ss == nil {
		return
	}
	a, b := ss[0], ss[1]
	r.checkNotHeld(a, "ses_unknown", "of a task never saved")
	t := leaseTask("ses_1", 1, "")
	if _, ok := r.saveHeld(a, t); !ok {
		return
	}
	r.checkNotHeld(b, t.ID, "of a task another store holds")
	stolen := t
	stolen.Result = "saved by a store that does not hold it"
	r.checkLost(b, stolen, "of a task another store holds")
	if c, ok := r.claim(b); ok && has(c.tasks, t.ID) && c.end.Before(a.Held(t.ID)) {
		r.errorf("Claim took %s, which its holder's Held says it still holds", t.ID)
	}
	t.Result = "saved again by its holder"
	r.saveHeld(a, t)
}

// expiryOrder is the order in which checkExpiry saves its tasks, not that of their Started.
var expiryOrder = []int{4, 1, 7, 0, 8, 2, 6, 3, 5}

// checkExpiry: Claim takes a lease once it expired, not before, oldest first, each task by one
// store at a time, as its holder saved it.
func checkExpiry(r *leaseRun) {
	ss := r.storesOf(4, "")
	if ss == nil {
		return
	}
	a, claimers := ss[0], ss[1:]
	saved := map[string]asyncagents.Task{}
	began := map[string]time.Time{} // when the Save that took the lease began
	held := map[string]time.Time{}  // a's Held after that Save
	for _, n := range expiryOrder {
		t := leaseTask(fmt.Sprintf("ses_%02d", n), n, "")
		start, ok := r.saveHeld(a, t)
		if !ok {
			return
		}
		saved[t.ID], began[t.ID], held[t.ID] = t, start, a.Held(t.ID)
	}
	last := time.Now()
	stolen := saved["ses_04"]
	stolen.Result = "saved by a store that does not hold it"
	r.checkLost(claimers[0], stolen, "of a task another store holds")

	// Three stores claim at once until every lease expired and is taken.
	type taken struct {
		by    int       // which claimer
		start time.Time // when its Claim began
	}
	var mu sync.Mutex
	took := map[string]taken{}
	var wg sync.WaitGroup
	for i, c := range claimers {
		wg.Go(func() {
			r.poll(last.Add(r.lease+grace), func() bool {
				cl, ok := r.claim(c)
				mu.Lock()
				defer mu.Unlock()
				for _, t := range cl.tasks {
					r.checkExpired(c, cl, t, saved[t.ID], began[t.ID], held[t.ID])
					if first, dup := took[t.ID]; dup && cl.end.Before(first.start.Add(r.lease)) {
						r.errorf("task %s claimed by store %d, then by store %d within a lease", t.ID, first.by, i)
					}
					took[t.ID] = taken{by: i, start: cl.start}
				}
				return !ok || len(took) == len(saved)
			})
		})
	}
	wg.Wait()
	var missing []string
	for id := range saved {
		if _, ok := took[id]; !ok {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		r.errorf("tasks %v not claimed %v after their leases of %v could expire", missing, grace, r.lease)
		return
	}
	t := saved["ses_04"]
	r.checkLost(a, t, "after another store claimed it")
	r.save(claimers[took[t.ID].by], t)
}

// checkExpired checks task t, taken by Claim cl of store s: a lease taken by a Save that began
// at began, after which the holder's Held said held, of a task saved as want.
func (r *leaseRun) checkExpired(s asyncagents.LeaseStore, cl claimCall, t, want asyncagents.Task, began, held time.Time) {
	switch {
	case want.ID == "":
		r.errorf("Claim took task %s, which no store saved", t.ID)
		return
	case cl.end.Before(began.Add(r.lease)):
		r.errorf("Claim took task %s %v after the Save that took its lease began, before a lease of %v could expire",
			t.ID, cl.end.Sub(began), r.lease)
	case cl.end.Before(held):
		r.errorf("Claim took task %s %v before its holder's Held said its lease could expire", t.ID, held.Sub(cl.end))
	}
	if diff := cmp.Diff(want, t, compareTask); diff != "" {
		r.errorf("Claim took task %s unlike its holder saved it (-want +got):\n%s", t.ID, diff)
	}
	r.checkHeld(s, t.ID, cl.start, cl.end, "after Claim took it")
}

// checkRenew: Renew keeps leases from expiring, and reports the ones another store claimed
// or deleted.
func checkRenew(r *leaseRun) {
	ss := r.storesOf(3, "")
	if ss == nil {
		return
	}
	a, b, c := ss[0], ss[1], ss[2]
	t1, t2, t3 := leaseTask("ses_1", 1, ""), leaseTask("ses_2", 2, ""), leaseTask("ses_3", 3, "")
	renewed, ok := r.saveHeld(a, t1) // when the last call that extended t1's and t3's leases began
	if _, ok3 := r.saveHeld(a, t3); !ok || !ok3 {
		return
	}
	// a renews every quarter of a lease for a lease and a half; b claims after each renewal.
	for end := renewed.Add(r.lease * 3 / 2); time.Now().Before(end); {
		start := time.Now()
		lost, err := a.Renew(r.ctx)
		switch {
		case err != nil:
			r.errorf("Renew: %v", err)
			return
		case len(lost) > 0 && start.Before(renewed.Add(r.lease)):
			r.errorf("Renew reported %v lost, which no other store claimed or deleted", lost)
			return
		case len(lost) > 0:
			r.stopped("Renew began %v after the one before, later than a lease, and reported %v lost", start.Sub(renewed), lost)
			return
		}
		r.checkHeld(a, t1.ID, start, time.Now(), "after Renew")
		renewed = start
		cl, ok := r.claim(b)
		switch {
		case !ok:
			return
		case len(cl.tasks) > 0 && cl.end.Before(renewed.Add(r.lease)):
			r.errorf("Claim took %v, which its holder renewed %v before, within a lease of %v",
				idsOf(cl.tasks), cl.end.Sub(renewed), r.lease)
			return
		case len(cl.tasks) > 0:
			r.stopped("Claim ended %v after the Renew before it began, later than a lease, and took %v", cl.end.Sub(renewed), idsOf(cl.tasks))
			return
		}
		if !r.sleepUntil(start.Add(r.lease / 4)) {
			return
		}
	}
	// a stops renewing; half a lease later it saves t2, whose lease then lasts longer than
	// t1's; c deletes t3; b claims t1 when its lease expired.
	if !r.sleepUntil(renewed.Add(r.lease/2)) || !r.save(a, t2) || !r.delete(c, t3.ID) {
		return
	}
	claimed := map[string]bool{}
	r.poll(renewed.Add(r.lease+grace), func() bool {
		cl, ok := r.claim(b)
		for _, t := range cl.tasks {
			claimed[t.ID] = true
		}
		return !ok || claimed[t1.ID]
	})
	if claimed[t3.ID] {
		r.errorf("Claim took task %s, which another store deleted", t3.ID)
	}
	if !claimed[t1.ID] {
		r.errorf("task %s not claimed %v after its lease of %v could expire", t1.ID, grace, r.lease)
		return
	}
	took := slices.Sorted(maps.Keys(claimed)) // t1, and t2 too when its lease also expired (a loaded machine)
	want := slices.Sorted(slices.Values(append(slices.Clone(took), t3.ID)))
	lost, err := a.Renew(r.ctx)
	if err != nil {
		r.errorf("Renew: %v", err)
		return
	}
	if slices.Sort(lost); !slices.Equal(lost, want) {
		r.errorf("Renew after another store claimed %v and another deleted %s reported %v lost, want %v",
			took, t3.ID, lost, want)
	}
	for _, id := range want {
		r.checkNotHeld(a, id, "after Renew reported it lost")
	}
	if !claimed[t2.ID] {
		r.save(a, t2) // still held
	}
}

// checkLoadServers: a new store's Load claims the expired tasks of its server, oldest first;
// Claim takes only the tasks of the store's server.
func checkLoadServers(r *leaseRun) {
	const us, ap = "opencode-us-2", "opencode-ap-3"
	a, keeper, u, w := r.store(""), r.store(""), r.store(us), r.store(ap)
	if a == nil || keeper == nil || u == nil || w == nil {
		return
	}
	var want []asyncagents.Task // oldest first
	for _, n := range []int{3, 1, 2} {
		t := leaseTask(fmt.Sprintf("ses_%d", n), n, "")
		if !r.save(a, t) {
			return
		}
		want = append(want, t)
	}
	slices.SortFunc(want, func(a, b asyncagents.Task) int { return a.Started.Compare(b.Started) })
	tu, tw, keep := leaseTask("ses_us", 0, us), leaseTask("ses_ap", 0, ap), leaseTask("ses_keep", 0, "")
	if !r.save(u, tu) || !r.save(w, tw) {
		return
	}
	expired := time.Now().Add(r.lease) // every lease but keep's, which keeper renews
	renewed, ok := r.saveHeld(keeper, keep)
	for ok && time.Now().Before(expired) {
		if !r.sleepUntil(earlier(renewed.Add(r.lease/4), expired)) {
			return
		}
		renewed = time.Now()
		_, err := keeper.Renew(r.ctx)
		ok = err == nil
	}
	if !ok || !r.sleepUntil(expired.Add(pollEvery)) {
		return
	}
	// A store of server us claims: ses_us alone.
	if s := r.store(us); s != nil {
		if cl, ok := r.claim(s); ok {
			r.checkServer(cl.tasks, us, tu.ID, "Claim")
		}
	}
	// A new store of server "" loads a's expired tasks, oldest first: not ses_ap, nor keep.
	c := r.store("")
	if c == nil {
		return
	}
	start := time.Now()
	got, err := c.Load(r.ctx)
	end := time.Now()
	if err != nil {
		r.errorf("Load: %v", err)
		return
	}
	if has(got, keep.ID) && end.Before(renewed.Add(r.lease)) {
		r.errorf("Load of a new store took %s, which another store renewed %v before, within a lease of %v",
			keep.ID, end.Sub(renewed), r.lease)
	}
	got = slices.DeleteFunc(got, func(t asyncagents.Task) bool { return t.ID == keep.ID })
	r.checkServer(got, "", "", "Load")
	r.checkOldestFirst("Load", got)
	r.compare("Load of a new store after the leases expired", got, want)
	for _, t := range got {
		r.checkHeld(c, t.ID, start, end, "after Load took it")
	}
	// A store of server ap claims ses_ap alone.
	if s := r.store(ap); s != nil {
		if cl, ok := r.claim(s); ok {
			r.checkServer(cl.tasks, ap, tw.ID, "Claim")
		}
	}
}

// checkServer checks that call of a store of server took only tasks of that server, and took
// task id ("" for none).
func (r *leaseRun) checkServer(tasks []asyncagents.Task, server, id, call string) {
	for _, t := range tasks {
		if t.Server != server {
			r.errorf("%s of a store of server %q took task %s of server %q", call, server, t.ID, t.Server)
		}
	}
	if id != "" && !has(tasks, id) {
		r.errorf("%s of a store of server %q took %v, not %s, whose lease expired", call, server, idsOf(tasks), id)
	}
}

// checkClose: an io.Closer gives up its leases when closed.
func checkClose(r *leaseRun) {
	a := r.store("")
	if a == nil {
		return
	}
	if _, ok := a.(io.Closer); !ok {
		r.skip = "the stores are not io.Closers"
		return
	}
	t := leaseTask("ses_1", 1, "")
	start, ok := r.saveHeld(a, t)
	if !ok {
		return
	}
	r.close(a)
	b := r.store("")
	if b == nil {
		return
	}
	got, err := b.Load(r.ctx)
	end := time.Now()
	switch {
	case err != nil:
		r.errorf("Load: %v", err)
	case has(got, t.ID):
	case end.Before(start.Add(r.lease)):
		r.errorf("Load of a store opened after the holder closed took %v, not %s: Close did not give up its lease",
			idsOf(got), t.ID)
	default:
		r.stopped("Load ended %v after the Save, when the lease could have expired anyway", end.Sub(start))
	}
}
