package asyncagents

import (
	"context"
	"sync"
)

// Store keeps task records so that a new [Manager] (after a host restart) knows the tasks of
// the last one. The Manager saves a task after every change, outside its own lock, one save
// at a time per task and in order, so a later save always carries a newer record; it deletes
// the tasks that [Manager.Clear] removes. Implementations must be safe for concurrent use.
type Store interface {
	// Load returns every stored task; New calls it once.
	Load(ctx context.Context) ([]Task, error)
	// Save inserts or replaces the task with t.ID.
	Save(ctx context.Context, t Task) error
	// Delete removes tasks; unknown ids are ignored.
	Delete(ctx context.Context, ids ...string) error
}

// MemoryStore is a [Store] in memory, the default: tasks live as long as the process.
// The zero value is ready; it is safe for concurrent use.
type MemoryStore struct {
	mu    sync.Mutex
	tasks map[string]Task
}

var _ Store = (*MemoryStore)(nil)

// Load returns copies of the stored tasks, in no particular order.
func (s *MemoryStore) Load(context.Context) ([]Task, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Task, 0, len(s.tasks))
	for _, t := range s.tasks {
		out = append(out, t.clone())
	}
	return out, nil
}

// Save stores a copy of t.
func (s *MemoryStore) Save(_ context.Context, t Task) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tasks == nil {
		s.tasks = map[string]Task{}
	}
	s.tasks[t.ID] = t.clone()
	return nil
}

// Delete removes tasks by id.
func (s *MemoryStore) Delete(_ context.Context, ids ...string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		delete(s.tasks, id)
	}
	return nil
}
