package asyncagents

import (
	"context"
	"fmt"
	"time"
)

// watchdog is a task whose deadline or stale timeout fired.
type watchdog struct {
	e   *entry
	rc  int
	msg string
}

// expired returns why e's run must be stopped at now, when it has passed its deadline, reached
// its budget, or been inactive for stale (0: no stale timeout).
func (e *entry) expired(now time.Time, stale time.Duration) (msg string, ok bool) {
	t := &e.task
	if t.Deadline > 0 && now.Sub(t.Started) >= t.Deadline {
		return fmt.Sprintf("deadline: the run took longer than its deadline of %v and was aborted", t.Deadline), true
	}
	if t.Budget.Reached(t.RunUsage) && e.run.lastFinish == "tool-calls" { // a run that ended anyway is decided, not aborted
		return fmt.Sprintf("budget: the run used %s, reaching its budget of %s, and was aborted", t.RunUsage, t.Budget), true
	}
	if stale > 0 {
		last := t.Started
		if e.run.active.After(last) {
			last = e.run.active
		}
		if idle := now.Sub(last); idle >= stale {
			msg := fmt.Sprintf("stale: no activity for %v (stale timeout %v); the run was aborted", idle.Round(time.Second), stale)
			if e.run.retry != "" {
				msg += "; the session was retrying: " + e.run.retry
			}
			return msg, true
		}
	}
	return "", false
}

// expire aborts a run a watchdog fired for and ends it in error.
func (m *Manager) expire(w watchdog) {
	ctx, cancel := m.bg.requestCtx()
	defer cancel()
	if err := m.abortAs(ctx, w.e, w.rc, runEnd{StatusError, w.msg}); err != nil { // the next poll tries again
		m.cfg.logger.Warn("asyncagents: abort on a watchdog", "task", w.e.task.ID, "err", err)
	}
}

// runEnd is how a run the Manager aborts ends.
type runEnd struct {
	status Status
	msg    string
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
	id := e.task.ID
	m.mu.Unlock()
	ctx, cancel, err := m.leaseCtx(ctx, id)
	if err == nil {
		defer cancel()
		err = m.client.Abort(ctx, id)
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
