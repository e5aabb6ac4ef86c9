package asyncagents

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
)

// slots is the part of the Manager that bounds what runs: per concurrency limit ([Limits]),
// the runs holding a slot (running), the tasks queued for one in launch order (waiting) and
// the limit itself (limitOf); per parent session, its active tasks and launches on their way
// (activeOf, for WithMaxActivePerParent).
//
// With a SlotStore (shared), the store grants the slots, so that a limit bounds the tasks of
// every host on the store: a task over a limit waits in the store's queue, and grant starts
// the ones the store gives a slot. release holds the tasks whose slots (or places in a
// queue) are yet to be given back to the store, and wake asks the granting loop for a pass.
//
// Its fields are guarded by Manager.mu, but granting, which serializes grant and is never
// taken under Manager.mu (the lock order is Manager.mu's comment).
type slots struct {
	limits    Limits
	perParent int       // WithMaxActivePerParent; 0: no cap
	shared    SlotStore // nil without a SlotStore or without limits

	running  map[string]int
	waiting  map[string][]*entry
	limitOf  map[string]int
	activeOf map[string]int

	release  []string
	wake     chan struct{}
	granting sync.Mutex
}

func newSlots(cfg *config) *slots {
	s := &slots{limits: cfg.limits, perParent: cfg.perParent, running: map[string]int{}, waiting: map[string][]*entry{},
		limitOf: map[string]int{}, activeOf: map[string]int{}, wake: make(chan struct{}, 1)}
	if ss, ok := cfg.store.(SlotStore); ok && cfg.limits.any() {
		s.shared = ss
	}
	return s
}

// take decides whether e may start now: it takes a slot of e's limit and reports true, or
// queues e behind the tasks already waiting for that limit (with a SlotStore, always: the
// store grants it).
func (s *slots) take(e *entry) bool {
	return s.takeOr(e, true)
}

// takeFree takes a slot for e when one of its limit's is free here (no limit, or a local
// limit with a slot free and nobody waiting), as take does; otherwise it changes nothing.
func (s *slots) takeFree(e *entry) bool {
	return s.takeOr(e, false)
}

// takeOr is take, which with wait queues e when no slot is free.
func (s *slots) takeOr(e *entry, wait bool) bool {
	key, limit := s.limits.keyOf(e.task.Model)
	if limit == 0 {
		return true
	}
	s.limitOf[key] = limit
	if s.shared == nil && s.running[key] < limit && len(s.waiting[key]) == 0 {
		s.running[key]++
		e.slot = key
		return true
	}
	if wait {
		s.waiting[key] = append(s.waiting[key], e)
		if s.shared != nil {
			s.wakeGranter()
		}
	}
	return false
}

// restore counts e, a stored task, as New or a claim takes it in: an active first run holds
// a slot of its limit, a queued task waits for one, in the order restore is called.
func (s *slots) restore(e *entry) {
	t := &e.task
	if !t.Status.Terminal() {
		for _, p := range sessionsOf(t.ParentSessionID, t.AnchorSessionID) {
			s.activeOf[p]++
		}
	}
	key, limit := s.limits.keyOf(t.Model)
	switch {
	case t.Status.Active() && limit > 0 && t.ResumeCount == 0:
		s.limitOf[key] = limit
		s.running[key]++
		e.slot = key
	case t.Status == StatusQueued:
		s.limitOf[key] = limit
		s.waiting[key] = append(s.waiting[key], e)
	}
}

// free gives back e's slot, or takes e out of its queue, and returns the queued tasks that
// got a slot now (the caller starts them).
func (s *slots) free(e *entry) []*entry {
	key := e.slot
	shared := s.shared != nil && !e.hold.lost // a lost task's slot is its new holder's
	if key == "" {
		key, _ = s.limits.keyOf(e.task.Model)
		if i := slices.Index(s.waiting[key], e); i >= 0 {
			s.waiting[key] = slices.Delete(s.waiting[key], i, i+1)
			if shared {
				s.giveBack(e.task.ID)
			}
		}
		return nil
	}
	e.slot = ""
	s.running[key]--
	if shared {
		s.giveBack(e.task.ID)
	}
	return s.startable(key)
}

// startable takes the tasks waiting for key that fit in its limit now (none with a
// SlotStore, which grants the slots).
func (s *slots) startable(key string) []*entry {
	if s.shared != nil {
		return nil
	}
	limit := s.limitOf[key]
	var start []*entry
	for len(s.waiting[key]) > 0 && (limit == 0 || s.running[key] < limit) {
		e := s.waiting[key][0]
		s.waiting[key] = s.waiting[key][1:]
		s.running[key]++
		e.slot = key
		start = append(start, e)
	}
	return start
}

// startableAll is startable for every limit.
func (s *slots) startableAll() []*entry {
	var start []*entry
	for key := range s.waiting {
		start = append(start, s.startable(key)...)
	}
	return start
}

// position returns e's place in its queue, from 1, or 0.
func (s *slots) position(e *entry) int {
	key, _ := s.limits.keyOf(e.task.Model)
	return slices.Index(s.waiting[key], e) + 1
}

// reserve counts one more active task of parent, and of anchor when it is another session
// (the session the task counts under: Task.AnchorSessionID) — a launch on its way, or a
// resume — or returns ErrTaskLimit, counting nothing, when one of them has as many as
// WithMaxActivePerParent allows.
func (s *slots) reserve(parent, anchor string) error {
	for _, p := range sessionsOf(parent, anchor) {
		if n := s.activeOf[p]; s.perParent > 0 && n >= s.perParent {
			who := "this session has"
			if p != parent {
				who = "the session above this one that its tasks count under has"
			}
			return fmt.Errorf("%w: %s %d active tasks (queued, running or resumed), the most this host allows; "+
				"wait for one to end (a notification comes) or cancel one", ErrTaskLimit, who, n)
		}
	}
	for _, p := range sessionsOf(parent, anchor) {
		s.activeOf[p]++
	}
	return nil
}

// unreserve counts one active task fewer of parent, and of anchor when it is another session:
// a run ended, a task was removed while active, or a launch failed before its task counted.
func (s *slots) unreserve(parent, anchor string) {
	for _, p := range sessionsOf(parent, anchor) {
		if s.activeOf[p]--; s.activeOf[p] <= 0 {
			delete(s.activeOf, p)
		}
	}
}

// sessionsOf returns parent, and anchor when it is another session.
func sessionsOf(parent, anchor string) []string {
	if anchor == "" || anchor == parent {
		return []string{parent}
	}
	return []string{parent, anchor}
}

// active returns how many tasks of parent are active (queued, running or resumed) or being
// launched.
func (s *slots) active(parent string) int { return s.activeOf[parent] }

// giveBack records that task id's slot, or place in a queue, goes back to the SlotStore,
// and asks the granting loop for a pass.
func (s *slots) giveBack(id string) {
	s.release = append(s.release, id)
	s.wakeGranter()
}

// wakeGranter asks the granting loop for a pass.
func (s *slots) wakeGranter() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// grant gives the SlotStore the slots released here, then asks it, for each limit with tasks
// queued here, which of them may start, and returns those, now holding their slots and
// marked by started, which it calls under mu. mu is Manager.mu, which grant takes to read and
// change the queues (not during a request).
func (s *slots) grant(ctx context.Context, mu *sync.Mutex, logger *slog.Logger, started func([]*entry) []*entry) []*entry {
	// One at a time: another's snapshot could queue again in the store a task this one has
	// just released.
	s.granting.Lock()
	defer s.granting.Unlock()
	mu.Lock()
	release := s.release
	s.release = nil
	waiting, limit := map[string][]string{}, map[string]int{}
	for key, q := range s.waiting {
		for _, e := range q {
			waiting[key] = append(waiting[key], e.task.ID)
		}
		limit[key] = s.limitOf[key]
	}
	mu.Unlock()
	if len(release) > 0 {
		if err := s.shared.Release(ctx, release...); err != nil {
			logger.Warn("asyncagents: give back concurrency slots", "err", err)
			mu.Lock()
			s.release = append(s.release, release...)
			mu.Unlock()
		}
	}
	var start []*entry
	for _, key := range slices.Sorted(maps.Keys(waiting)) {
		granted, err := s.shared.Slots(ctx, key, limit[key], waiting[key])
		if err != nil {
			logger.Warn("asyncagents: concurrency slots", "limit", key, "err", err)
			continue
		}
		mu.Lock()
		n := len(start)
		for _, id := range granted {
			i := slices.IndexFunc(s.waiting[key], func(e *entry) bool { return e.task.ID == id })
			if i < 0 {
				continue // started, cancelled or removed meanwhile
			}
			e := s.waiting[key][i]
			s.waiting[key] = slices.Delete(s.waiting[key], i, i+1)
			s.running[key]++
			e.slot = key
			start = append(start, e)
		}
		started(start[n:])
		mu.Unlock()
	}
	return start
}
