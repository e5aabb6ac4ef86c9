package manager

import (
	"context"
	"sync"
)

// Store keeps task records (SPEC T-19). The Manager calls it after every change, outside
// its own lock; implementations must be safe for concurrent use.
type Store interface {
	// Load returns every stored task.
	Load(ctx context.Context) ([]Task, error)
	// Save inserts or replaces a task.
	Save(ctx context.Context, t Task) error
	// Delete removes tasks; unknown ids are ignored.
	Delete(ctx context.Context, ids ...string) error
}

// MemoryStore is a Store in memory, the default. The zero value is ready.
type MemoryStore struct {
	mu    sync.Mutex
	tasks map[string]Task
}

var _ Store = (*MemoryStore)(nil)

// Load returns copies of the stored tasks.
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
