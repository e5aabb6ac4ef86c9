package asyncagents

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strconv"

	"github.com/asyncagents/asyncagents/hints"
	"github.com/asyncagents/asyncagents/opencode"
)

// Under NotifyPerWave a notification is posted without reply, so it is in the parent at once
// and starts no turn, and the parent owes a turn for it. The parent's worker asks for the
// owed turn with one prompt for all the notifications it covers (askTurn) once the parent's
// notifications are delivered and the turn is due (turnDueLocked).
//
// The prompt is not posted when a turn of the parent saw the notifications anyway. OpenCode
// 1.18.33 (see opencode's TestTurns) runs a session's loop while its newest user message has
// no answer, and a message posted while the loop runs is answered in one more step of it, so
// a notification was seen by a turn exactly when some message of the parent is newer than
// it: the reply that saw it, or a prompt whose turn will. The Manager knows the parent's
// newest message id (heads.go): when it is not one of the owed notifications, they are
// marked seen and nothing is posted. Otherwise the turn prompt is posted like a notification:
// with an id of the Manager's, recorded on the notifications it covers (TurnID) before the
// post, looked up before a retry, and confirmed like a notification posted with prompt_async
// (confirm.go); one found missing makes its notifications owed again.

// turnAsk is what one attempt at a parent's owed turn needs, taken under Manager.mu.
type turnAsk struct {
	refs  []noteRef
	ours  map[string]bool // the owed notifications' message ids
	prev  string          // the prompt an earlier attempt posted
	agent string
	text  string
	tasks []string // the tasks of refs the Manager still has (the prompt acts under their leases)
}

// askTurn makes one attempt at parent's owed turn, for the worker that has the parent: it
// posts the turn prompt, or finds the owed notifications seen, or schedules a retry.
func (m *Manager) askTurn(ctx context.Context, parent string) {
	defer m.bg.recoverAndLog("asking for a parent's turn")
	m.mu.Lock()
	ob := m.notes.outboxes[parent]
	if read := ob.retrieved(); len(read) > 0 {
		turnDone(read, TurnRetrieved, "", "")
		ob.unowe(read)
		changed := m.entriesLocked(read)
		none := len(ob.owed) == 0
		m.mu.Unlock()
		for _, e := range changed {
			m.persist(e)
		}
		if none {
			return
		}
		m.mu.Lock()
		ob = m.notes.outboxes[parent]
	}
	a := m.turnAskLocked(parent, ob)
	m.mu.Unlock()

	var held []*entry // counted as acted on from the post until its outcome is set below
	id, confirmed, seen, err := m.postTurnSafely(ctx, parent, a, &held)

	m.mu.Lock()
	defer func() {
		releaseLocked(held)
		changed := m.entriesLocked(a.refs)
		m.mu.Unlock()
		for _, e := range changed {
			m.persist(e)
		}
	}()
	now := m.bg.now()
	switch {
	case err == nil:
		state, covered := TurnAsked, a.refs
		if seen {
			state = TurnSeen
		}
		if id != "" && id == a.prev {
			// An earlier attempt's prompt landed: it covers the notifications posted before
			// it, not those delivered since, which stay owed.
			covered = postedBefore(a.refs, id)
		}
		turnDone(covered, state, id, "")
		ob.unowe(covered)
		if id != "" && !confirmed {
			m.notes.confirms.add(id, posted{parent: parent, turn: covered, at: now})
		}
	case lostLease(err): // not posted: one of the tasks is being handed over; ask again without it
		ob.turnNext = now.Add(notifyBackoffMin)
	case errors.Is(err, opencode.ErrNotFound) || now.Sub(ob.firstOwed) >= m.cfg.notifyHorizon:
		// The parent is gone, or the horizon has passed: the notifications stay in the
		// parent, and no turn is asked for them.
		m.cfg.logger.Error("asyncagents: parent's turn not asked; giving up", "parent", parent, "err", err)
		turnDone(a.refs, "", "", "turn not asked: "+err.Error())
		ob.unowe(a.refs)
	default:
		for _, r := range a.refs {
			if note := r.note(); note != nil {
				note.Attempts++
			}
		}
		if id != "" {
			ob.turnID = id
		}
		ob.turnFails++
		d := notifyBackoffMin << min(ob.turnFails-1, 16)
		ob.turnNext = now.Add(min(d, notifyBackoffMax))
		m.cfg.logger.Warn("asyncagents: asking for a parent's turn failed, retrying", "parent", parent, "next", ob.turnNext, "err", err)
	}
}

// turnAskLocked gathers what an attempt at parent's owed turn needs. The turn prompt names
// the tasks of the owed notifications and those of parent still active, by display id.
func (m *Manager) turnAskLocked(parent string, ob *outbox) turnAsk {
	a := turnAsk{refs: slices.Clone(ob.owed), ours: map[string]bool{}, prev: ob.turnID}
	var ended, running []string
	seen := map[*entry]bool{}
	for _, r := range a.refs {
		e := r.live()
		if e == nil {
			continue
		}
		if note := noteLocked(e, r.key); note != nil && note.MessageID != "" {
			a.ours[note.MessageID] = true
			if a.prev == "" {
				a.prev = note.TurnID
			}
		}
		a.agent = e.task.ParentAgent
		if !seen[e] {
			seen[e] = true
			ended = append(ended, m.tasks.reg.DisplayID(e.task.ID))
			a.tasks = append(a.tasks, e.task.ID)
		}
	}
	if d := m.progress.lastID(parent); d != "" && len(a.ours) > 0 {
		a.ours[d] = true // a digest is the Manager's own message, not a turn that saw them
	}
	for _, id := range m.tasks.reg.Tasks(parent) {
		if e := m.tasks.byID[id]; e != nil && !e.task.Status.Terminal() {
			running = append(running, m.tasks.reg.DisplayID(id))
		}
	}
	a.text = hints.Turn(ended, running, m.notes.prefix())
	return a
}

// retrieved returns the owed notifications of ob whose results the host read already
// (Output marked the completed run's result retrieved after it ended): their turn is not
// needed. None while an earlier attempt's prompt may have landed (its outcome decides them).
// Manager.mu is held.
func (ob *outbox) retrieved() []noteRef {
	if ob == nil || ob.turnID != "" {
		return nil
	}
	var read []noteRef
	for _, r := range ob.owed {
		e := r.live()
		if e == nil {
			continue
		}
		note := noteLocked(e, r.key)
		t := &e.task
		if note == nil || note.TurnID != "" || t.Status != StatusCompleted || t.Retrieved.Before(note.Created) ||
			note.Key != t.ID+"/"+strconv.Itoa(t.ResumeCount)+"/"+string(StatusCompleted) {
			continue
		}
		read = append(read, r)
	}
	return read
}

// postTurnSafely makes one attempt at the turn prompt a, bounded like a notification's. It
// reports the prompt's id ("" when none was posted), whether the server showed it, and
// whether the owed notifications were found seen instead. A panic (in the Client or the
// Store) is logged and counts as a failed attempt. The post counts as acting on the tasks
// from the lease check on, in *held (see postCtx).
func (m *Manager) postTurnSafely(ctx context.Context, parent string, a turnAsk, held *[]*entry) (id string, confirmed, seen bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			m.cfg.logger.Error("asyncagents: panic asking for a parent's turn", "parent", parent, "panic", r, "stack", string(debug.Stack()))
			id, confirmed, seen, err = "", false, false, fmt.Errorf("asyncagents: panic asking for a parent's turn: %v", r)
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, 2*m.cfg.requestTimeout)
	defer cancel()
	if len(a.ours) == 0 {
		return "", false, true, nil // cleared meanwhile: nothing to ask a turn for
	}
	parts := func(id string) []string { return []string{opencode.PartID(id, "turn")} }
	return m.postOnce(ctx, parent, a.prev, parts, func(newest string) bool { return !a.ours[newest] }, func(id string) error {
		m.mu.Lock()
		for _, r := range a.refs {
			if note := r.note(); note != nil {
				note.TurnID = id
			}
		}
		changed := m.entriesLocked(a.refs)
		m.mu.Unlock()
		var errs []error
		for _, e := range changed {
			errs = append(errs, m.persist(e))
		}
		return errors.Join(errs...)
	}, func(id string) (bool, error) {
		ctx, cancel, err := m.postCtx(ctx, held, a.tasks...)
		if err != nil {
			return false, err
		}
		defer cancel()
		part := opencode.NewText(a.text)
		part.ID = parts(id)[0]
		req := opencode.PromptRequest{MessageID: id, Agent: a.agent, Parts: []opencode.TextPartInput{part}}
		return false, m.client.PromptAsync(ctx, parent, req)
	})
}

// entriesLocked returns the tasks of refs, each once, after recording a change of each.
func (m *Manager) entriesLocked(refs []noteRef) []*entry {
	var out []*entry
	for _, r := range refs {
		if e := r.live(); e != nil && !slices.Contains(out, e) {
			m.changedLocked(e)
			out = append(out, e)
		}
	}
	return out
}
