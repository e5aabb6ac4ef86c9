package asyncagents

import (
	"fmt"
	"slices"
	"sort"
)

// List returns the caller's tasks, newest first, with their DisplayID set; with a status,
// only the tasks in it. Tasks of other parent sessions are never included. Errors:
// [ErrInvalidInput] (an unknown status or an empty caller), [ErrClosed].
func (m *Manager) List(caller Caller, status Status) ([]Task, error) {
	if status != "" && !status.valid() {
		return nil, fmt.Errorf("%w: unknown status %s (queued, running, completed, error, cancelled, resumed)", ErrInvalidInput, echo(string(status)))
	}
	if err := checkCaller(caller); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	var out []Task
	for _, id := range slices.Backward(m.reg.Tasks(caller.SessionID)) {
		if e := m.tasks[id]; status == "" || e.task.Status == status {
			out = append(out, m.viewLocked(e))
		}
	}
	return out, nil
}

// ListAll returns every task of the Manager, whatever its parent, newest first; with a
// status, only the tasks in that status. Unlike [Manager.List] it is meant for the host (a
// status page, a command line), not for a model. It returns [ErrInvalidInput] for an
// unknown status and [ErrClosed] after Close.
func (m *Manager) ListAll(status Status) ([]Task, error) {
	if status != "" && !status.valid() {
		return nil, fmt.Errorf("%w: unknown status %s", ErrInvalidInput, echo(string(status)))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	return m.allLocked(status), nil
}

// allLocked returns the tasks in status ("" for all), newest first.
func (m *Manager) allLocked(status Status) []Task {
	out := make([]Task, 0, len(m.tasks))
	for _, e := range m.tasks {
		if status == "" || e.task.Status == status {
			out = append(out, m.viewLocked(e))
		}
	}
	// OpenCode's session ids sort newest first.
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
