package storetest

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/asyncagents/asyncagents"
)

// A SharedStore's per-parent cap and tree budgets (asyncagents.LimitStore), counted as pgstore
// counts them.

// levels is how deep the tree of a session is summed, as a Manager sums it: the tasks of the
// session, and theirs down to MaxNestingDepth levels below them.
const levels = asyncagents.MaxNestingDepth + 1

// active counts the active tasks (queued, running or resumed) of session: those it launched
// and those that count under it.
func (m *SharedMemory) active(session string) int {
	n := 0
	for _, row := range m.tasks {
		if (row.parent == session || row.anchor == session) && (row.status.Active() || row.status == asyncagents.StatusQueued) {
			n++
		}
	}
	return n
}

// treeUsage sums what the tasks below session used: its tasks, theirs and so on, levels deep,
// each task once, with what the tasks removed from those sessions used.
func (m *SharedMemory) treeUsage(session string) asyncagents.Usage {
	sum := m.cleared[session]
	seen := map[string]bool{}
	level := map[string]bool{session: true}
	for range levels {
		next := map[string]bool{}
		for id, row := range m.tasks {
			if !seen[id] && (level[row.parent] || level[row.anchor]) {
				seen[id] = true
				sum = sum.Add(row.usage)
				if row.session != "" {
					next[row.session] = true
					sum = sum.Add(m.cleared[row.session])
				}
			}
		}
		if level = next; len(level) == 0 {
			break
		}
	}
	return sum
}

// above returns session and the sessions above it, nearest first, through the anchors of the
// tasks they are, MaxNestingDepth steps at most.
func (m *SharedMemory) above(session string) []string {
	out := []string{session}
	for range asyncagents.MaxNestingDepth {
		row := m.inSession(out[len(out)-1])
		if row == nil || row.anchor == "" {
			break
		}
		out = append(out, row.anchor)
	}
	return out
}

// inSession returns the task that runs in session, or nil.
func (m *SharedMemory) inSession(session string) *sharedTask {
	for _, row := range m.tasks {
		if row.session == session {
			return row
		}
	}
	return nil
}

// TreeUsage returns what the tasks below session used, on every store of the SharedMemory: its
// tasks (those it launched and those that count under it), theirs and so on down to
// [asyncagents.MaxNestingDepth] levels below, each task once, with what the tasks removed from
// those sessions used. It returns an error after Close.
func (s *SharedStore) TreeUsage(_ context.Context, session string) (asyncagents.Usage, error) {
	if _, err := s.lock(); err != nil {
		return asyncagents.Usage{}, err
	}
	defer s.unlock()
	return s.mem.treeUsage(session), nil
}

// Admit saves the new task t, or the ended task t resumed, as Save does, unless its parent or
// the session it counts under (t.AnchorSessionID, when set) has perParent or more active tasks on every store of the
// SharedMemory (an error matching [asyncagents.ErrTaskLimit]; perParent 0: no cap), or the
// tree of that session, or of a session above it, has used budget (an error matching
// [asyncagents.ErrBudget]; the zero Budget bounds nothing) as [SharedStore.TreeUsage] sums
// it; the check and the save are atomic. Other errors: a negative perParent or budget
// (matching [asyncagents.ErrInvalidInput]), Save's.
func (s *SharedStore) Admit(_ context.Context, t asyncagents.Task, perParent int, budget asyncagents.Budget) error {
	if perParent < 0 || budget.Tokens < 0 || !(budget.Cost >= 0) {
		return fmt.Errorf("%w: storetest: admit %s: cap %d, budget %v: must not be negative", asyncagents.ErrInvalidInput, t.ID, perParent, budget)
	}
	return s.save(t, func() error {
		m := s.mem
		anchor := cmp.Or(t.AnchorSessionID, t.ParentSessionID)
		for i, p := range slices.Compact([]string{t.ParentSessionID, anchor}) {
			if n := m.active(p); perParent > 0 && n >= perParent {
				who := "this session has"
				if i > 0 {
					who = "the session above this one that its tasks count under has"
				}
				return fmt.Errorf("%w: %s %d active tasks (queued, running or resumed) on every host together, the most allowed", asyncagents.ErrTaskLimit, who, n)
			}
		}
		if budget.IsZero() {
			return nil
		}
		for i, session := range m.above(anchor) {
			if used := m.treeUsage(session); budget.Reached(used) {
				who := "this session's tasks (with theirs)"
				if i > 0 {
					who = "the tasks of a session above this one (with theirs)"
				}
				return fmt.Errorf("%w: %s used %s on every host together, the budget is %s", asyncagents.ErrBudget, who, used, budget)
			}
		}
		return nil
	})
}
