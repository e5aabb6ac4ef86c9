package asyncagents

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/asyncagents/asyncagents/internal/scan"
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

// A run's usage is the sum of its completed steps: each assistant message of the run, once
// completed, carries what its step used. While the run goes on, the steps are counted as the
// event stream shows them complete (the completed assistant message's message.updated): a
// running figure that budgets are checked against. A run decided from what the stream
// carried (all of it, on one connection: see mirror.go) keeps that figure, which then counts
// every step once. A run decided from a read is counted again from its own messages (those
// after its prompt, paged back to it when the run is longer than the read's window), which
// replaces the running figure: a step the stream missed changes nothing then.

// completedStep reports whether the props of a message.updated event may be a completed
// assistant message: a byte search, so that other updates cost no decode.
func completedStep(props []byte) bool {
	return bytes.Contains(props, []byte(`"completed":`)) && bytes.Contains(props, []byte(`"role":"assistant"`))
}

// countStep counts the step of props, a message.updated event of e's active run that may be
// a completed step, in the run's running figures, once, and reports whether it did.
func (e *entry) countStep(props []byte) bool {
	id := scan.LeadingInfoID(props)
	if id == nil || e.run.steps[string(id)] || string(id) <= e.run.baseline {
		return false // the second of the two updates OpenCode sends of a completed step, or an earlier run's
	}
	info, ok := stepInfo(props)
	if !ok || info.Role != opencode.RoleAssistant || info.Completed == 0 {
		return false
	}
	if e.run.steps == nil {
		e.run.steps = map[string]bool{}
	}
	e.run.steps[string(id)], e.run.lastFinish = true, info.Finish
	tk := info.Tokens
	t, step := &e.task, Usage{Input: tk.Input, Output: tk.Output, Reasoning: tk.Reasoning, CacheRead: tk.Cache.Read, CacheWrite: tk.Cache.Write, Cost: info.Cost}
	if t.ResumeCount == 0 && len(e.run.steps) == 1 && t.FirstStep.IsZero() {
		t.FirstStep = step
	}
	t.Usage, t.RunUsage = t.Usage.Add(step), t.RunUsage.Add(step)
	return true
}

// stepInfo reads what stepLocked needs of a message.updated event's properties: scanned,
// or decoded when the scan declines (it runs under the Manager's lock, for every step).
func stepInfo(props []byte) (scan.InfoFacts, bool) {
	if f, ok := scan.MessageInfo(props); ok {
		return f, true
	}
	var p struct {
		Info struct {
			Role string `json:"role"`
			Time struct {
				Completed int64 `json:"completed"` // what the scan reads: not created
			} `json:"time"`
			Finish string      `json:"finish"`
			Tokens scan.Tokens `json:"tokens"`
			Cost   float64     `json:"cost"`
		} `json:"info"`
	}
	if json.Unmarshal(props, &p) != nil {
		return scan.InfoFacts{}, false
	}
	i := p.Info
	return scan.InfoFacts{Role: i.Role, Completed: i.Time.Completed, Finish: i.Finish, Tokens: i.Tokens, Cost: i.Cost}, true
}

// settleUsage sets e's run usage to the sum of the completed steps of run, the run's own
// messages oldest first, in place of the running figure; for a task's first run, its first
// step is FirstStep.
func (e *entry) settleUsage(run []opencode.Message) {
	t := &e.task
	var sum, first Usage
	found := false
	for i := range run {
		in := &run[i].Info
		if in.Role != opencode.RoleAssistant || in.Time.Completed == 0 {
			continue
		}
		u := usageOf(in.Tokens, in.Cost)
		if !found {
			first, found = u, true
		}
		sum = sum.Add(u)
	}
	t.Usage, t.RunUsage = t.Usage.sub(t.RunUsage).Add(sum), sum
	if t.ResumeCount == 0 && found {
		t.FirstStep = first
	}
	e.run.steps, e.run.lastFinish = nil, ""
}

// runMessages returns the messages of run after its prompt (or its baseline), oldest first,
// from msgs, and whether msgs reach back to it.
func runMessages(msgs []opencode.Message, prompt, baseline string) ([]opencode.Message, bool) {
	if prompt == "" && baseline == "" {
		return msgs, true // the session's first run: all of it
	}
	for i := len(msgs) - 1; i >= 0; i-- {
		if id := msgs[i].Info.ID; id == prompt || id == baseline {
			return msgs[i+1:], true
		}
	}
	return msgs, false
}

// maxUsagePages bounds how many pages (of usagePage messages) a run's usage is read back
// over when a read's window did not reach its prompt.
const (
	usagePage     = 100
	maxUsagePages = 20
)

// settleUsage counts the usage of e's run rc, decided from msgs (the latest messages of its
// session, oldest first), reading further back (GET /session/{id}/message?limit=&before=)
// when msgs do not reach the run's prompt.
func (m *Manager) settleUsage(ctx context.Context, e *entry, rc int, msgs []opencode.Message) {
	m.mu.Lock()
	id, prompt, baseline := e.task.SessionID, e.task.PromptID, e.run.baseline
	m.mu.Unlock()
	run, whole := runMessages(msgs, prompt, baseline)
	if !whole {
		var all []opencode.Message
		cursor := ""
		for range maxUsagePages {
			page, next, err := m.client.MessagesBefore(ctx, id, usagePage, cursor)
			if err != nil {
				break
			}
			all = append(page, all...)
			if run, whole = runMessages(all, prompt, baseline); whole || next == "" {
				break
			}
			cursor = next
		}
		if !whole && len(all) > len(msgs) {
			run = all // the whole session is less than maxUsagePages pages, or the prompt is gone: count what there is
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if e.task.ResumeCount == rc && e.task.Status.Active() {
		e.settleUsage(run)
	}
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
			t := tasks[i]
			if t.upgrade(); t.SessionID != "" {
				next = append(next, t.SessionID)
			}
		}
	}
	return sum
}

// TreeUsage returns what the caller's tasks used, with their own tasks and so on down the
// tree, those cleared since New included. It returns [ErrClosed] after Close.
func (m *Manager) TreeUsage(caller Caller) (Usage, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.tasks.closed {
		return Usage{}, ErrClosed
	}
	return m.tasks.treeUsage(caller.SessionID), nil
}
