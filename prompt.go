package asyncagents

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asyncagents/asyncagents/opencode"
)

// A run's prompt is sent exactly once. The Manager chooses the prompt's message id
// (Task.PromptID) and records it before sending, so that the server's messages tell whether
// the prompt arrived:
//
//   - the server answered (2xx): sent;
//   - the server answered with an error (an *opencode.APIError): not sent, the run fails;
//   - no answer (a reset connection, a timeout, a server that went away): it may have
//     arrived. The run stays active and the usual reconcile decides: a reply comes, or the
//     session is confirmed idle without the prompt (manager.Unsent), and then the prompt is
//     sent again with the same id, lossGrace after the last send, at most maxPromptSends
//     times in all. OpenCode adds a
//     message id it already has to that message and starts no second reply, so a prompt
//     whose first request arrives late is not run twice.
//
// The same check finds a prompt that OpenCode acknowledged and never stored (seen right
// after a restart), and one that was never sent because the host stopped in between.

const (
	// lossGrace is how long after a prompt_async its message's absence is not yet a loss:
	// OpenCode stores the message within milliseconds, within a few seconds right after it
	// starts, and was seen to take 14 s on a server loaded far beyond its cores. A prompt
	// sent again while the first is still on its way would cut the run it starts; a
	// notification, be posted twice.
	lossGrace = time.Minute
	// maxPromptSends bounds how often one run's prompt is sent.
	maxPromptSends = 3
)

// promptNotTaken is the error of a run whose prompt the server did not store after
// maxPromptSends sends.
var promptNotTaken = fmt.Sprintf("the OpenCode server did not take the prompt (sent %d times); resume the task to try again", maxPromptSends)

// startedLocked marks the queued tasks that got a slot running from now, and returns them;
// the caller sends their prompts with startQueued once m.mu is released.
func (m *Manager) startedLocked(start []*entry) []*entry {
	for _, e := range start {
		e.task.Status, e.task.Started = StatusRunning, m.bg.now()
		m.changedLocked(e)
	}
	return start
}

// startQueued sends the prompts of the queued tasks that got a slot (startedLocked). A Close
// in the middle does not cut a prompt off (that would fail the task, and free its slot for the
// next one only to fail that too): each is bounded by the request timeout alone.
func (m *Manager) startQueued(start []*entry) {
	for _, e := range start {
		m.persist(e)
		m.mu.Lock()
		// Its start sent it already, or sends it (while it starts).
		rc, sent := e.task.ResumeCount, e.run.claimed || e.run.sends > 0 || e.run.sending
		e.run.claimed = e.run.claimed || !e.task.Starting
		m.mu.Unlock()
		if sent && rc == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(m.bg.ctx), m.cfg.requestTimeout)
		err := m.sendPrompt(ctx, e, rc)
		cancel()
		if err != nil && !lostLease(err) { // a lost lease: its holder sends it
			m.failLaunch(e, rc, fmt.Errorf("asyncagents: send prompt of a queued task: %w", err))
		}
	}
}

// grantLoop gives back released slots and starts granted tasks until the Manager closes
// (with a SlotStore): when a slot is given back here, and every third of the lease, for the
// slots other hosts gave back.
func (m *Manager) grantLoop() {
	every := m.slots.shared.LeaseDuration() / 3
	for {
		select {
		case <-m.bg.stopc:
			return
		case <-m.slots.wake:
		case <-m.bg.clock.After(every):
		}
		ctx, cancel := context.WithTimeout(m.bg.ctx, every)
		m.startQueued(m.slots.grant(ctx, &m.mu, m.cfg.logger, m.startedLocked))
		cancel()
	}
}

// sendPrompt sends the prompt of run rc of e (POST /session/{id}/prompt_async) with its
// message id, agent and model. It returns nil when the server took it or may have taken it
// (see above), the server's error when it refused it, an error matching ErrLeaseLost
// without sending when the Manager's LeaseStore does not hold the task's lease, and nil
// without sending when the run is no longer rc or is being sent already.
func (m *Manager) sendPrompt(ctx context.Context, e *entry, rc int) error {
	m.mu.Lock()
	t := &e.task
	if m.tasks.byID[t.ID] != e || t.ResumeCount != rc || !t.Status.Active() || e.run.sending || t.Starting {
		m.mu.Unlock()
		return nil
	}
	pid := t.PromptID // the run's prompt: a run after it counts its own sends
	e.run.sending = true
	e.run.sends++
	if e.run.mirror != nil && e.run.sends == 1 { // a connection delivering events now delivers the run's
		e.run.mirror.bind(m.mirrors.live.Load()) // (not at a later send: the first may still land)
	}
	id, sid, req := t.ID, t.SessionID, opencode.PromptRequest{MessageID: t.PromptID, Agent: t.Agent,
		Parts: []opencode.TextPartInput{opencode.NewText(t.Prompt)}}
	if t.ForkMode == ForkNative && rc == 0 && t.Steers == 0 { // after the shared prefix: the cache is not affected
		req.Parts = append([]opencode.TextPartInput{opencode.NewSyntheticText(nativeFraming)}, req.Parts...)
	}
	req.Model, _ = parseModel(t.Model) // validated at launch
	m.mu.Unlock()

	sent := false
	defer func() { // also when PromptAsync panics: the send is over either way
		m.mu.Lock()
		defer m.mu.Unlock()
		if e.task.PromptID != pid {
			return // a later run's prompt meanwhile, with its own send state
		}
		if e.run.sending = false; sent {
			e.run.sentAt = m.bg.now()
		} else if e.run.sends > 0 {
			e.run.sends-- // refused before it was sent: not one of the run's sends
		}
	}()
	ctx, cancel, err := m.leaseCtx(ctx, id)
	if err != nil {
		return err
	}
	defer cancel()
	sent = true
	err = m.client.PromptAsync(ctx, sid, req)
	var refused *opencode.APIError
	if err == nil || errors.As(err, &refused) {
		return err
	}
	m.cfg.logger.Warn("asyncagents: no answer to a prompt; the server's messages will tell whether it arrived",
		"task", id, "message", req.MessageID, "err", err)
	return nil
}

// unsent handles a reconcile's manager.Unsent for run rc of e: the session is idle and its
// messages lack the prompt. Within promptGrace of a send, or while one is in flight, that is
// not yet a loss (the poll reads the session again later); otherwise the prompt is sent
// again, or, after maxPromptSends, the run fails.
func (m *Manager) unsent(e *entry, rc int) {
	m.mu.Lock()
	t := &e.task
	pending := e.run.sending || !e.run.sentAt.IsZero() && m.bg.now().Sub(e.run.sentAt) < m.lossGrace
	exhausted := e.run.sends >= maxPromptSends
	current := m.tasks.byID[t.ID] == e && t.ResumeCount == rc && t.Status.Active()
	m.mu.Unlock()
	switch {
	case !current || pending:
		return
	case exhausted:
		m.finish(e, rc, StatusError, "", promptNotTaken)
		return
	}
	m.cfg.logger.Warn("asyncagents: the server does not have the prompt; sending it again", "task", t.ID)
	ctx, cancel := m.bg.requestCtx()
	defer cancel()
	if err := m.sendPrompt(ctx, e, rc); err != nil && !lostLease(err) { // a lost lease: its holder decides
		m.finish(e, rc, StatusError, "", fmt.Sprintf("asyncagents: send prompt again: %v", err))
	}
}

// injectContext sends a forked task's inherited context to its new session as a synthetic
// part without reply (POST /session/{id}/message with noReply and the message id id), and
// makes sure it arrives once: when the answer is lost, it asks for the message
// (GET /session/{id}/message/{messageID}) and sends again only when the server does not have
// it.
func injectContext(ctx context.Context, client opencode.Client, sid, id, agent, text string) error {
	req := opencode.PromptRequest{MessageID: id, NoReply: true, Agent: agent,
		Parts: []opencode.TextPartInput{opencode.NewSyntheticText(text)}}
	var err error
	for range 2 {
		if err = postNoReply(ctx, client, sid, req); err == nil {
			return nil
		}
		var refused *opencode.APIError
		if errors.As(err, &refused) || ctx.Err() != nil {
			return err
		}
		if _, gerr := client.Message(ctx, sid, id); gerr == nil {
			return nil // it arrived; its answer did not
		} else if !errors.Is(gerr, opencode.ErrNotFound) {
			return err
		}
	}
	return err
}
