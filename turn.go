package asyncagents

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"time"

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

// waveMaxWindows bounds how long a turn waits for a wave to settle: at most this many wave
// windows after the first notification it covers.
const waveMaxWindows = 5

// turnDueLocked returns when parent's owed turn is due: at once when the parent has no active
// task (none queued, running or resumed, and no launch under way), otherwise a wave window
// after its newest notification, and at most waveMaxWindows windows after the first one the
// turn covers.
func (m *Manager) turnDueLocked(parent string, ob *outbox) time.Time {
	if m.slots.activeOf[parent] == 0 {
		return time.Time{}
	}
	w := m.cfg.waveWindow
	return earliest(ob.lastEnd.Add(w), ob.firstOwed.Add(waveMaxWindows*w))
}

// oweTurnLocked records that ref, a notification of parent's outbox ob whose run ended at
// ended, was delivered without reply and waits for a turn.
func (m *Manager) oweTurnLocked(ob *outbox, ref noteRef, ended time.Time) {
	if len(ob.owed) == 0 || ended.Before(ob.firstOwed) {
		ob.firstOwed = ended
	}
	ob.owed = append(ob.owed, ref)
}

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
	defer m.recoverAndLog("asking for a parent's turn")
	m.mu.Lock()
	ob := m.notes.outboxes[parent]
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
	now := m.now()
	switch {
	case err == nil:
		state, covered := TurnAsked, a.refs
		if seen {
			state = TurnSeen
		}
		if id != "" && id == a.prev {
			// An earlier attempt's prompt landed: it covers the notifications posted before
			// it, not those delivered since, which stay owed.
			covered = m.postedBeforeLocked(a.refs, id)
		}
		m.turnDoneLocked(covered, state, id, "")
		m.unoweLocked(ob, covered)
		if id != "" && !confirmed {
			m.awaitPosted(id, posted{parent: parent, turn: covered, at: now})
		}
	case lostLease(err): // not posted: one of the tasks is being handed over; ask again without it
		ob.turnNext = now.Add(notifyBackoffMin)
	case errors.Is(err, opencode.ErrNotFound) || now.Sub(ob.firstOwed) >= m.cfg.notifyHorizon:
		// The parent is gone, or the horizon has passed: the notifications stay in the
		// parent, and no turn is asked for them.
		m.cfg.logger.Error("asyncagents: parent's turn not asked; giving up", "parent", parent, "err", err)
		m.turnDoneLocked(a.refs, "", "", "turn not asked: "+err.Error())
		m.unoweLocked(ob, a.refs)
	default:
		for _, r := range a.refs {
			if e := m.tasks[r.task]; e != nil {
				if note := noteLocked(e, r.key); note != nil {
					note.Attempts++
				}
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

// unoweLocked drops refs from ob's owed notifications, after an attempt at their turn ended
// them. Others may have been owed again meanwhile (reoweLocked).
func (m *Manager) unoweLocked(ob *outbox, refs []noteRef) {
	done := make(map[noteRef]bool, len(refs))
	for _, r := range refs {
		done[r] = true
	}
	ob.owed = slices.DeleteFunc(ob.owed, func(r noteRef) bool { return done[r] })
	ob.turnID, ob.turnNext, ob.turnFails = "", time.Time{}, 0
	if len(ob.owed) == 0 {
		ob.owed = nil
		return
	}
	ob.firstOwed = time.Time{}
	for _, r := range ob.owed {
		if e := m.tasks[r.task]; e != nil {
			if note := noteLocked(e, r.key); note != nil && (ob.firstOwed.IsZero() || note.Created.Before(ob.firstOwed)) {
				ob.firstOwed = note.Created
			}
		}
	}
}

// postedBeforeLocked returns the notifications of refs posted before message id (their
// message ids sort before it: the Manager chose each newer than the parent's newest).
func (m *Manager) postedBeforeLocked(refs []noteRef, id string) []noteRef {
	var out []noteRef
	for _, r := range refs {
		if e := m.tasks[r.task]; e != nil {
			if note := noteLocked(e, r.key); note != nil && note.MessageID < id {
				out = append(out, r)
			}
		}
	}
	return out
}

// turnAskLocked gathers what an attempt at parent's owed turn needs. The turn prompt names
// the tasks of the owed notifications and those of parent still active, by display id.
func (m *Manager) turnAskLocked(parent string, ob *outbox) turnAsk {
	a := turnAsk{refs: slices.Clone(ob.owed), ours: map[string]bool{}, prev: ob.turnID}
	var ended, running []string
	seen := map[string]bool{}
	for _, r := range a.refs {
		e := m.tasks[r.task]
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
		if !seen[r.task] {
			seen[r.task] = true
			ended = append(ended, m.reg.DisplayID(r.task))
			a.tasks = append(a.tasks, r.task)
		}
	}
	for _, id := range m.reg.Tasks(parent) {
		if e := m.tasks[id]; e != nil && !e.task.Status.Terminal() {
			running = append(running, m.reg.DisplayID(id))
		}
	}
	a.text = hints.Turn(ended, running, m.cfg.toolPrefix)
	return a
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
	return m.postOnce(ctx, parent, a.prev, func(newest string) bool { return !a.ours[newest] }, func(id string) error {
		m.mu.Lock()
		for _, r := range a.refs {
			if e := m.tasks[r.task]; e != nil {
				if note := noteLocked(e, r.key); note != nil {
					note.TurnID = id
				}
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
		req := opencode.PromptRequest{MessageID: id, Agent: a.agent, Parts: []opencode.TextPartInput{opencode.NewText(a.text)}}
		return false, m.client.PromptAsync(ctx, parent, req)
	})
}

// turnDoneLocked sets the turn state of the notifications refs (and the prompt's id, and an
// error) on their tasks.
func (m *Manager) turnDoneLocked(refs []noteRef, state TurnState, id, errMsg string) {
	for _, r := range refs {
		e := m.tasks[r.task]
		if e == nil {
			continue
		}
		if note := noteLocked(e, r.key); note != nil && note.Turn == TurnOwed {
			note.Turn = state
			if id != "" {
				note.TurnID = id
			}
			if errMsg != "" {
				note.Error = errMsg
			}
		}
	}
}

// entriesLocked returns the tasks of refs, each once, after recording a change of each.
func (m *Manager) entriesLocked(refs []noteRef) []*entry {
	var out []*entry
	for _, r := range refs {
		if e := m.tasks[r.task]; e != nil && !slices.Contains(out, e) {
			m.changedLocked(e)
			out = append(out, e)
		}
	}
	return out
}

// reoweLocked makes the notifications refs owed again: their turn prompt, message id, the
// server acknowledged and did not store. It forgets the parent's newest message id, which
// was raised to that prompt's, and readies the parent.
func (m *Manager) reoweLocked(parent string, refs []noteRef, id string) {
	var back []noteRef
	for _, r := range refs {
		e := m.tasks[r.task]
		if e == nil || e.removed {
			continue
		}
		if note := noteLocked(e, r.key); note != nil && note.Turn == TurnAsked && note.TurnID == id {
			note.Turn, note.TurnID = TurnOwed, ""
			m.changedLocked(e)
			back = append(back, r)
		}
	}
	if len(back) == 0 {
		return
	}
	m.notes.heads.forget(parent)
	ob := m.outboxLocked(parent)
	for _, r := range back {
		m.oweTurnLocked(ob, r, noteLocked(m.tasks[r.task], r.key).Created)
	}
	m.readyLocked(parent, ob)
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
