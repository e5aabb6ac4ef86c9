package asyncagents

import (
	"context"
	"slices"

	"github.com/asyncagents/asyncagents/manager"
)

// taskSet is the Manager's tasks: by id, by parent session (launch order, display ids, id
// prefixes: manager.Registry), and their batches, with what the tasks removed since New had
// used. Guarded by Manager.mu.
type taskSet struct {
	byID      map[string]*entry
	bySession map[string]*entry // by Task.SessionID, once the task has its session
	reg       manager.Registry
	batches   map[string]*batch // by batch id
	open      map[string]string // parent → its batch with active tasks
	cleared   map[string]Usage  // parent → what its tasks removed since New had used
	closed    bool              // the Manager was closed: operations return ErrClosed
	// anchored are the tasks that count under a session other than their parent
	// (Task.AnchorSessionID), by that session.
	anchored map[string][]string
}

func newTaskSet() taskSet {
	return taskSet{byID: map[string]*entry{}, bySession: map[string]*entry{}, batches: map[string]*batch{}, open: map[string]string{}, cleared: map[string]Usage{},
		anchored: map[string][]string{}}
}

// batch counts the tasks of one batch: launched by one parent while another of its tasks
// was active. Notifications report done/total.
type batch struct {
	total  int
	active int
}

// add records e's task, unless a task with its id or its session is here already (false).
func (s *taskSet) add(e *entry) bool {
	t := &e.task
	if t.SessionID != "" && s.bySession[t.SessionID] != nil || !s.reg.Add(t.ParentSessionID, t.ID) {
		return false
	}
	s.byID[t.ID] = e
	if t.SessionID != "" {
		s.bySession[t.SessionID] = e
	}
	if a := t.AnchorSessionID; a != "" {
		s.anchored[a] = append(s.anchored[a], t.ID)
	}
	return true
}

// remove forgets e's task; what it used still counts in its tree (cleared).
func (s *taskSet) remove(e *entry) {
	t := &e.task
	delete(s.byID, t.ID)
	if t.SessionID != "" && s.bySession[t.SessionID] == e {
		delete(s.bySession, t.SessionID)
	}
	s.reg.Remove(t.ID)
	if a := t.AnchorSessionID; a != "" {
		if s.anchored[a] = slices.DeleteFunc(s.anchored[a], func(id string) bool { return id == t.ID }); len(s.anchored[a]) == 0 {
			delete(s.anchored, a)
		}
	}
	if !t.Usage.IsZero() {
		s.cleared[t.anchor()] = s.cleared[t.anchor()].Add(t.Usage)
	}
}

// has reports whether task id is here.
func (s *taskSet) has(id string) bool { return s.byID[id] != nil }

// setSession records that e's task runs in session id, unless another task does (false).
func (s *taskSet) setSession(e *entry, id string) bool {
	if o := s.bySession[id]; o != nil && o != e {
		return false
	}
	e.task.SessionID = id
	s.bySession[id] = e
	return true
}

// inSession returns the task that runs in session id, or nil.
func (s *taskSet) inSession(id string) *entry { return s.bySession[id] }

// batch returns batch id, created empty when it has none.
func (s *taskSet) batch(id string) *batch {
	b := s.batches[id]
	if b == nil {
		b = &batch{}
		s.batches[id] = b
	}
	return b
}

// closeBatch ends the parent's open batch id when it has no active task left, and forgets
// it when it is empty.
func (s *taskSet) closeBatch(parent, id string, b *batch) {
	if b.active == 0 && s.open[parent] == id {
		delete(s.open, parent)
	}
	if b.total == 0 {
		delete(s.batches, id)
	}
}

// treeUsage sums the usage of the tasks below session (its own, those that count under it,
// theirs and so on), those cleared included.
func (s *taskSet) treeUsage(session string) Usage {
	var sum Usage
	next := []string{session}
	for depth := 0; len(next) > 0 && depth <= MaxNestingDepth; depth++ {
		var below []string
		for _, parent := range next {
			sum = sum.Add(s.cleared[parent])
			for _, id := range slices.Concat(s.reg.Tasks(parent), s.anchored[parent]) {
				if e := s.byID[id]; e != nil {
					sum = sum.Add(e.task.Usage)
					if e.task.SessionID != "" {
						below = append(below, e.task.SessionID)
					}
				}
			}
		}
		next = below
	}
	return sum
}

// lockTask finds the caller's task id (see taskSet.lookup), taken over first from the host
// that holds it when another does (hosts.pull), and returns it with m.mu held; on an error,
// m.mu is not held. It is how an operation on one of the caller's tasks starts.
func (m *Manager) lockTask(ctx context.Context, caller Caller, id string) (*entry, error) {
	m.hosts.pull(ctx, caller, id)
	m.mu.Lock()
	e, err := m.tasks.lookup(caller, id)
	if err != nil {
		m.mu.Unlock()
		return nil, err
	}
	return e, nil
}
