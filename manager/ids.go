package manager

import (
	"fmt"
	"sort"
	"strings"
)

const (
	sessionPrefix  = "ses_"
	minIDPrefix    = 4 // characters after ses_ that an id prefix needs (SPEC T-1)
	minDisplayChar = 8 // characters after ses_ that a display id shows at least
)

// lookup locks m.mu and finds the caller's task id. On success m.mu stays locked for the
// caller to read the entry, and the caller unlocks; on error (ErrClosed or a resolve error)
// it is unlocked.
func (m *Manager) lookup(caller Caller, id string) (*entry, error) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, ErrClosed
	}
	e, err := m.resolveLocked(caller.SessionID, id)
	if err != nil {
		m.mu.Unlock()
		return nil, err
	}
	return e, nil
}

// resolveLocked finds the caller's task for id: the full id, the id without "ses_", or a
// unique prefix of at least 4 characters after "ses_" (SPEC T-1). m.mu must be held.
func (m *Manager) resolveLocked(parent, id string) (*entry, error) {
	key := strings.TrimPrefix(strings.TrimSpace(id), sessionPrefix)
	if key == "" {
		return nil, fmt.Errorf("%w: empty task id", ErrInvalidInput)
	}
	if e, ok := m.tasks[sessionPrefix+key]; ok && e.task.ParentSessionID == parent {
		return e, nil
	}
	if len(key) < minIDPrefix {
		return nil, fmt.Errorf("%w: %q (a prefix needs at least %d characters after %s)", ErrTaskNotFound, id, minIDPrefix, sessionPrefix)
	}
	var found []*entry
	for _, e := range m.byParent[parent] {
		if strings.HasPrefix(e.task.ID[len(sessionPrefix):], key) {
			found = append(found, e)
		}
	}
	switch len(found) {
	case 0:
		return nil, fmt.Errorf("%w: %q", ErrTaskNotFound, id)
	case 1:
		return found[0], nil
	}
	names := make([]string, len(found))
	for i, e := range found {
		names[i] = e.task.ID
	}
	sort.Strings(names)
	return nil, fmt.Errorf("%w: %q matches %s", ErrAmbiguousID, id, strings.Join(names, ", "))
}

// displayIDs returns the shortest unique prefix of at least 8 characters after "ses_" for
// each id, among ids (SPEC T-1).
func displayIDs(ids []string) map[string]string {
	sorted := append([]string(nil), ids...)
	sort.Strings(sorted)
	out := make(map[string]string, len(ids))
	for i, id := range sorted {
		need := 0
		if i > 0 {
			need = max(need, commonPrefix(id, sorted[i-1])+1)
		}
		if i+1 < len(sorted) {
			need = max(need, commonPrefix(id, sorted[i+1])+1)
		}
		n := max(need, len(sessionPrefix)+minDisplayChar)
		out[id] = id[:min(n, len(id))]
	}
	return out
}

func commonPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}
