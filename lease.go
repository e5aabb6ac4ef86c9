package asyncagents

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Leases: with a [LeaseStore], the Manager acts on a task only while its store holds the
// task's lease. leaseLoop renews the leases every third of the lease duration and claims
// expired ones every second; a task whose lease is lost (reported by Renew, or by a Save) is dropped from
// memory (dropLost), and claimed tasks are taken in as New takes stored ones (adopt).

// leaseStore returns the Manager's store as a LeaseStore, or nil.
func (m *Manager) leaseStore() LeaseStore {
	ls, _ := m.cfg.store.(LeaseStore)
	return ls
}

// heldUntil returns until when the Manager may act on task id (the zero time for always,
// without a LeaseStore), and false when it holds no lease on it.
func (m *Manager) heldUntil(id string) (time.Time, bool) {
	ls := m.leaseStore()
	if ls == nil {
		return time.Time{}, true
	}
	until := ls.Held(id)
	return until, !until.IsZero() && time.Now().Before(until)
}

// leaseCtx bounds ctx by the leases on tasks ids: it fails with ErrLeaseLost when the
// Manager does not hold one of them, and otherwise ends when the first could lapse.
func (m *Manager) leaseCtx(ctx context.Context, ids ...string) (context.Context, context.CancelFunc, error) {
	var first time.Time
	for _, id := range ids {
		until, ok := m.heldUntil(id)
		if !ok {
			return nil, nil, fmt.Errorf("%w: %s", ErrLeaseLost, id)
		}
		if !until.IsZero() && (first.IsZero() || until.Before(first)) {
			first = until
		}
	}
	if first.IsZero() {
		ctx, cancel := context.WithCancel(ctx)
		return ctx, cancel, nil
	}
	ctx, cancel := context.WithDeadline(ctx, first)
	return ctx, cancel, nil
}

// claimEvery bounds the time between two claims of expired leases, so that a dead host's
// tasks are claimed within a second of their leases' expiry.
const claimEvery = time.Second

// leaseLoop renews the leases every third of the lease duration and claims expired ones
// every claimEvery (or third of the lease, when shorter) until the Manager closes.
func (m *Manager) leaseLoop() {
	ls := m.leaseStore()
	renewEvery := ls.LeaseDuration() / 3
	every := min(renewEvery, claimEvery)
	renewed := m.now()
	for m.wait(every) {
		ctx, cancel := context.WithTimeout(m.ctx, renewEvery)
		if m.now().Sub(renewed) >= renewEvery-every/2 {
			renewed = m.now()
			lost, err := ls.Renew(ctx)
			if err != nil {
				m.cfg.logger.Warn("asyncagents: renew leases", "err", err)
			}
			if len(lost) > 0 {
				m.dropLost(lost...)
			}
		}
		claimed, err := ls.Claim(ctx)
		cancel()
		if err != nil {
			m.cfg.logger.Warn("asyncagents: claim expired leases", "err", err)
		}
		if len(claimed) > 0 {
			m.adopt(claimed)
		}
	}
}

// dropLost forgets tasks whose leases another host now holds: it stops acting on them and
// leaves their records to that host. A blocked Output on one returns [ErrTaskNotFound].
func (m *Manager) dropLost(ids ...string) {
	m.mu.Lock()
	var start []*entry
	for _, id := range ids {
		e := m.tasks[id]
		if e == nil {
			continue
		}
		m.cfg.logger.Info("asyncagents: task lease lost to another host", "task", id)
		e.lost = true
		usage := e.task.Usage
		e.task.Usage = Usage{} // not cleared: counted by its new holder
		start = append(start, m.removeLocked(e)...)
		e.task.Usage = usage
	}
	m.mu.Unlock()
	m.startQueued(start)
}

// adopt takes in tasks claimed from hosts that stopped renewing, as New takes in stored
// ones: active ones are read at once, pending notifications queued, queued tasks started
// when their limits allow, follow-ups sent.
func (m *Manager) adopt(tasks []Task) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	start, followUps := m.restore(tasks)
	m.wakeReconcilerLocked()
	m.wakeGranterLocked()
	m.mu.Unlock()
	m.startQueued(start)
	for _, e := range followUps {
		m.sendFollowUp(e)
	}
}

// lostLease reports whether err says the store no longer holds a task's lease.
func lostLease(err error) bool { return errors.Is(err, ErrLeaseLost) }
