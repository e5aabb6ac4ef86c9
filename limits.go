package asyncagents

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
)

// Limits bounds how many tasks run at once. A task counts against the limit of its model
// ("providerID/modelID", from LaunchInput.Model) when Models has one, else against its
// provider's when Providers has one, else against Default; a task launched without a model
// counts against Default. 0 means no limit. A launch over its limit returns at once with the
// task in [StatusQueued]; queued tasks start in launch order as slots free up, which happens
// whenever a run ends however it ends, or a task is cleared. Follow-ups ([Manager.Resume])
// do not wait for a slot.
type Limits struct {
	Default   int
	Providers map[string]int // by provider id
	Models    map[string]int // by "providerID/modelID"
}

func (l Limits) validate() error {
	bad := l.Default < 0
	for _, n := range l.Providers {
		bad = bad || n < 0
	}
	for _, n := range l.Models {
		bad = bad || n < 0
	}
	if bad {
		return fmt.Errorf("%w: concurrency limits must not be negative", ErrInvalidInput)
	}
	return nil
}

// any reports whether l limits anything.
func (l Limits) any() bool {
	return l.Default > 0 || slices.ContainsFunc(slices.Collect(maps.Values(l.Providers)), func(n int) bool { return n > 0 }) ||
		slices.ContainsFunc(slices.Collect(maps.Values(l.Models)), func(n int) bool { return n > 0 })
}

// keyOf returns the limit a task counts against, and its key ("" when unlimited).
func (l Limits) keyOf(model string) (key string, limit int) {
	if n, ok := l.Models[model]; ok && model != "" {
		return "model " + model, n
	}
	if prov, _, ok := strings.Cut(model, "/"); ok {
		if n, ok := l.Providers[prov]; ok {
			return "provider " + prov, n
		}
	}
	return "default", l.Default
}

// slots is the part of the Manager that bounds what runs: per concurrency limit, the runs
// holding a slot (running), the tasks queued for one in launch order (waiting) and the limit
// itself (limitOf); per parent session, its active tasks and launches on their way
// (activeOf, for WithMaxActivePerParent). Under Manager.mu.
type slots struct {
	running  map[string]int
	waiting  map[string][]*entry
	limitOf  map[string]int
	activeOf map[string]int

	// With a SlotStore (shared.go), the store grants the slots: release holds the tasks
	// whose slots (or places in a queue) are yet to be given back to it, and wake asks the
	// granting loop for a pass.
	release  []string
	wake     chan struct{}
	granting sync.Mutex // one grantSlots at a time (its own lock, never under Manager.mu)
}

// slotLocked decides whether e may start now: it takes a slot of e's limit and reports
// true, or queues e behind the tasks already waiting for that limit.
func (m *Manager) slotLocked(e *entry) bool {
	key, limit := m.cfg.limits.keyOf(e.task.Model)
	if limit == 0 {
		return true
	}
	m.slots.limitOf[key] = limit
	if m.slotStore() != nil { // the store grants it (see grantSlots)
		m.slots.waiting[key] = append(m.slots.waiting[key], e)
		m.wakeGranterLocked()
		return false
	}
	if m.slots.running[key] < limit && len(m.slots.waiting[key]) == 0 {
		m.slots.running[key]++
		e.slot = key
		return true
	}
	m.slots.waiting[key] = append(m.slots.waiting[key], e)
	return false
}

// releaseLocked gives back e's slot, or takes e out of its queue, and returns the queued
// tasks that can start now, already marked running; the caller sends their prompts with
// startQueued.
func (m *Manager) releaseLocked(e *entry) []*entry {
	key := e.slot
	shared := m.slotStore() != nil && !e.lost // a lost task's slot is its new holder's
	if key == "" {
		key, _ = m.cfg.limits.keyOf(e.task.Model)
		if i := slices.Index(m.slots.waiting[key], e); i >= 0 {
			m.slots.waiting[key] = slices.Delete(m.slots.waiting[key], i, i+1)
			if shared {
				m.slots.release = append(m.slots.release, e.task.ID)
				m.wakeGranterLocked()
			}
		}
		return nil
	}
	e.slot = ""
	m.slots.running[key]--
	if shared {
		m.slots.release = append(m.slots.release, e.task.ID)
		m.wakeGranterLocked()
	}
	return m.startableLocked(key)
}

// startableLocked takes the tasks waiting for key that fit in its limit now (none with a
// SlotStore, which grants the slots).
func (m *Manager) startableLocked(key string) []*entry {
	if m.slotStore() != nil {
		return nil
	}
	limit := m.slots.limitOf[key]
	var start []*entry
	for len(m.slots.waiting[key]) > 0 && (limit == 0 || m.slots.running[key] < limit) {
		e := m.slots.waiting[key][0]
		m.slots.waiting[key] = m.slots.waiting[key][1:]
		m.slots.running[key]++
		e.slot = key
		e.task.Status, e.task.Started = StatusRunning, m.now()
		m.changedLocked(e)
		start = append(start, e)
	}
	return start
}

// queuePositionLocked returns e's place in its queue, from 1, or 0.
func (m *Manager) queuePositionLocked(e *entry) int {
	key, _ := m.cfg.limits.keyOf(e.task.Model)
	return slices.Index(m.slots.waiting[key], e) + 1
}

// startQueued sends the prompts of queued tasks that got a slot. A Close in the middle does
// not cut a prompt off (that would fail the task, and free its slot for the next one only to
// fail that too): each is bounded by the request timeout alone.
func (m *Manager) startQueued(start []*entry) {
	for _, e := range start {
		m.persist(e)
		m.mu.Lock()
		rc := e.task.ResumeCount
		m.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(m.ctx), m.cfg.requestTimeout)
		err := m.sendPrompt(ctx, e, rc)
		cancel()
		if err != nil && !lostLease(err) { // a lost lease: its holder sends it
			m.failLaunch(e, rc, fmt.Errorf("asyncagents: send prompt of a queued task: %w", err))
		}
	}
}

// reserveLocked counts one more active task of parent — a launch on its way, or a resume —
// or returns ErrTaskLimit when parent has as many as WithMaxActivePerParent allows.
func (m *Manager) reserveLocked(parent string) error {
	if n := m.slots.activeOf[parent]; m.cfg.perParent > 0 && n >= m.cfg.perParent {
		return fmt.Errorf("%w: this session has %d active tasks (queued, running or resumed), the most this host allows; "+
			"wait for one to end (a notification comes) or cancel one", ErrTaskLimit, n)
	}
	m.slots.activeOf[parent]++
	return nil
}

// unreserveLocked counts one active task of parent fewer: a run ended, a task was removed
// while active, or a launch failed before its task counted.
func (m *Manager) unreserveLocked(parent string) {
	if m.slots.activeOf[parent]--; m.slots.activeOf[parent] <= 0 {
		delete(m.slots.activeOf, parent)
	}
}
