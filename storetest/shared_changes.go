package storetest

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/truncate"
)

// A SharedStore's numbered changes (asyncagents.HandoffStore's Changes), as pgstore numbers
// them: every save, every change of holder (a claim by another store, a yield) and every
// removal takes the next number of its SharedMemory.

// summarize returns t as Changes gives it, as pgstore's asyncagents_summary makes it: without
// its prompt, result, follow-ups and notifications, and with its description, error and
// permission request cut to the Manager's bounds.
func summarize(t asyncagents.Task) asyncagents.Task {
	t.Prompt, t.Result, t.FollowUps, t.Notifications = "", "", nil, nil
	t.Description, _ = truncate.Prefix(t.Description, asyncagents.MaxDescriptionChars)
	t.Error, _ = truncate.Prefix(t.Error, asyncagents.MaxErrorChars)
	if t.Permission != nil {
		p := *t.Permission
		p.Permission, _ = truncate.Prefix(p.Permission, asyncagents.MaxPatternChars)
		if p.Patterns != nil {
			p.Patterns = slices.Clone(p.Patterns[:min(len(p.Patterns), asyncagents.MaxPermissionPatterns)])
			for i := range p.Patterns {
				p.Patterns[i], _ = truncate.Prefix(p.Patterns[i], asyncagents.MaxPatternChars)
			}
		}
		t.Permission = &p
	}
	return t
}

// Changes returns, oldest first and at most limit of them, the changes of the tasks that other
// stores hold numbered after after (0: every such task as it is now, and no removals), and the
// number to ask after next time: that of the last change read, this store's own included
// (they are passed over), or after when there is nothing new. A change's Task is the task's
// summary (see [asyncagents.HandoffStore]); a removal's has only its ID. Errors: a limit under
// 1 (matching [asyncagents.ErrInvalidInput]); after numbered past the SharedMemory's last
// change, or older than the tombstones pruned since (kept an hour), matching
// [asyncagents.ErrLagged]; after Close.
func (s *SharedStore) Changes(_ context.Context, after uint64, limit int) ([]asyncagents.Change, uint64, error) {
	if limit < 1 {
		return nil, after, fmt.Errorf("%w: storetest: changes limit %d is under 1", asyncagents.ErrInvalidInput, limit)
	}
	if _, err := s.lock(); err != nil {
		return nil, after, err
	}
	defer s.unlock()
	m := s.mem
	switch {
	case after > m.changes:
		return nil, after, fmt.Errorf("%w: storetest: changes after %d: the SharedMemory's are numbered up to %d", asyncagents.ErrLagged, after, m.changes)
	case after > 0 && after < m.pruned:
		return nil, after, fmt.Errorf("%w: storetest: changes after %d: the removals up to %d were pruned", asyncagents.ErrLagged, after, m.pruned)
	}
	type entry struct {
		seq     uint64
		id      string
		holder  int64
		summary []byte // nil for a removal
	}
	var all []entry
	for id, row := range m.tasks {
		if row.seq > after {
			all = append(all, entry{row.seq, id, row.holder, row.summary})
		}
	}
	for id, ts := range m.removed {
		if after > 0 && ts.seq > after {
			all = append(all, entry{ts.seq, id, ts.holder, nil})
		}
	}
	slices.SortFunc(all, func(a, b entry) int { return cmp.Compare(a.seq, b.seq) })
	var out []asyncagents.Change
	next := after
	for _, e := range all[:min(limit, len(all))] {
		next = e.seq
		if e.holder == s.holder {
			continue
		}
		c := asyncagents.Change{Seq: e.seq, Task: asyncagents.Task{ID: e.id}, Removed: e.summary == nil}
		if e.summary != nil {
			if err := json.Unmarshal(e.summary, &c.Task); err != nil {
				return nil, after, fmt.Errorf("storetest: changes: task %s: %w", e.id, err)
			}
		}
		out = append(out, c)
	}
	return out, next, nil
}

// WaitChanges blocks until another store has changed a task (a change [SharedStore.Changes]
// would return) since the previous WaitChanges returned, or since this one began for the
// first, and returns nil; or until ctx ends (ctx.Err()). As pgstore's, it is a wake-up: read
// the changes with Changes. It returns an error after Close.
func (s *SharedStore) WaitChanges(ctx context.Context) error {
	if _, err := s.lock(); err != nil {
		return err
	}
	if !s.waits {
		s.waits, s.waited = true, s.mem.changes
	}
	for {
		for h, n := range s.mem.lastBy {
			if h != s.holder && n > s.waited {
				s.waited = s.mem.changes
				s.unlock()
				return nil
			}
		}
		changed := s.mem.changed
		s.unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
		if _, err := s.lock(); err != nil {
			return err
		}
	}
}
