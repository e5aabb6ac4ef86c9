package asyncagents

import (
	"context"
	"maps"
	"slices"
)

// Shared slots: with a SlotStore, a task over a concurrency limit waits in the store's queue,
// and grantSlots starts the ones the store grants a slot. It runs in Launch, for the task
// just queued, and on the granting loop: when a slot is given back here (releaseLocked
// wakes it) and every third of the lease, for the slots other hosts gave back.

// slotStore returns the Manager's store as a SlotStore when the Manager has limits, or nil.
func (m *Manager) slotStore() SlotStore {
	if !m.cfg.limits.any() {
		return nil
	}
	ss, _ := m.cfg.store.(SlotStore)
	return ss
}

// wakeGranterLocked asks the granting loop for a pass.
func (m *Manager) wakeGranterLocked() {
	select {
	case m.slots.wake <- struct{}{}:
	default:
	}
}

// grantLoop gives back released slots and starts granted tasks until the Manager closes.
func (m *Manager) grantLoop() {
	every := m.slotStore().LeaseDuration() / 3
	for {
		select {
		case <-m.stop:
			return
		case <-m.slots.wake:
		case <-m.cfg.clock.After(every):
		}
		ctx, cancel := context.WithTimeout(m.ctx, every)
		m.grantSlots(ctx)
		cancel()
	}
}

// grantSlots gives the store the slots released here, then asks it, for each limit with
// tasks queued here, which of them may start, and starts those.
func (m *Manager) grantSlots(ctx context.Context) {
	ss := m.slotStore()
	var start []*entry
	defer func() { m.startQueued(start) }()
	// One at a time: another's snapshot could queue again in the store a task this one has
	// just released.
	m.slots.granting.Lock()
	defer m.slots.granting.Unlock()
	m.mu.Lock()
	release := m.slots.release
	m.slots.release = nil
	waiting, limit := map[string][]string{}, map[string]int{}
	for key, q := range m.slots.waiting {
		for _, e := range q {
			waiting[key] = append(waiting[key], e.task.ID)
		}
		limit[key] = m.slots.limitOf[key]
	}
	m.mu.Unlock()
	if len(release) > 0 {
		if err := ss.Release(ctx, release...); err != nil {
			m.cfg.logger.Warn("asyncagents: give back concurrency slots", "err", err)
			m.mu.Lock()
			m.slots.release = append(m.slots.release, release...)
			m.mu.Unlock()
		}
	}
	for _, key := range slices.Sorted(maps.Keys(waiting)) {
		granted, err := ss.Slots(ctx, key, limit[key], waiting[key])
		if err != nil {
			m.cfg.logger.Warn("asyncagents: concurrency slots", "limit", key, "err", err)
			continue
		}
		m.mu.Lock()
		for _, id := range granted {
			e := m.tasks[id]
			i := slices.Index(m.slots.waiting[key], e)
			if e == nil || i < 0 {
				continue // started, cancelled or removed meanwhile
			}
			m.slots.waiting[key] = slices.Delete(m.slots.waiting[key], i, i+1)
			m.slots.running[key]++
			e.slot = key
			e.task.Status, e.task.Started = StatusRunning, m.now()
			m.changedLocked(e)
			start = append(start, e)
		}
		m.mu.Unlock()
	}
}
