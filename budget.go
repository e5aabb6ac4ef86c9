package asyncagents

import (
	"fmt"
	"math"
	"strconv"
)

// Budget bounds what model steps may use: Tokens of every kind together, and Cost in USD (as
// OpenCode computes it from the model's price). A zero field bounds nothing.
type Budget struct {
	Tokens int64   `json:"tokens,omitempty"`
	Cost   float64 `json:"cost,omitempty"`
}

// IsZero reports whether b bounds nothing.
func (b Budget) IsZero() bool { return b == Budget{} }

// Reached reports whether u has reached one of b's bounds.
func (b Budget) Reached(u Usage) bool {
	return b.Tokens > 0 && u.Tokens() >= b.Tokens || b.Cost > 0 && u.Cost >= b.Cost
}

// String returns b as "10,000 tokens", "$0.5000" or "10,000 tokens or $0.5000"; "none" for
// the zero Budget.
func (b Budget) String() string {
	var s string
	if b.Tokens > 0 {
		s = tokenCount(b.Tokens) + " tokens"
	}
	if b.Cost > 0 {
		if s != "" {
			s += " or "
		}
		s += "$" + strconv.FormatFloat(b.Cost, 'f', 4, 64)
	}
	if s == "" {
		return "none"
	}
	return s
}

// check returns an error matching ErrInvalidInput for a negative (or not finite) bound.
func (b Budget) check(what string) error {
	if !b.valid() {
		return fmt.Errorf("%w: %s budget must not be negative", ErrInvalidInput, what)
	}
	return nil
}

// valid reports whether b's bounds are finite and not negative.
func (b Budget) valid() bool {
	return b.Tokens >= 0 && b.Cost >= 0 && !math.IsInf(b.Cost, 0) && !math.IsNaN(b.Cost)
}

// or returns b with its zero fields taken from d.
func (b Budget) or(d Budget) Budget {
	if b.Tokens == 0 {
		b.Tokens = d.Tokens
	}
	if b.Cost == 0 {
		b.Cost = d.Cost
	}
	return b
}

// within returns an error matching ErrInvalidInput when b asks more than limit allows in a
// bound limit sets.
func (b Budget) within(limit Budget) error {
	if limit.Tokens > 0 && b.Tokens > limit.Tokens || limit.Cost > 0 && b.Cost > limit.Cost {
		return fmt.Errorf("%w: budget %s: at most %s, this host's limit", ErrInvalidInput, b, limit)
	}
	return nil
}

// overBudgetLocked returns an error matching ErrBudget when the tree of tasks below parent,
// or below a session above it (parent is a task, whose parent may be one too), has reached
// WithTreeBudget.
func (m *Manager) overBudgetLocked(parent string) error {
	if m.cfg.treeBudget.IsZero() {
		return nil
	}
	for s, depth := parent, 0; s != "" && depth <= MaxNestingDepth; depth++ {
		if used := m.tasks.treeUsage(s); m.cfg.treeBudget.Reached(used) {
			who := "this session's tasks (with theirs)"
			if s != parent {
				who = "the tasks of a session above this one (with theirs)"
			}
			return fmt.Errorf("%w: %s used %s, the budget is %s; no more tasks can start", ErrBudget, who, used, m.cfg.treeBudget)
		}
		e := m.tasks.inSession(s)
		if e == nil {
			break
		}
		s = e.task.anchor()
	}
	return nil
}
