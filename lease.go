package asyncagents

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/asyncagents/asyncagents/manager"
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

// leaseCtx bounds ctx by the leases on tasks ids, for a request that acts on them: it fails
// with ErrLeaseLost when the Manager does not hold one of them (or is handing it over), and
// otherwise ends when the first could lapse. The request counts as in flight on the tasks
// until cancel is called (a handover waits for it).
func (m *Manager) leaseCtx(ctx context.Context, ids ...string) (context.Context, context.CancelFunc, error) {
	ctx, cancel, acting, err := m.actOn(ctx, ids)
	if err != nil {
		return nil, nil, err
	}
	return ctx, func() {
		cancel()
		m.mu.Lock()
		releaseLocked(acting)
		m.mu.Unlock()
	}, nil
}

// postCtx is leaseCtx for a post whose outcome the caller sets on the tasks afterwards
// (a notification delivered, a turn asked): the tasks stay counted as acted on after cancel,
// in *held, until the caller has set the outcome on them and calls releaseLocked(*held). A
// handover then stores them with the outcome, never as posted but still pending.
func (m *Manager) postCtx(ctx context.Context, held *[]*entry, ids ...string) (context.Context, context.CancelFunc, error) {
	ctx, cancel, acting, err := m.actOn(ctx, ids)
	if err != nil {
		return nil, nil, err
	}
	*held = append(*held, acting...)
	return ctx, cancel, nil
}

// actOn is leaseCtx's check and count: it returns the entries of ids, each counted once more
// as acted on (entry.acting), and a context that ends when the first lease could lapse;
// without a LeaseStore, no lease bounds it and nothing is counted.
func (m *Manager) actOn(ctx context.Context, ids []string) (context.Context, context.CancelFunc, []*entry, error) {
	if m.leaseStore() == nil {
		ctx, cancel := context.WithCancel(ctx)
		return ctx, cancel, nil, nil
	}
	var first time.Time
	m.mu.Lock()
	defer m.mu.Unlock()
	var acting []*entry
	for _, id := range ids {
		until, ok := m.heldUntil(id)
		e := m.tasks[id]
		if !ok || e == nil || e.lost { // gone here (cleared, handed over): not ours to act on
			releaseLocked(acting)
			return nil, nil, nil, fmt.Errorf("%w: %s", ErrLeaseLost, id)
		}
		e.acting++
		acting = append(acting, e)
		if first.IsZero() || until.Before(first) {
			first = until
		}
	}
	ctx, cancel := context.WithDeadline(ctx, first)
	return ctx, cancel, acting, nil
}

// releaseLocked ends the count of entries as acted on, taken by actOn.
func releaseLocked(acting []*entry) {
	for _, e := range acting {
		e.acting--
	}
}

// claimEvery bounds the time between two claims of expired leases, so that a dead host's
// tasks are claimed within a second of their leases' expiry.
const claimEvery = time.Second

// leaseLoop renews the leases every third of the lease duration and claims expired ones
// every claimEvery (or third of the lease, when shorter) until the Manager closes.
func (m *Manager) leaseLoop() {
	ls := m.leaseStore()
	renewEvery, every := m.leaseEvery()
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
		if hs := m.handoffStore(); hs != nil {
			wanted, err := hs.Wanted(ctx)
			if err != nil {
				m.cfg.logger.Warn("asyncagents: tasks wanted by other hosts", "err", err)
			}
			for _, id := range wanted {
				m.mu.Lock()
				e := m.tasks[id]
				handing := e != nil && !e.lost && !m.now().Before(e.handoverAt)
				if handing {
					e.lost = true // stops new requests on it; handOver waits for the others
				}
				m.mu.Unlock()
				if handing { // on a goroutine of its own: the renewals must go on meanwhile
					m.spawn("handing a task over", func() { m.handOver(hs, e) })
				}
			}
		}
		if hs := m.handoffStore(); hs != nil {
			m.watchRemote(ctx, hs)
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

// leaseEvery returns how often the leases are renewed, and how often the lease loop looks
// (renews when due, hands over the tasks other hosts want, claims expired leases).
func (m *Manager) leaseEvery() (renew, look time.Duration) {
	renew = m.leaseStore().LeaseDuration() / 3
	return renew, min(renew, claimEvery)
}

// maxHandoverWaits bounds the wait before a failed handover is tried again, in looks of the
// lease loop: well within the time a pull waits (pullTimeout).
const maxHandoverWaits = 8

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

// handoffStore returns the Manager's store as a HandoffStore, or nil.
func (m *Manager) handoffStore() HandoffStore {
	hs, _ := m.cfg.store.(HandoffStore)
	return hs
}

// handOver gives task e, marked lost, to the host that wants it: it waits for the requests in
// flight on it (each bounded by the lease), stores its newest record, forgets it and yields
// its lease. When the record cannot be stored (the database is unreachable), it keeps the
// task and acts on it again; the other host's request, still in the store, is taken up again
// at a later look of the lease loop: the next one after the first failure, then one twice as
// long after each further failure, up to maxHandoverWaits looks' time.
func (m *Manager) handOver(hs HandoffStore, e *entry) {
	for {
		m.mu.Lock()
		n := e.acting
		m.mu.Unlock()
		if n == 0 {
			break
		}
		if !m.wait(10 * time.Millisecond) {
			return // closing: the lease expires
		}
	}
	if err := m.persist(e); err != nil {
		m.mu.Lock()
		kept := !lostLease(err) && !e.removed // lost: persist dropped it, and its new holder has it
		if kept {
			e.lost = false // renewed with the others: marked lost, no one would act on it
			_, look := m.leaseEvery()
			if m.now().Sub(e.handoverAt) > maxHandoverWaits*look { // the last failure is long past
				e.handoverWait = 0
			}
			e.handoverWait = min(max(2*e.handoverWait, look), maxHandoverWaits*look)
			e.handoverAt = m.now().Add(e.handoverWait - look/2) // due at the look that comes then
		}
		m.mu.Unlock()
		if kept {
			m.sendFollowUp(e) // one kept while it was being handed over
		}
		return
	}
	e.saveMu.Lock()
	m.mu.Lock()
	if e.removed { // cleared meanwhile: its row is deleted
		m.mu.Unlock()
		e.saveMu.Unlock()
		return
	}
	id := e.task.ID
	start := m.removeLocked(e) // no save after this one: persist now says ErrLeaseLost
	m.mu.Unlock()
	e.saveMu.Unlock()
	m.startQueued(start)
	ctx, cancel := m.requestCtx()
	defer cancel()
	if err := hs.Yield(ctx, id); err != nil {
		m.cfg.logger.Warn("asyncagents: yield a task's lease", "task", id, "err", err)
	}
	m.cfg.logger.Info("asyncagents: task handed over to another host", "task", id)
}

// pullTimeout bounds how long an operation waits for a task another host holds.
const pullTimeout = 15 * time.Second

// pull takes over the caller's task id (a full id or a prefix) from the host that holds it,
// when the Manager does not have it and its store is a HandoffStore: it asks for it and
// claims it once the holder yields it (or its lease expires), for at most pullTimeout or
// until ctx ends. It does nothing when the task is here, or is none of the caller's.
func (m *Manager) pull(ctx context.Context, caller Caller, id string) {
	hs := m.handoffStore()
	if hs == nil {
		return
	}
	m.mu.Lock()
	_, err := m.lookupLocked(caller, id)
	m.mu.Unlock()
	if !errors.Is(err, ErrTaskNotFound) {
		return
	}
	qctx, cancel := m.quickCtx()
	tasks, err := hs.Tasks(qctx, caller.SessionID)
	cancel()
	if err != nil {
		return
	}
	var ids []string
	for _, t := range tasks {
		if t.Server != m.serverName() {
			continue // a host of its own server must act on it
		}
		if t.ID == id || strings.HasPrefix(t.ID, manager.SessionPrefix+strings.TrimPrefix(strings.TrimSpace(id), manager.SessionPrefix)) {
			ids = append(ids, t.ID)
		}
	}
	if len(ids) != 1 { // none, or a prefix of several: lookupLocked says so
		return
	}
	m.pullIDs(ctx, hs, ids)
}

// pullIDs takes over tasks ids from the hosts that hold them (see pull).
func (m *Manager) pullIDs(ctx context.Context, hs HandoffStore, ids []string) {
	ctx, cancel := context.WithTimeout(ctx, pullTimeout)
	defer cancel()
	for _, id := range ids {
		if err := hs.Want(ctx, id); err != nil {
			m.cfg.logger.Warn("asyncagents: ask for a task", "task", id, "err", err)
			return
		}
	}
	for {
		claimed, err := hs.Claim(ctx)
		if err == nil && len(claimed) > 0 {
			m.adopt(claimed)
		}
		m.mu.Lock()
		here := true
		for _, id := range ids {
			here = here && m.tasks[id] != nil
		}
		m.mu.Unlock()
		if here {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-m.stop:
			return
		case <-m.cfg.clock.After(100 * time.Millisecond):
		}
	}
}

// serverName returns the name of the Manager's OpenCode server that its LeaseStore gives
// ("" without one).
func (m *Manager) serverName() string {
	if ls := m.leaseStore(); ls != nil {
		return ls.Server()
	}
	return ""
}
