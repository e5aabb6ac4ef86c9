package asyncagents

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/asyncagents/asyncagents/opencode"
)

// watchdog is a task whose deadline, budget or stale timeout fired; budget is set when it
// is the budget.
type watchdog struct {
	e      *entry
	rc     int
	msg    string
	budget bool
}

// expired returns why e's run must be stopped at now, when it has passed its deadline, reached
// its budget, or been inactive for stale (0: no stale timeout).
func (e *entry) expired(now time.Time, stale time.Duration) (w watchdog, ok bool) {
	t := &e.task
	w = watchdog{e: e, rc: t.ResumeCount}
	if t.Deadline > 0 && now.Sub(t.Started) >= t.Deadline {
		w.msg = fmt.Sprintf("deadline: the run took longer than its deadline of %v and was aborted", t.Deadline)
		return w, true
	}
	if t.Budget.Reached(t.RunUsage) && e.run.lastFinish == "tool-calls" { // a run that ended anyway is decided, not aborted
		w.msg, w.budget = fmt.Sprintf("budget: the run used %s, reaching its budget of %s, and was aborted", t.RunUsage, t.Budget), true
		return w, true
	}
	if stale > 0 {
		last := t.Started
		if e.run.active.After(last) {
			last = e.run.active
		}
		if idle := now.Sub(last); idle >= stale {
			w.msg = fmt.Sprintf("stale: no activity for %v (stale timeout %v); the run was aborted", idle.Round(time.Second), stale)
			if e.run.retry != "" {
				w.msg += "; the session was retrying: " + e.run.retry
			}
			return w, true
		}
	}
	return watchdog{}, false
}

// expire aborts a run a watchdog fired for and ends it in error — or, for a budget under
// WithBudgetPause, pauses it: cancelled, Paused, with what it did so far as its Result.
func (m *Manager) expire(w watchdog) {
	ctx, cancel := m.bg.requestCtx()
	defer cancel()
	end := runEnd{status: StatusError, msg: w.msg}
	if w.budget && m.cfg.budgetPause {
		m.mu.Lock()
		t := w.e.task
		baseline := w.e.run.baseline
		m.mu.Unlock()
		end = runEnd{status: StatusCancelled, paused: true, result: partialResult(ctx, m.client, t, baseline),
			msg: fmt.Sprintf("paused: the run used %s, reaching its budget of %s; resume the task to go on (with a larger budget if you wish), or clear it", t.RunUsage, t.Budget)}
	}
	if err := m.abortAs(ctx, w.e, w.rc, end); err != nil { // the next poll tries again
		m.cfg.logger.Warn("asyncagents: abort on a watchdog", "task", w.e.task.ID, "err", err)
	}
}

// runEnd is how a run the Manager aborts ends: a paused run keeps result, what it did so
// far.
type runEnd struct {
	status Status
	msg    string
	paused bool
	result string
}

// abortAs aborts run rc of e (POST /session/{id}/abort) and ends it as end. The end is set
// before the abort, so the abort's own error, should a reconcile read it first, does not
// decide the run; a failed abort unsets it.
func (m *Manager) abortAs(ctx context.Context, e *entry, rc int, end runEnd) error {
	m.mu.Lock()
	if e.task.ResumeCount != rc || !e.task.Status.Active() {
		m.mu.Unlock()
		return nil
	}
	e.run.aborting = &end
	id, sid := e.task.ID, e.task.SessionID
	m.mu.Unlock()
	ctx, cancel, err := m.leaseCtx(ctx, id)
	if err == nil && sid != "" { // none yet: nothing runs on the server, and its start stops
		defer cancel()
		err = m.client.Abort(ctx, sid)
	} else if err == nil {
		cancel()
	}
	if err != nil {
		m.mu.Lock()
		if e.task.ResumeCount == rc {
			e.run.aborting = nil
		}
		m.mu.Unlock()
		return err
	}
	m.finish(e, rc, end.status, "", end.msg)
	return nil
}

// partialResult is what run of task t (after message baseline) did so far, for a paused
// task: the text of its replies (GET /session/{id}/message), or, with none, what tools it
// called. A failed read leaves only the tools.
func partialResult(ctx context.Context, client opencode.Client, t Task, baseline string) string {
	var texts []string
	if msgs, err := client.Messages(ctx, t.SessionID, reconcileWindow); err == nil {
		if i := slices.IndexFunc(msgs, func(msg opencode.Message) bool { return msg.Info.ID == baseline }); i >= 0 {
			msgs = msgs[i+1:]
		}
		for _, msg := range msgs {
			if msg.Info.Role != opencode.RoleAssistant {
				continue
			}
			for _, p := range msg.Parts {
				if p.Type == opencode.PartText && !p.Ignored && strings.TrimSpace(p.Text) != "" {
					texts = append(texts, p.Text)
				}
			}
		}
	}
	if len(texts) > 0 {
		return strings.Join(texts, "\n\n")
	}
	return fmt.Sprintf("(no text yet: it made %d tool calls)", t.Progress.ToolCalls)
}
