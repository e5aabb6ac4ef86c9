package asyncagents

import (
	"context"
	"fmt"
	"time"

	"github.com/asyncagents/asyncagents/opencode"
)

// Steer sends message to the caller's running or resumed task so that its model acts on it
// within the current run, without stopping it: the message is posted to the busy session
// (POST /session/{id}/prompt_async, with a message id of the Manager's). OpenCode 1.18.33
// stores a prompt posted while a session is busy and, when the step under way ends (its
// tool calls done), takes it in the context of one more step of the same run, whose reply
// answers it (see opencode's TestTurns): the model sees the message at its next step, and
// what is left of the task's first instructions is weighed against it by the model. The run
// then ends with the reply to the message: the task's Prompt and PromptID become the
// message's, and Steers counts it. One notification comes at the run's end, as without it.
//
// A message whose answer is lost is not a failure: the task's run goes on and the Manager
// finds out from the session whether the message arrived, and sends it again under the same
// id when it did not (as a launch's prompt). Should the run end in the instant the message
// arrives, OpenCode starts a run for it, which the task follows as its own.
//
// Errors, each leaving the task as it was: [ErrNotRunning] (the task is queued, or ended: use
// [Manager.Resume]), [ErrTaskBusy] (it is starting, or its prompt is being sent right now), [ErrInvalidInput]
// (an empty or too long message, an empty caller), [ErrTaskNotFound], [ErrAmbiguousID],
// [ErrLeaseLost], [ErrClosed], and the server's refusal (then the task's run goes on as it
// was, and the message is not recorded as sent).
func (m *Manager) Steer(ctx context.Context, caller Caller, id, message string) (Task, error) {
	if err := checkText("message", message, MaxPromptChars, false); err != nil {
		return Task{}, fmt.Errorf("steer: %w", err)
	}
	if err := m.begin(); err != nil {
		return Task{}, err
	}
	defer m.ops.Done()
	e, err := m.lockTask(ctx, caller, id)
	if err != nil {
		return Task{}, err
	}
	t := &e.task
	switch {
	case !t.Status.Active():
		m.mu.Unlock()
		return Task{}, fmt.Errorf("%w: only a running task can be steered; %s is %s (resume it to send a follow-up)", ErrNotRunning, t.ID, t.Status)
	case e.run.sending || t.Starting || t.ResumeCount == 0 && t.Steers == 0 && e.run.sentAt.IsZero():
		m.mu.Unlock()
		return Task{}, fmt.Errorf("%w: %s is starting and its prompt is not sent yet; try again in a moment", ErrTaskBusy, t.ID)
	}
	rc := t.ResumeCount
	steerID := opencode.NewMessageID(m.bg.now(), t.PromptID)
	was := steerState{prompt: t.Prompt, promptID: t.PromptID, sends: e.run.sends, sentAt: e.run.sentAt}
	t.Prompt, t.PromptID = message, steerID
	t.Steers++
	e.run.sends = 0
	m.changedLocked(e)
	steered := m.viewLocked(e) // as sent: the run may end before this returns
	m.mu.Unlock()
	m.persist(e) // the message's id is recorded before it is sent

	if err := m.sendPrompt(ctx, e, rc); err != nil {
		m.mu.Lock()
		if t.PromptID == steerID && m.tasks.byID[t.ID] == e && t.ResumeCount == rc {
			t.Prompt, t.PromptID, e.run.sends, e.run.sentAt = was.prompt, was.promptID, was.sends, was.sentAt
			t.Steers--
			m.changedLocked(e)
		}
		m.mu.Unlock()
		m.persist(e)
		return Task{}, fmt.Errorf("asyncagents: steer %s: %w", t.ID, err)
	}
	return steered, nil
}

// steerState is what a steer changes of a task, kept to undo it when the server refuses the
// message.
type steerState struct {
	prompt, promptID string
	sends            int
	sentAt           time.Time
}
