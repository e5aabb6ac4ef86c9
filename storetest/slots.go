package storetest

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/asyncagents/asyncagents"
)

// The checks of [asyncagents.SlotStore]'s contract, run by TestLeaseStore. Each check uses
// the limit key slotKey.

const slotKey = "general"

// expectSlots calls s.Slots(slotKey, limit, waiting) and compares the ids granted, in any
// order, with want; false when they differ or the call failed.
func (r *leaseRun) expectSlots(s asyncagents.SlotStore, limit int, waiting []string, when string, want ...string) bool {
	got, err := s.Slots(r.ctx, slotKey, limit, waiting)
	if err != nil {
		r.errorf("Slots(%s, %d, %v) %s: %v", slotKey, limit, waiting, when, err)
		return false
	}
	if slices.Sort(got); !slices.Equal(got, want) {
		r.errorf("Slots(%s, %d, %v) %s granted %v, want %v", slotKey, limit, waiting, when, got, want)
		return false
	}
	return true
}

// release calls s.Release(ids...); false after recording its error.
func (r *leaseRun) release(s asyncagents.SlotStore, ids ...string) bool {
	if err := s.Release(r.ctx, ids...); err != nil {
		r.errorf("Release(%s): %v", strings.Join(ids, ", "), err)
		return false
	}
	return true
}

// queue saves the tasks ids with s, queued ([asyncagents.StatusQueued]): Slots queues only
// the queued tasks its store holds. Their Started grows in the order of ids.
func (r *leaseRun) queue(s asyncagents.LeaseStore, ids ...string) bool {
	for i, id := range ids {
		t := leaseTask(id, i, "")
		t.Status = asyncagents.StatusQueued
		if !r.save(s, t) {
			return false
		}
	}
	return true
}

// end saves t with s, ended ([asyncagents.StatusCompleted]).
func (r *leaseRun) end(s asyncagents.LeaseStore, t asyncagents.Task) bool {
	t.Status = asyncagents.StatusCompleted
	return r.save(s, t)
}

// checkSlots: two stores share a limit, granted in the order the tasks were queued.
func checkSlots(r *leaseRun) {
	ss := as[asyncagents.SlotStore](r, r.storesOf(2, ""))
	if ss == nil {
		return
	}
	a, b := ss[0], ss[1]
	_ = r.queue(a, "ses_a1", "ses_a2") && r.queue(b, "ses_b1", "ses_b2") &&
		r.expectSlots(a, 2, []string{"ses_a1"}, "with 2 free", "ses_a1") &&
		r.expectSlots(b, 2, []string{"ses_b1", "ses_b2"}, "with 1 free, from another store", "ses_b1") &&
		r.expectSlots(a, 2, []string{"ses_a2"}, "with none free") &&
		r.expectSlots(b, 2, []string{"ses_b2"}, "asked again with none free") &&
		r.release(a, "ses_a1") &&
		r.expectSlots(a, 2, []string{"ses_a2"}, "after a release, ses_b2 queued before") &&
		r.expectSlots(b, 2, []string{"ses_b2"}, "after another store's Slots gave it the free slot", "ses_b2") &&
		r.release(b, "ses_b1") &&
		r.expectSlots(a, 2, []string{"ses_a2"}, "after another release", "ses_a2") &&
		r.expectSlots(a, 2, []string{"ses_a2"}, "asked again while holding one", "ses_a2")
}

// checkSlotRelease: Release gives a slot back or takes a task out of its queue.
func checkSlotRelease(r *leaseRun) {
	ss := as[asyncagents.SlotStore](r, r.storesOf(1, ""))
	if ss == nil {
		return
	}
	a := ss[0]
	_ = r.queue(a, "ses_1", "ses_2", "ses_3", "ses_o") &&
		r.expectSlots(a, 1, []string{"ses_1"}, "with 1 free", "ses_1") &&
		r.expectSlots(a, 1, []string{"ses_2", "ses_3"}, "with none free") &&
		r.release(a, "ses_2") && // queued: taken out of the queue
		r.release(a) && r.release(a, "ses_unknown") &&
		r.release(a, "ses_1") &&
		r.expectSlots(a, 1, []string{"ses_3"}, "after the one before it left the queue and the slot was given back", "ses_3")
	other, err := a.Slots(r.ctx, "other", 1, []string{"ses_o"})
	if err != nil || !slices.Equal(other, []string{"ses_o"}) {
		r.errorf("Slots(other, 1, [ses_o]) while the limit %s is full: %v, %v; want [ses_o], each key its own slots", slotKey, other, err)
	}
}

// checkSlotsFenced: a store that lost the leases of its tasks (another store claimed them once
// they expired) neither queues them, nor learns their grants, nor gives their slots back; a
// task that ended holds no slot and is not queued.
func checkSlotsFenced(r *leaseRun) {
	ss := as[asyncagents.SlotStore](r, r.storesOf(2, ""))
	if ss == nil {
		return
	}
	a, b := ss[0], ss[1]
	saved := time.Now()
	if !r.queue(a, "ses_1", "ses_2") || !r.expectSlots(a, 1, []string{"ses_1"}, "with 1 free", "ses_1") {
		return
	}
	// a stops renewing; b claims both tasks once their leases expired.
	claimed := map[string]bool{}
	r.poll(saved.Add(r.lease+grace), func() bool {
		cl, ok := r.claim(b)
		for _, t := range cl.tasks {
			claimed[t.ID] = true
		}
		return !ok || claimed["ses_1"] && claimed["ses_2"]
	})
	if !claimed["ses_1"] || !claimed["ses_2"] {
		r.errorf("tasks ses_1 and ses_2 not both claimed (%v) %v after their leases of %v could expire", claimed, grace, r.lease)
		return
	}
	// b renews before each of its steps: its leases must run for its tasks to be granted.
	renew := func() bool {
		_, err := b.Renew(r.ctx)
		if err != nil {
			r.errorf("Renew: %v", err)
		}
		return err == nil
	}
	_ = r.expectSlots(a, 1, []string{"ses_1", "ses_2"}, "of a store whose leases another store claimed") &&
		r.release(a, "ses_1") &&
		renew() && r.queue(b, "ses_3") &&
		r.expectSlots(b, 1, []string{"ses_3"}, "after a store that lost ses_1's lease gave its slot back: ses_1 holds it still") &&
		r.release(b, "ses_1") && renew() &&
		r.expectSlots(b, 1, []string{"ses_3", "ses_2"}, "after ses_1's holder gave its slot back: ses_3 was queued first, "+
			"ses_2 only by a store that had lost its lease", "ses_3") &&
		r.end(b, leaseTask("ses_3", 0, "")) && renew() &&
		r.expectSlots(b, 1, []string{"ses_2"}, "after the task holding the slot ended, without a Release", "ses_2") &&
		r.end(b, leaseTask("ses_2", 1, "")) && renew() &&
		r.expectSlots(b, 1, []string{"ses_2", "ses_3"}, "of tasks that ended")
}

// SlotsAtOnce: stores × tasks queue one at a time, the stores at once, for limit slots.
const (
	slotStores = 4
	slotTasks  = 5
	slotLimit  = 3
)

// checkSlotsAtOnce: stores asking at once never hold more than the limit, granted in each
// store's order.
func checkSlotsAtOnce(r *leaseRun) {
	ss := as[asyncagents.SlotStore](r, r.storesOf(slotStores, ""))
	if ss == nil {
		return
	}
	queues := make([][]string, len(ss)) // each store's tasks, in the order it queued them
	for i, s := range ss {
		for j := range slotTasks {
			queues[i] = append(queues[i], fmt.Sprintf("ses_s%d_%d", i, j))
		}
		if !r.queue(s, queues[i]...) {
			return
		}
	}
	var wg sync.WaitGroup
	for i, s := range ss {
		wg.Go(func() {
			for _, id := range queues[i] {
				if _, err := s.Slots(r.ctx, slotKey, slotLimit, []string{id}); err != nil {
					r.errorf("Slots(%s, %d, [%s]): %v", slotKey, slotLimit, id, err)
					return
				}
			}
		})
	}
	wg.Wait()
	first := r.granted(ss, queues, "after the stores queued their tasks at once")
	if first == nil {
		return
	}
	for i, ids := range first {
		if !r.release(ss[i], ids...) {
			return
		}
		queues[i] = queues[i][len(ids):]
	}
	r.granted(ss, queues, "after the first tasks to hold one gave them back")
}

// granted renews the leases of ss, asks each store for the slots of its queued tasks,
// queues[i] in the order it queued them, and checks that slotLimit of them hold one, the
// first of each store's queue; it returns those ids by store, or nil after recording a
// violation.
func (r *leaseRun) granted(ss []asyncagents.SlotStore, queues [][]string, when string) [][]string {
	for _, s := range ss {
		if _, err := s.Renew(r.ctx); err != nil {
			r.errorf("Renew: %v", err)
			return nil
		}
	}
	var all []string
	byStore := make([][]string, len(ss))
	for i, s := range ss {
		got, err := s.Slots(r.ctx, slotKey, slotLimit, queues[i])
		if err != nil {
			r.errorf("Slots(%s, %d, %v) %s: %v", slotKey, slotLimit, queues[i], when, err)
			return nil
		}
		first := slices.Sorted(slices.Values(queues[i][:min(len(got), len(queues[i]))]))
		if slices.Sort(got); !slices.Equal(got, first) {
			r.errorf("Slots(%s, %d, %v) %s granted %v, not the first %d of the queue", slotKey, slotLimit, queues[i], when, got, len(got))
			return nil
		}
		all = append(all, got...)
		byStore[i] = got
	}
	if len(all) != slotLimit {
		r.errorf("%s, %d tasks hold a slot of %s (%v), want the limit, %d", when, len(all), slotKey, all, slotLimit)
		return nil
	}
	return byStore
}
