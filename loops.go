package asyncagents

import (
	"runtime/debug"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// The Manager's goroutines, and what a panic does in them.
//
// Every goroutine of a Manager is started by keep (the long-lived ones, one per part: the
// event stream, the applier of its events, the status poll, the resident reconcilers, the
// notifier) or spawn (the short-lived ones: extra reconcilers in a burst, notification
// workers, queued starts and follow-ups after New, permission answers), which count it in
// Manager.wg; Close closes stop and waits for all of them. A panic in one of them — in the
// Client, the Store, a PermissionPolicy or the Manager itself — never reaches the host:
//
//   - work for one task records the panic on that task: a reconcile ends the task in
//     StatusError with the panic's value and stack; a notification attempt counts as a
//     failed attempt and is retried;
//   - anything else is logged with its stack (WithLogger) and the goroutine goes on: a loop
//     with its next round (recoverAndLog around each round); a goroutine whose work ended by
//     a panic ends, and a long-lived one starts again after panicPause.

// panicPause is how long a long-lived goroutine that ended by a panic waits before it starts
// again.
const panicPause = time.Second

// start starts the long-lived goroutines of the Manager's parts.
func (m *Manager) start() {
	m.recon.alive, m.recon.limit = m.cfg.reconcilers, min(reconcileBurst*m.cfg.reconcilers, maxReconcilers)
	q := &eventQueue{wake: make(chan struct{}, 1)}
	m.keep("the event stream", func() { m.eventLoop(q) })
	m.keep("applying events", func() { m.applyLoop(q) })
	m.keep("the status poll", m.pollLoop)
	for range m.cfg.reconcilers {
		m.keep("a reconciler", func() { m.reconcileLoop(true) })
	}
	m.keep("the notifier", m.notifyLoop)
	if m.leaseStore() != nil {
		m.keep("renewing and claiming leases", m.leaseLoop)
	}
	if m.slotStore() != nil {
		m.keep("granting concurrency slots", m.grantLoop)
	}
}

// keep runs loop on a goroutine of the Manager's until the Manager closes: when loop returns
// by a panic, the panic is logged and loop starts again panicPause later.
func (m *Manager) keep(what string, loop func()) {
	m.spawn(what, func() {
		for !m.safely(what, loop) && m.wait(panicPause) {
		}
	})
}

// spawn runs f once on a goroutine of the Manager's, which Close waits for; a panic in f is
// logged.
func (m *Manager) spawn(what string, f func()) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.safely(what, f)
	}()
}

// safely runs f and reports whether it returned rather than panicked; a panic is logged.
func (m *Manager) safely(what string, f func()) (returned bool) {
	defer m.recoverAndLog(what)
	f()
	return true
}

// recoverAndLog is deferred around work that serves no single task: a panic there is logged
// with its stack and the goroutine goes on.
func (m *Manager) recoverAndLog(what string) {
	if r := recover(); r != nil {
		m.cfg.logger.Error("asyncagents: panic in "+what, "panic", r, "stack", string(debug.Stack()))
	}
}

// wait sleeps for d on the Manager's clock; false when the Manager is closing.
func (m *Manager) wait(d time.Duration) bool {
	select {
	case <-m.stop:
		return false
	case <-m.cfg.clock.After(d):
		return true
	}
}

func newBackoff(initial, maxInterval time.Duration) *backoff.ExponentialBackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = initial
	b.MaxInterval = maxInterval
	return b
}
