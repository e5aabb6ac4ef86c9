package asyncagents

import (
	"strings"
	"sync"
	"unicode"
)

// MaxLaunchKeyChars bounds LaunchInput.IdempotencyKey.
const MaxLaunchKeyChars = 128

// launchKeys serializes the launches that carry the same idempotency key for the same
// parent, so that the second finds the task the first made: one in flight per key.
type launchKeys struct {
	mu       sync.Mutex
	inFlight map[string]chan struct{} // parent + "\n" + key → closed when its launch returns
}

// begin waits until no launch of parent with key is in flight (or done is closed: then ok is
// false), and marks this one in flight; end ends it.
func (k *launchKeys) begin(parent, key string, done <-chan struct{}) (end func(), ok bool) {
	id := parent + "\n" + key
	for {
		k.mu.Lock()
		busy, waiting := k.inFlight[id]
		if !waiting {
			if k.inFlight == nil {
				k.inFlight = map[string]chan struct{}{}
			}
			ch := make(chan struct{})
			k.inFlight[id] = ch
			k.mu.Unlock()
			return func() {
				k.mu.Lock()
				delete(k.inFlight, id)
				k.mu.Unlock()
				close(ch)
			}, true
		}
		k.mu.Unlock()
		select {
		case <-busy:
		case <-done:
			return nil, false
		}
	}
}

// checkLaunchKey validates an idempotency key: up to MaxLaunchKeyChars printable characters,
// no spaces.
func checkLaunchKey(key string) bool {
	return len([]rune(key)) <= MaxLaunchKeyChars && !strings.ContainsFunc(key, func(r rune) bool {
		return !unicode.IsPrint(r) || unicode.IsSpace(r)
	})
}

// launchedWith returns the task of parent launched with key (the launch of a retried call),
// and whether there is one: on this host, or on another of its store as the last read of
// their changes (every second) showed it.
func (m *Manager) launchedWith(parent, key string) (Task, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range m.tasks.reg.Tasks(parent) {
		if e := m.tasks.byID[id]; e != nil && e.task.LaunchKey == key {
			return m.viewLocked(e), true
		}
	}
	t, ok := m.hosts.launched(parent, key)
	if ok {
		t.DisplayID = m.tasks.reg.DisplayID(t.ID)
	}
	return t, ok
}
