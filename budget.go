package asyncagents

import (
	"fmt"
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

// check returns an error matching ErrInvalidInput for a negative bound.
func (b Budget) check(what string) error {
	if b.Tokens < 0 || b.Cost < 0 {
		return fmt.Errorf("%w: %s budget must not be negative", ErrInvalidInput, what)
	}
	return nil
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

// overBudgetLocked returns an error matching ErrBudget when the tree of tasks below parent
// has reached WithTreeBudget.
func (m *Manager) overBudgetLocked(parent string) error {
	if m.cfg.treeBudget.IsZero() {
		return nil
	}
	if used := m.treeUsageLocked(parent); m.cfg.treeBudget.Reached(used) {
		return fmt.Errorf("%w: this session's tasks (with theirs) used %s, the budget is %s; no more tasks can start",
			ErrBudget, used, m.cfg.treeBudget)
	}
	return nil
}
