package asyncagents

import "time"

// Hooks for the tests of package asyncagents_test; compiled only with the tests.

// StreamDecided returns how many runs m completed from what the event stream carried of
// them, without reading their messages.
func StreamDecided(m *Manager) int64 { return m.mirrors.decided.Load() }

// StreamConnection returns the number of m's stream connection that delivers events, 0 while
// none does.
func StreamConnection(m *Manager) uint64 { return m.mirrors.live.Load() }

// StreamLive reports whether m's event stream is connected and has delivered an event: runs
// launched from now on are followed on it.
func StreamLive(m *Manager) bool { return m.mirrors.live.Load() != 0 }

// SetLossGrace sets how long after a prompt_async m takes its message's absence for a loss
// (see prompt.go and notify.go). Call it before launching.
func SetLossGrace(m *Manager, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lossGrace = d
}

// FollowedParents returns how many parent sessions m follows the newest message id of.
func FollowedParents(m *Manager) int64 { return m.notes.heads.n.Load() }

// SetAfterPost has m run f after each notification's post returns and before its outcome is
// set on the task (the notifier waits for f). Call it before launching.
func SetAfterPost(m *Manager, f func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.afterPost = f
}

// Waiters returns how many blocked Outputs wait for task id's run.
func Waiters(m *Manager, id string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.tasks.byID[id]; e != nil {
		return e.waits.n
	}
	return 0
}

// FollowsOther reports whether m knows the task in session id as one another host holds.
func FollowsOther(m *Manager, id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.hosts.other(id)
	return ok
}
