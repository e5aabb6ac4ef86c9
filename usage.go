package asyncagents

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/asyncagents/asyncagents/opencode"
)

// Usage is what model steps used: tokens by kind, as OpenCode counts them from the provider's
// usage, and their cost in USD, which OpenCode computes from the model's price in its config
// (0 when the config gives none).
type Usage struct {
	Input      int64   `json:"input,omitempty"` // prompt tokens, cached ones not included
	Output     int64   `json:"output,omitempty"`
	Reasoning  int64   `json:"reasoning,omitempty"`
	CacheRead  int64   `json:"cacheRead,omitempty"`
	CacheWrite int64   `json:"cacheWrite,omitempty"`
	Cost       float64 `json:"cost,omitempty"` // USD
}

// Tokens returns the tokens of every kind.
func (u Usage) Tokens() int64 { return u.Input + u.Output + u.Reasoning + u.CacheRead + u.CacheWrite }

// IsZero reports whether u counts nothing.
func (u Usage) IsZero() bool { return u == Usage{} }

// Add returns u and v summed.
func (u Usage) Add(v Usage) Usage {
	return Usage{Input: u.Input + v.Input, Output: u.Output + v.Output, Reasoning: u.Reasoning + v.Reasoning,
		CacheRead: u.CacheRead + v.CacheRead, CacheWrite: u.CacheWrite + v.CacheWrite, Cost: u.Cost + v.Cost}
}

// sub returns u less v.
func (u Usage) sub(v Usage) Usage {
	return Usage{Input: u.Input - v.Input, Output: u.Output - v.Output, Reasoning: u.Reasoning - v.Reasoning,
		CacheRead: u.CacheRead - v.CacheRead, CacheWrite: u.CacheWrite - v.CacheWrite, Cost: u.Cost - v.Cost}
}

// String returns u in a few words: "16.2k tokens, $0.0491" ("1,234 tokens" below ten
// thousand, "1.5M tokens" from a million; the cost with 4 decimals, left out when 0).
func (u Usage) String() string {
	s := tokenCount(u.Tokens()) + " tokens"
	if u.Cost != 0 {
		s += ", $" + strconv.FormatFloat(u.Cost, 'f', 4, 64)
	}
	return s
}

// tokenCount formats n as 1,234, 16.2k or 1.5M.
func tokenCount(n int64) string {
	switch {
	case n >= 1_000_000:
		return strconv.FormatFloat(float64(n)/1e6, 'f', 1, 64) + "M"
	case n >= 10_000:
		return strconv.FormatFloat(float64(n)/1e3, 'f', 1, 64) + "k"
	case n >= 1_000:
		return fmt.Sprintf("%d,%03d", n/1000, n%1000)
	}
	return strconv.FormatInt(n, 10)
}

// usageText says what t's run used, and what t used in all when it ran more than once: ""
// before its first step.
func (t *Task) usageText() string {
	switch {
	case t.Usage.IsZero():
		return ""
	case t.RunUsage == t.Usage:
		return t.Usage.String()
	}
	return t.RunUsage.String() + " (" + t.Usage.String() + " in all)"
}

// usageOf converts OpenCode's tokens and cost.
func usageOf(t *opencode.Tokens, cost float64) Usage {
	if t == nil {
		return Usage{Cost: cost}
	}
	return Usage{Input: t.Input, Output: t.Output, Reasoning: t.Reasoning, CacheRead: t.Cache.Read, CacheWrite: t.Cache.Write, Cost: cost}
}

// A task's usage is the sum of its session's completed steps: each assistant message, once
// completed, carries what its step used. Steps complete one after the other, in the order of
// their ids, so Task.UsageCounted (the newest step counted) is all a count needs to stay
// exact: a step is counted once, from the event stream while the run goes on (the completed
// assistant message's message.updated) or from the messages the run is decided from (the
// event stream's, or a read's), whichever comes first. When a read may have missed steps
// (its window holds none older than the newest counted), the session's own totals
// (GET /session/{id}) replace the count.

// completedStep reports whether the props of a message.updated event may be a completed
// assistant message: a byte search, so that other updates cost no decode.
func completedStep(props []byte) bool {
	return bytes.Contains(props, []byte(`"completed":`)) && bytes.Contains(props, []byte(`"role":"assistant"`))
}

// stepEvent counts the step of a message.updated event of a task's active run.
func (m *Manager) stepEvent(ev opencode.Event) {
	if !completedStep(ev.Properties) {
		return
	}
	var p struct {
		Info opencode.MessageInfo `json:"info"`
	}
	if json.Unmarshal(ev.Properties, &p) != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.tasks[p.Info.SessionID]; e != nil && e.task.Status.Active() {
		if m.countStepsLocked(e, []opencode.MessageInfo{p.Info}) {
			m.changedLocked(e)
		}
	}
}

// countStepsLocked counts the completed steps among infos (oldest first) that e has not
// counted, and reports whether it counted any.
func (m *Manager) countStepsLocked(e *entry, infos []opencode.MessageInfo) bool {
	t, counted := &e.task, false
	for i := range infos {
		in := &infos[i]
		if in.Role != opencode.RoleAssistant || in.Time.Completed == 0 || in.ID <= t.UsageCounted {
			continue
		}
		step := usageOf(in.Tokens, in.Cost)
		if t.UsageCounted == "" {
			t.FirstStep = step
		}
		t.Usage, t.RunUsage, t.UsageCounted = t.Usage.Add(step), t.RunUsage.Add(step), in.ID
		counted = true
	}
	return counted
}

// countRun counts the steps of msgs, the messages a run was decided from.
func (m *Manager) countRun(e *entry, msgs []opencode.Message) {
	infos := make([]opencode.MessageInfo, 0, len(msgs))
	for i := range msgs {
		infos = append(infos, msgs[i].Info)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.countStepsLocked(e, infos)
}

// readMissedSteps reports whether msgs, a read of the latest reconcileWindow messages of a
// run's session, may have missed steps that e has not counted: the window is full and its
// oldest message is newer than the newest step counted, yet still of the run.
func readMissedSteps(e *entry, msgs []opencode.Message) bool {
	if len(msgs) < reconcileWindow {
		return false
	}
	oldest := msgs[0].Info.ID
	return oldest > e.task.UsageCounted && oldest > e.baseline
}

// sessionTotals sets e's usage to its session's totals (GET /session/{id}), the run's
// growing by what they add; after a read that may have missed steps.
func (m *Manager) sessionTotals(ctx context.Context, e *entry, id string, newest string) {
	s, err := m.client.GetSession(ctx, id)
	if err != nil || s.Tokens == nil {
		return
	}
	total := usageOf(s.Tokens, s.Cost)
	m.mu.Lock()
	defer m.mu.Unlock()
	t := &e.task
	t.RunUsage = t.RunUsage.Add(total.sub(t.Usage))
	t.Usage = total
	t.UsageCounted = max(t.UsageCounted, newest)
}

// TreeUsage returns what the tasks of session used, with the tasks of their sessions and so
// on down the tree (tasks that launched tasks, [WithNestingDepth] above 1), summed from
// tasks: a [Manager.ListAll], or a store's tasks.
func TreeUsage(tasks []Task, session string) Usage {
	children := map[string][]int{}
	for i := range tasks {
		children[tasks[i].ParentSessionID] = append(children[tasks[i].ParentSessionID], i)
	}
	var sum Usage
	seen := map[string]bool{}
	next := []string{session}
	for len(next) > 0 {
		s := next[len(next)-1]
		next = next[:len(next)-1]
		if seen[s] {
			continue
		}
		seen[s] = true
		for _, i := range children[s] {
			sum = sum.Add(tasks[i].Usage)
			next = append(next, tasks[i].ID)
		}
	}
	return sum
}

// TreeUsage returns what the caller's tasks used, with their own tasks and so on down the
// tree. It returns [ErrClosed] after Close.
func (m *Manager) TreeUsage(caller Caller) (Usage, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return Usage{}, ErrClosed
	}
	return m.treeUsageLocked(caller.SessionID), nil
}

// treeUsageLocked sums the usage of the tasks below session.
func (m *Manager) treeUsageLocked(session string) Usage {
	var sum Usage
	next := []string{session}
	for depth := 0; len(next) > 0 && depth <= MaxNestingDepth; depth++ {
		var below []string
		for _, parent := range next {
			for _, id := range m.reg.Tasks(parent) {
				if e := m.tasks[id]; e != nil {
					sum = sum.Add(e.task.Usage)
					below = append(below, id)
				}
			}
		}
		next = below
	}
	return sum
}
