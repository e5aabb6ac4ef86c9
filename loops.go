package asyncagents

import (
	"runtime/debug"
	"time"

	"github.com/cenkalti/backoff/v5"
)

func (m *Manager) start() {
	q := &eventQueue{wake: make(chan struct{}, 1)}
	m.goLoop(func() { m.eventLoop(q) })
	m.goLoop(func() { m.applyLoop(q) })
	m.goLoop(m.pollLoop)
	m.recon.alive, m.recon.limit = m.cfg.reconcilers, min(reconcileBurst*m.cfg.reconcilers, maxReconcilers)
	for range m.cfg.reconcilers {
		m.goLoop(func() { m.reconcileLoop(true) })
	}
	m.goLoop(m.notifyLoop)
}

func (m *Manager) goLoop(f func()) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		f()
	}()
}

// recoverAndLog is deferred by the background work that serves no single task: a panic
// there (in the Client, the Store or the Manager) is logged with its stack and the goroutine
// goes on with its next round. Work for one task records the panic on that task instead.
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
