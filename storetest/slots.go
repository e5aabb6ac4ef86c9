package storetest

import (
	"fmt"
	"slices"
	"strings"
	"sync"

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

// checkSlots: two stores share a limit, granted in the order the tasks were queued.
func checkSlots(r *leaseRun) {
	ss := as[asyncagents.SlotStore](r, r.storesOf(2, ""))
	if ss == nil {
		return
	}
	a, b := ss[0], ss[1]
	_ = r.expectSlots(a, 2, []string{"ses_a1"}, "with 2 free", "ses_a1") &&
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
	_ = r.expectSlots(a, 1, []string{"ses_1"}, "with 1 free", "ses_1") &&
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
	var wg sync.WaitGroup
	for i, s := range ss {
		for j := range slotTasks {
			queues[i] = append(queues[i], fmt.Sprintf("ses_s%d_%d", i, j))
		}
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
	if first == nil || !r.release(ss[0], first...) {
		return
	}
	for i := range queues {
		queues[i] = slices.DeleteFunc(queues[i], func(id string) bool { return slices.Contains(first, id) })
	}
	r.granted(ss, queues, "after the first tasks to hold one gave them back")
}

// granted asks each store of ss for the slots of its queued tasks, queues[i] in the order it
// queued them, and checks that slotLimit of them hold one, the first of each store's queue;
// it returns those ids, or nil after recording a violation.
func (r *leaseRun) granted(ss []asyncagents.SlotStore, queues [][]string, when string) []string {
	var all []string
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
	}
	if len(all) != slotLimit {
		r.errorf("%s, %d tasks hold a slot of %s (%v), want the limit, %d", when, len(all), slotKey, all, slotLimit)
		return nil
	}
	return all
}
