package asyncagents

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/asyncagents/asyncagents/internal/scan"
	"github.com/asyncagents/asyncagents/opencode"
)

// stream is the part of the Manager that follows the server's events: one subscription
// (GET /global/event), reconnected with backoff, read by one goroutine (loop), which hands
// the events of runs to another (applyLoop) through a queue, so that in a burst of run ends
// the reader never waits for Manager.mu. It records what the stream carries of each run in
// the mirrors, takes the message events the notifier waits for, and applies the events of
// tasks' runs to the Manager's tasks (Manager.applyLocked) under Manager.mu, through m.
type stream struct {
	m *Manager
	q eventQueue
}

func newStream(m *Manager) *stream {
	return &stream{m: m, q: eventQueue{wake: make(chan struct{}, 1)}}
}

// start starts the reader and the applier.
func (st *stream) start() {
	st.m.bg.keep("the event stream", st.loop)
	st.m.bg.keep("applying events", st.applyLoop)
}

// loop keeps one subscription to the server's events, reconnecting with backoff. After every
// (re)connect all active tasks are reconciled, so an idle missed while disconnected is not
// lost.
func (st *stream) loop() {
	b := newBackoff(200*time.Millisecond, 10*time.Second)
	for {
		st.subscribe(b)
		if !st.m.bg.wait(b.NextBackOff()) {
			return
		}
	}
}

// subscribe reads one connection of the event stream until it ends.
func (st *stream) subscribe(b *backoff.ExponentialBackOff) {
	m := st.m
	defer m.bg.recoverAndLog("the event stream")
	defer m.mirrors.firstTryOver() // also when Events panics
	// The handshake gets the quick request timeout; the stream, once open, lives until it
	// ends.
	ctx, cancel := context.WithCancel(m.bg.ctx)
	defer cancel()
	handshake := time.AfterFunc(m.bg.quickTimeout(), cancel)
	stream, err := m.client.Events(ctx)
	if !handshake.Stop() && err == nil {
		stream.Close()
		err = errors.New("asyncagents: the event stream did not open in time")
	}
	if err != nil {
		if m.bg.ctx.Err() == nil {
			m.cfg.logger.Warn("asyncagents: subscribe to events", "err", err)
		}
		return
	}
	defer stream.Close()
	// A new connection: the mirrors of runs started before it no longer follow their runs.
	epoch := m.mirrors.epoch.Add(1)
	defer m.mirrors.live.Store(0)
	m.enqueueActive()
	m.mirrors.firstTryOver()    // after the active tasks were queued: a launch waiting for it is not among them
	m.catchUpPermissions(false) // requests asked while no stream was open
	for ev, err := range stream.All() {
		if err != nil {
			m.cfg.logger.Debug("asyncagents: event stream ended", "err", err)
			return
		}
		b.Reset()
		if ev.Type != opencode.EventServerConnected && ev.Type != opencode.EventServerHeartbeat && m.mirrors.live.Load() != epoch {
			m.mirrors.live.Store(epoch) // delivering: runs whose prompt is sent from now on are followed whole
		}
		st.handle(ev, epoch)
	}
}

// eventQueue hands the events that need no decoding (a run's status and idle events, and
// activity) from the goroutine reading the stream to the one applying them, which applies
// all that have arrived under one lock: in a burst of run ends, the reader never waits for
// the Manager's lock and the Manager's lock is taken once per batch, not once per event.
type eventQueue struct {
	mu    sync.Mutex
	evs   []runEvent
	spare []runEvent // the buffer the last batch was applied from, for the next events
	wake  chan struct{}
}

// runEvent is an event of a session's run: a status or idle event, or activity alone (typ
// ""). Events that carry more are decoded into p and never queued.
type runEvent struct {
	typ, sid string
	status   string                    // the status type of a session.status event
	p        *opencode.EventProperties // the decoded properties, or nil
	// An idle event of a run whose log holds the whole run: the log and its frames.
	mirror *runLog
	reply  []logFrame
	step   []byte // message.updated: the properties of a completed step (usage.go)
}

func (q *eventQueue) push(ev runEvent) {
	q.mu.Lock()
	q.evs = append(q.evs, ev)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// applyLoop applies the queued events until the Manager closes.
func (st *stream) applyLoop() {
	for {
		select {
		case <-st.m.bg.stopc:
			return
		case <-st.q.wake:
		}
		// A batch per lock: others get the lock between two batches of a long burst.
		for st.applyBatch() {
		}
	}
}

// applyBatch applies the events queued so far and reports whether there were any.
func (st *stream) applyBatch() bool {
	st.m.mu.Lock()
	defer st.m.mu.Unlock()
	return st.applyQueued(false)
}

// applyQueued applies the queued events in order, under Manager.mu: those queued so far, or
// with all, until none is left. Events leave the queue only under Manager.mu, so an event the
// reader applies itself (after applying the queue with all) comes after those it queued before
// it.
func (st *stream) applyQueued(all bool) (applied bool) {
	q := &st.q
	for {
		q.mu.Lock()
		batch := q.evs
		if len(batch) == 0 {
			q.mu.Unlock()
			return applied
		}
		q.evs, q.spare = q.spare, nil
		q.mu.Unlock()
		applied = true
		for i := range batch {
			st.applySafely(batch[i])
		}
		clear(batch)
		if cap(batch) <= 256 { // a burst's buffer is not kept
			q.mu.Lock()
			q.spare = batch[:0]
			q.mu.Unlock()
		}
		if !all {
			return true
		}
	}
}

// applySafely applies ev under Manager.mu; a panic is logged and the next event is applied as
// usual.
func (st *stream) applySafely(ev runEvent) {
	defer st.m.bg.recoverAndLog("handling an event")
	st.m.applyLocked(ev)
}

// handle applies one event of connection epoch: the status and idle events of a run,
// several per task, and activity go through q, without a decode; message and part events
// update the mirrors of task sessions' runs; the others are decoded once the session is
// known to be a task's, and applied after those queued before them.
func (st *stream) handle(ev opencode.Event, epoch uint64) {
	m := st.m
	defer m.bg.recoverAndLog("handling an event")
	switch ev.Type {
	case opencode.EventMessagePartUpdate:
		st.partUpdated(ev, epoch)
	case opencode.EventSessionCreated: // published before the task's prompt was sent
		if l := m.mirrors.of(eventSession(ev)); l != nil {
			l.bind(epoch)
		}
	case opencode.EventMessageUpdated:
		if l := m.mirrors.of(eventSession(ev)); l != nil {
			l.add(logFrame{props: ev.Properties, msg: true}, epoch)
		}
		if completedStep(ev.Properties) { // counted by the apply loop, off the reader's path
			if sid := eventSession(ev); sid != nil {
				st.q.push(runEvent{typ: ev.Type, sid: string(sid), step: ev.Properties})
			}
		}
		if m.notes.confirms.n.Load() > 0 {
			m.notes.confirms.confirm(ev)
		}
		if m.notes.heads.n.Load() > 0 {
			m.notes.heads.event(ev, epoch)
		}
	case opencode.EventMessageRemoved, opencode.EventMessagePartRemoved:
		if l := m.mirrors.of(eventSession(ev)); l != nil {
			l.broken, l.frames = true, nil
		}
	case opencode.EventMessagePartDelta:
		if m.cfg.stale > 0 { // streaming text is activity, nothing else
			if sid := ev.SessionID(); sid != "" {
				st.q.push(runEvent{sid: sid})
			}
		}
	case opencode.EventSessionIdle, opencode.EventSessionStatus, opencode.EventSessionError,
		opencode.EventSessionDeleted, opencode.EventPermissionAsked, opencode.EventPermissionReplied:
		st.sessionEvent(ev, epoch)
	}
}

// sessionEvent handles an event about a session: its status and idle events go through q
// without a decode; the others are decoded once the session is known to be an active task's,
// and applied after those queued before them. The session id is read first: events of other
// sessions cost no more.
func (st *stream) sessionEvent(ev opencode.Event, epoch uint64) {
	m := st.m
	sid := ev.SessionID()
	if sid == "" {
		return
	}
	if re, ok := st.statusEvent(ev, sid, epoch); ok {
		st.q.push(re)
		return
	}
	active := st.activeAfterQueued(sid)
	if ev.Type == opencode.EventSessionDeleted {
		m.sessionDeleted(sid)
		return
	}
	if !active {
		return
	}
	p, err := ev.Decode()
	if err != nil {
		return
	}
	re := runEvent{typ: ev.Type, sid: sid, p: &p}
	if p.Status != nil {
		if re.status = p.Status.Type; re.status == "idle" {
			re = st.idleEvent(re, epoch)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	st.applyQueued(true)
	m.applyLocked(re)
}

// statusEvent returns the run event of a session.idle, or of a session.status whose type it
// reads without a decode.
func (st *stream) statusEvent(ev opencode.Event, sid string, epoch uint64) (runEvent, bool) {
	switch ev.Type {
	case opencode.EventSessionIdle:
		return st.idleEvent(runEvent{typ: ev.Type, sid: sid}, epoch), true
	case opencode.EventSessionStatus:
		if typ, ok := scan.BareStatusType(ev.Properties); ok {
			re := runEvent{typ: ev.Type, sid: sid, status: typ}
			if typ == "idle" {
				re = st.idleEvent(re, epoch)
			}
			return re, true
		}
	}
	return runEvent{}, false
}

// activeAfterQueued applies the events queued so far and reports whether sid is the session
// of an active task.
func (st *stream) activeAfterQueued(sid string) bool {
	m := st.m
	m.mu.Lock()
	defer m.mu.Unlock()
	st.applyQueued(true)
	e := m.tasks.inSession(sid)
	return e != nil && e.task.Status.Active()
}

// idleEvent adds to an idle event of a session the frames its run's log recorded, when
// connection epoch carried the whole run.
func (st *stream) idleEvent(re runEvent, epoch uint64) runEvent {
	if l, frames := st.m.mirrors.whole(re.sid, epoch); l != nil {
		re.mirror, re.reply = l, frames
	}
	return re
}

// partUpdated handles message.part.updated: the part goes to the mirror of the session's run,
// a tool part of a task's run counts for progress, and any part of a run is activity. The
// part events of other sessions cost a session id (not copied), a map lookup and a byte
// search: only a tool part of a session without a mirror is looked up further, and decoded
// once the session is known to be a task's.
func (st *stream) partUpdated(ev opencode.Event, epoch uint64) {
	m := st.m
	sid := eventSession(ev)
	if len(sid) == 0 {
		return
	}
	r := m.mirrors.of(sid)
	if r != nil && r.broken {
		r = nil
	}
	tool, streamed := scan.PartTypes(ev.Properties)
	if !tool { // text and reasoning go to the mirror, decoded when the run is decided; other parts are written once
		if r != nil && streamed {
			r.add(logFrame{props: ev.Properties}, epoch)
		}
		st.activity(sid)
		return
	}
	if r == nil && !st.activeAfterQueued(string(sid)) {
		return
	}
	p, ok := decodePart(ev.Properties)
	if r != nil {
		if ok {
			r.add(logFrame{tool: &p}, epoch)
		} else {
			r.add(logFrame{props: ev.Properties}, epoch)
		}
	}
	if !ok || p.Type != opencode.PartTool {
		st.activity(sid)
		return
	}
	part := &opencode.Part{ID: p.ID, MessageID: p.MessageID, Type: opencode.PartTool, Tool: p.Tool}
	m.mu.Lock()
	defer m.mu.Unlock()
	st.applyQueued(true)
	m.applyLocked(runEvent{typ: ev.Type, sid: string(sid), p: &opencode.EventProperties{Part: part}})
}

// activity records an event of session sid as activity, when the stale watchdog is on.
func (st *stream) activity(sid []byte) {
	if st.m.cfg.stale > 0 {
		st.q.push(runEvent{sid: string(sid)})
	}
}

// eventSession returns the session id of an event: without a copy when OpenCode wrote it
// first in the properties, as it does.
func eventSession(ev opencode.Event) []byte {
	if sid := scan.LeadingSessionID(ev.Properties); sid != nil {
		return sid
	}
	if sid := ev.SessionID(); sid != "" {
		return []byte(sid)
	}
	return nil
}
