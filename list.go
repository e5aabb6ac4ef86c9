package asyncagents

import (
	"fmt"
	"slices"
	"sort"
)

// List returns the caller's tasks, newest first, with their DisplayID set; with a status,
// only the tasks in it. Tasks of other parent sessions are never included. With a
// [HandoffStore], the caller's tasks that other hosts hold are included, read from the
// store first, and display ids are unique among the tasks of every host. Errors:
// [ErrInvalidInput] (an unknown status or an empty caller), [ErrClosed].
func (m *Manager) List(caller Caller, status Status) ([]Task, error) {
	if status != "" && !status.valid() {
		return nil, fmt.Errorf("%w: unknown status %s (queued, running, completed, error, cancelled, resumed)", ErrInvalidInput, echo(string(status)))
	}
	if err := checkCaller(caller); err != nil {
		return nil, err
	}
	remote := m.hosts.remote(caller.SessionID) // first: the ids it reads make the display ids longer
	m.mu.Lock()
	if m.tasks.closed {
		m.mu.Unlock()
		return nil, ErrClosed
	}
	var out []Task
	for _, id := range slices.Backward(m.tasks.reg.Tasks(caller.SessionID)) {
		if e := m.tasks.byID[id]; status == "" || e.task.Status == status {
			out = append(out, m.viewLocked(e))
		}
	}
	m.mu.Unlock()
	return withRemote(out, remote, status), nil
}

// withRemote adds the remote tasks in status ("" for all) to local and sorts them newest
// first (OpenCode's session ids sort newest first).
func withRemote(local, remote []Task, status Status) []Task {
	if len(remote) == 0 {
		return local
	}
	for _, t := range remote {
		if status == "" || t.Status == status {
			local = append(local, t)
		}
	}
	sort.SliceStable(local, func(i, j int) bool { return local[i].ID < local[j].ID })
	return local
}

// ListAll returns every task of the Manager, whatever its parent, newest first; with a
// status, only the tasks in that status; with a [HandoffStore], other hosts' tasks too. Unlike
// [Manager.List] it is meant for the host (a status page, a command line), not for a model. It returns [ErrInvalidInput] for an
// unknown status and [ErrClosed] after Close.
func (m *Manager) ListAll(status Status) ([]Task, error) {
	if status != "" && !status.valid() {
		return nil, fmt.Errorf("%w: unknown status %s", ErrInvalidInput, echo(string(status)))
	}
	remote := m.hosts.remote("")
	m.mu.Lock()
	if m.tasks.closed {
		m.mu.Unlock()
		return nil, ErrClosed
	}
	out := m.allLocked(status)
	m.mu.Unlock()
	return withRemote(out, remote, status), nil
}

// allLocked returns the tasks in status ("" for all), newest first.
func (m *Manager) allLocked(status Status) []Task {
	out := make([]Task, 0, len(m.tasks.byID))
	for _, e := range m.tasks.byID {
		if status == "" || e.task.Status == status {
			out = append(out, m.viewLocked(e))
		}
	}
	// OpenCode's session ids sort newest first.
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
