package asyncagents

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asyncagents/asyncagents/opencode"
)

// Resume sends a follow-up prompt to the caller's task, in the same session with the same
// agent, model and permission rules, and returns at once.
//
// For an ended task (completed, error or cancelled) the follow-up is sent now: the task is
// [StatusResumed] with its ResumeCount incremented, and when the reply is done it is
// completed (or error) again and the parent gets a resume notification. Durations count
// from the resume. For a task that is running or resumed, the follow-up is queued when
// [WithFollowUpQueue] allows it (the returned task lists it in FollowUps) and sent when the
// current run ends, unless that run was cancelled; otherwise it is [ErrTaskBusy]. So is it
// for an ended task whose queued follow-ups are still being sent: the prompt is queued
// behind them, and the follow-ups run in the order they were given.
//
// It checks the session first (GET /session/{id}) and reads its last message
// (GET /session/{id}/message?limit=1), then sends the prompt
// (POST /session/{id}/prompt_async). Errors, each leaving the task unchanged:
// [ErrInvalidInput] (an empty prompt, id or caller), [ErrTaskNotFound], [ErrAmbiguousID],
// [ErrTaskBusy] (the task is active and no follow-up can be queued), [ErrTaskLimit] (the
// parent, or the session it counts under, has [WithMaxActivePerParent] active tasks),
// [ErrBudget] (the caller's tasks used [WithTreeBudget]) — with a [LimitStore], both count
// the tasks of every host, in the save of the resumed task —, [ErrSessionExpired] (the
// server no longer has the session, or the isolated task's worktree was discarded),
// [ErrLeaseLost] (with a shared [LeaseStore], the ended task is being handed to another host
// that asked for it: try again, and the task is taken over from there), [ErrClosed], or the
// server's error. A failure to send the prompt leaves the task in [StatusError] with the
// reason and returns it with the error.
func (m *Manager) Resume(ctx context.Context, caller Caller, id, prompt string, opts ...ResumeOption) (Task, error) {
	if err := checkText("prompt", prompt, MaxPromptChars, false); err != nil {
		return Task{}, fmt.Errorf("resume: %w", err)
	}
	var rcfg resumeConfig
	for _, o := range opts {
		o(&rcfg)
	}
	if b := rcfg.budget; b != nil {
		if err := b.check("task"); err != nil {
			return Task{}, err
		}
	}
	if err := m.begin(); err != nil {
		return Task{}, err
	}
	defer m.ops.Done()
	e, err := m.lockTask(ctx, caller, id)
	if err != nil {
		return Task{}, err
	}
	if w := e.task.Worktree; w != nil && !w.Discarded.IsZero() {
		m.mu.Unlock()
		return Task{}, fmt.Errorf("%w: task %s's worktree was discarded; start a new task", ErrSessionExpired, e.task.ID)
	}
	// Running, resumed or queued; or ended with follow-ups still to send (sendFollowUp starts
	// the next one): the prompt waits behind them, in order.
	if !e.task.Status.Terminal() || len(e.task.FollowUps) > 0 || e.resuming {
		if rcfg.budget != nil {
			m.mu.Unlock()
			return Task{}, fmt.Errorf("%w: a budget is changed only when resuming an ended task; %s is %s", ErrInvalidInput, e.task.ID, e.task.Status)
		}
		t, err := m.queueFollowUpLocked(e, prompt)
		m.mu.Unlock()
		if err == nil {
			m.persist(e)
		}
		return t, err
	}
	m.mu.Unlock()
	return m.resume(ctx, e, prompt, rcfg.budget)
}

// ResumeOption changes what [Manager.Resume] sends.
type ResumeOption func(*resumeConfig)

type resumeConfig struct {
	budget *Budget
}

// ResumeBudget sets the budget of the task's runs from the follow-up on (Task.Budget); for an
// ended task only ([ErrInvalidInput] otherwise). A task paused at its budget
// ([WithBudgetPause]) goes on with a larger one.
func ResumeBudget(b Budget) ResumeOption { return func(c *resumeConfig) { c.budget = &b } }

// queueFollowUpLocked queues prompt for the active task e, or returns ErrTaskBusy.
func (m *Manager) queueFollowUpLocked(e *entry, prompt string) (Task, error) {
	t := &e.task
	if err := m.overBudgetLocked(t.anchor()); err != nil {
		return Task{}, err
	}
	if len(t.FollowUps) >= m.cfg.followUps {
		if m.cfg.followUps == 0 {
			return Task{}, fmt.Errorf("%w: %s is %s; wait for it or cancel it", ErrTaskBusy, t.ID, t.Status)
		}
		return Task{}, fmt.Errorf("%w: %s is %s and %d follow-up(s) already wait; wait for it or cancel it", ErrTaskBusy, t.ID, t.Status, len(t.FollowUps))
	}
	t.FollowUps = append(t.FollowUps, prompt)
	m.changedLocked(e)
	return m.viewLocked(e), nil
}

// resume sends prompt to the ended task e, with budget as its budget from now on when set.
func (m *Manager) resume(ctx context.Context, e *entry, prompt string, budget *Budget) (Task, error) {
	m.mu.Lock()
	tid, sid := e.task.ID, e.task.SessionID
	m.mu.Unlock()
	if sid == "" {
		return Task{}, fmt.Errorf("%w: task %s ended before its session was made; start a new task", ErrSessionExpired, tid)
	}
	if _, err := m.client.GetSession(ctx, sid); err != nil {
		if errors.Is(err, opencode.ErrNotFound) {
			return Task{}, fmt.Errorf("%w: the session of %s was deleted; start a new task", ErrSessionExpired, tid)
		}
		return Task{}, fmt.Errorf("asyncagents: check the session of %s: %w", tid, err)
	}
	last, err := m.client.Messages(ctx, sid, 1)
	if err != nil {
		return Task{}, fmt.Errorf("asyncagents: read the session of %s: %w", tid, err)
	}

	m.mu.Lock()
	if e.removed || e.hold.lost || e.task.Status.Active() { // cleared, being handed over or resumed meanwhile
		st, removed, lost := e.task.Status, e.removed, e.hold.lost
		m.mu.Unlock()
		switch {
		case removed:
			return Task{}, fmt.Errorf("%w: %s was cleared", ErrTaskNotFound, tid)
		case lost:
			return Task{}, fmt.Errorf("%w: %s is moving to another host that asked for it; try again", ErrLeaseLost, tid)
		}
		return Task{}, fmt.Errorf("%w: %s is %s; wait for it or cancel it", ErrTaskBusy, tid, st)
	}
	if err := m.overBudgetLocked(e.task.anchor()); err != nil {
		m.mu.Unlock()
		return Task{}, err
	}
	if err := m.slots.reserve(e.task.ParentSessionID, e.task.AnchorSessionID); err != nil {
		m.mu.Unlock()
		return Task{}, err
	}
	_, open := m.tasks.open[e.task.ParentSessionID]
	prev := beforeResume{task: e.task.clone(), run: e.run, done: e.done, opened: !open}
	t := &e.task
	t.Status = StatusResumed
	t.ResumeCount++
	t.Started, t.Completed = m.bg.now(), time.Time{}
	t.Result, t.Error, t.Retrieved = "", "", time.Time{}
	t.Prompt, t.RunUsage = prompt, Usage{}
	if budget != nil {
		t.Budget = *budget
	}
	e.done = make(chan struct{})
	baseline := ""
	if len(last) > 0 {
		baseline = last[len(last)-1].Info.ID
	}
	e.startRun(m.bg.now(), baseline)
	m.mirrors.start(e)
	m.tasks.batch(t.BatchID).active++
	if _, ok := m.tasks.open[t.ParentSessionID]; !ok {
		m.tasks.open[t.ParentSessionID] = t.BatchID
	}
	_, e.save.admit = m.cfg.store.(LimitStore) // the run counts on every host
	m.changedLocked(e)
	rc := t.ResumeCount
	resumed := m.viewLocked(e) // as sent: the run may end before this returns
	m.mu.Unlock()
	if err := m.persist(e); errors.Is(err, ErrTaskLimit) || errors.Is(err, ErrBudget) {
		prev.undo(m, e, rc) // another host's tasks count too
		return Task{}, err
	}

	if err := m.sendPrompt(ctx, e, rc); err != nil {
		return m.failLaunch(e, rc, fmt.Errorf("asyncagents: send follow-up: %w", err))
	}
	return resumed, nil
}

// beforeResume is what a resume changed of an ended task, for undo.
type beforeResume struct {
	task   Task
	run    runState
	done   chan struct{}
	opened bool // the resume opened its parent's batch
}

// undo takes back resume rc of e, which the store refused under the limits of every host:
// e is as it was before, counts nothing, and its record is saved as it was (the store kept
// it). A task changed meanwhile (cancelled, cleared) stays as it is.
func (prev beforeResume) undo(m *Manager, e *entry, rc int) {
	m.mu.Lock()
	e.save.admit = false
	if e.removed || e.task.ResumeCount != rc || e.task.Status != StatusResumed {
		m.mu.Unlock()
		m.persist(e)
		return
	}
	m.mirrors.drop(e)
	e.task, e.run, e.done = prev.task, prev.run, prev.done
	b := m.tasks.batch(e.task.BatchID)
	b.active--
	if prev.opened {
		m.tasks.closeBatch(e.task.ParentSessionID, e.task.BatchID, b)
	}
	m.slots.unreserve(e.task.ParentSessionID, e.task.AnchorSessionID)
	m.changedLocked(e)
	m.mu.Unlock()
	m.persist(e)
}

// sendFollowUp sends the first queued follow-up of the ended task e, if any. A failure is
// recorded on the task (and the next follow-up, if any, is tried when that is final). A task
// being handed over to another host keeps its follow-ups queued: its new holder sends them,
// or this Manager does if the handover fails.
func (m *Manager) sendFollowUp(e *entry) {
	m.mu.Lock()
	if e.removed || e.hold.lost || e.task.Status.Active() || len(e.task.FollowUps) == 0 {
		m.mu.Unlock()
		return
	}
	prompt := e.task.FollowUps[0]
	e.task.FollowUps = e.task.FollowUps[1:]
	e.resuming = true // a Resume meanwhile queues its prompt behind this one
	m.changedLocked(e)
	m.mu.Unlock()
	ctx, cancel := context.WithTimeout(m.bg.ctx, 2*m.cfg.requestTimeout)
	defer cancel()
	_, err := m.resume(ctx, e, prompt, nil)
	m.mu.Lock()
	e.resuming = false
	m.mu.Unlock()
	if err != nil {
		m.cfg.logger.Warn("asyncagents: send queued follow-up", "task", e.task.ID, "err", err)
		m.sendFollowUp(e) // the next one, if any (one queued meanwhile): each try takes one
	}
}
