package manager

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/asyncagents/asyncagents/opencode"
)

// Resume sends a follow-up prompt to the caller's finished task, in the same session with
// the same agent and permission rules, and returns at once (SPEC T-18). The task becomes
// StatusResumed with ResumeCount incremented; when the reply is done it is completed (or
// error) again and the parent gets a resume notification (SPEC N-5). Errors, each leaving
// the task unchanged: ErrInvalidInput (empty prompt), ErrTaskNotFound, ErrAmbiguousID,
// ErrTaskBusy (the task is running or resumed), ErrSessionExpired (GET /session/{id} says
// the session is gone), ErrClosed. A failure to send the prompt leaves the task in
// StatusError with the reason.
func (m *Manager) Resume(ctx context.Context, caller Caller, id, prompt string) (Task, error) {
	if strings.TrimSpace(prompt) == "" {
		return Task{}, fmt.Errorf("%w: prompt is required to resume a task", ErrInvalidInput)
	}
	e, err := m.lookup(caller, id)
	if err != nil {
		return Task{}, err
	}
	if e.task.Status.Active() {
		m.mu.Unlock()
		return Task{}, fmt.Errorf("%w: %s is %s; wait for it or cancel it", ErrTaskBusy, e.task.ID, e.task.Status)
	}
	tid := e.task.ID
	m.mu.Unlock()

	if _, err := m.client.GetSession(ctx, tid); err != nil {
		if errors.Is(err, opencode.ErrNotFound) {
			return Task{}, fmt.Errorf("%w (%s)", ErrSessionExpired, tid)
		}
		return Task{}, fmt.Errorf("asyncagents: check session %s: %w", tid, err)
	}
	last, err := m.client.Messages(ctx, tid, 1)
	if err != nil {
		return Task{}, fmt.Errorf("asyncagents: read session %s: %w", tid, err)
	}

	m.mu.Lock()
	if m.tasks[tid] != e || e.task.Status.Active() { // changed meanwhile
		m.mu.Unlock()
		return Task{}, fmt.Errorf("%w: %s changed while resuming", ErrTaskBusy, tid)
	}
	e.task.Status = StatusResumed
	e.task.ResumeCount++
	e.task.Started, e.task.Completed = m.now(), timeZero
	e.task.Result, e.task.Error, e.task.Retrieved = "", "", timeZero
	e.task.Prompt = prompt
	e.done = make(chan struct{})
	e.baseline, e.seenBusy, e.sessErr, e.polled = "", false, "", pollUnknown
	if len(last) > 0 {
		e.baseline = last[len(last)-1].Info.ID
	}
	agent, model, snap := e.task.Agent, e.task.Model, e.task.clone()
	m.mu.Unlock()
	m.persist(snap)

	err = m.client.PromptAsync(ctx, tid, opencode.PromptRequest{
		Agent: agent, Model: model, Parts: []opencode.TextPartInput{opencode.NewText(prompt)},
	})
	if err != nil {
		return m.failLaunch(e, snap.ResumeCount, fmt.Errorf("asyncagents: send follow-up: %w", err))
	}
	return m.snapshot(e), nil
}
