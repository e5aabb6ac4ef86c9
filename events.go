package asyncagents

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/asyncagents/asyncagents/internal/scan"
	"github.com/asyncagents/asyncagents/opencode"
)

// eventLoop keeps one subscription to the server's events, reconnecting with backoff.
// After every (re)connect all active tasks are reconciled, so an idle missed while
// disconnected is not lost.
func (m *Manager) eventLoop(q *eventQueue) {
	b := newBackoff(200*time.Millisecond, 10*time.Second)
	for {
		m.subscribe(b, q)
		if !m.wait(b.NextBackOff()) {
			return
		}
	}
}

// subscribe reads one connection of the event stream until it ends.
func (m *Manager) subscribe(b *backoff.ExponentialBackOff, q *eventQueue) {
	defer m.recoverAndLog("the event stream")
	defer m.firstTryOver() // also when Events panics
	// The handshake gets the quick request timeout; the stream, once open, lives until it
	// ends.
	ctx, cancel := context.WithCancel(m.ctx)
	defer cancel()
	handshake := time.AfterFunc(m.quickTimeout(), cancel)
	stream, err := m.client.Events(ctx)
	if !handshake.Stop() && err == nil {
		stream.Close()
		err = errors.New("asyncagents: the event stream did not open in time")
	}
	if err != nil {
		if m.ctx.Err() == nil {
			m.cfg.logger.Warn("asyncagents: subscribe to events", "err", err)
		}
		return
	}
	defer stream.Close()
	// A new connection: the mirrors of runs started before it no longer follow their runs.
	epoch := m.mirrors.epoch.Add(1)
	defer m.mirrors.live.Store(0)
	m.enqueueActive()
	m.firstTryOver()            // after the active tasks were queued: a launch waiting for it is not among them
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
		m.handle(q, ev, epoch)
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
func (m *Manager) applyLoop(q *eventQueue) {
	for {
		select {
		case <-m.stop:
			return
		case <-q.wake:
		}
		// A batch per lock: others get the lock between two batches of a long burst.
		for m.applyBatch(q) {
		}
	}
}

// applyBatch applies the events queued so far and reports whether there were any.
func (m *Manager) applyBatch(q *eventQueue) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.applyQueuedLocked(q, false)
}

// applyQueuedLocked applies the queued events in order: those queued so far, or with all,
// until none is left. Events leave the queue only under m.mu, so an event the reader applies
// itself (after applying the queue with all) comes after those it queued before it.
func (m *Manager) applyQueuedLocked(q *eventQueue, all bool) (applied bool) {
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
			m.applySafelyLocked(batch[i])
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

// applySafelyLocked applies ev; a panic is logged and the next event is applied as usual.
func (m *Manager) applySafelyLocked(ev runEvent) {
	defer m.recoverAndLog("handling an event")
	m.applyLocked(ev)
}

// handle applies one event of connection epoch: the status and idle events of a run,
// several per task, and activity go through q, without a decode; message and part events
// update the mirrors of task sessions' runs; the others are decoded once the session is
// known to be a task's, and applied after those queued before them.
func (m *Manager) handle(q *eventQueue, ev opencode.Event, epoch uint64) {
	defer m.recoverAndLog("handling an event")
	switch ev.Type {
	case opencode.EventMessagePartUpdate:
		m.partUpdated(q, ev, epoch)
	case opencode.EventSessionCreated: // published before the task's prompt was sent
		if l := m.mirrorOf(eventSession(ev)); l != nil {
			l.bind(epoch)
		}
	case opencode.EventMessageUpdated:
		if l := m.mirrorOf(eventSession(ev)); l != nil {
			l.add(logFrame{props: ev.Properties, msg: true}, epoch)
		}
		if completedStep(ev.Properties) { // counted by the apply loop, off the reader's path
			if sid := eventSession(ev); sid != nil {
				q.push(runEvent{typ: ev.Type, sid: string(sid), step: ev.Properties})
			}
		}
		if m.notes.confirms.n.Load() > 0 {
			m.confirmPosted(ev)
		}
		if m.notes.heads.n.Load() > 0 {
			m.headEvent(ev, epoch)
		}
	case opencode.EventMessageRemoved, opencode.EventMessagePartRemoved:
		if l := m.mirrorOf(eventSession(ev)); l != nil {
			l.broken, l.frames = true, nil
		}
	case opencode.EventMessagePartDelta:
		if m.cfg.stale > 0 { // streaming text is activity, nothing else
			if sid := ev.SessionID(); sid != "" {
				q.push(runEvent{sid: sid})
			}
		}
	case opencode.EventSessionIdle, opencode.EventSessionStatus, opencode.EventSessionError,
		opencode.EventSessionDeleted, opencode.EventPermissionAsked, opencode.EventPermissionReplied:
		m.sessionEvent(q, ev, epoch)
	}
}

// sessionEvent handles an event about a session: its status and idle events go through q
// without a decode; the others are decoded once the session is known to be an active task's,
// and applied after those queued before them. The session id is read first: events of other
// sessions cost no more.
func (m *Manager) sessionEvent(q *eventQueue, ev opencode.Event, epoch uint64) {
	sid := ev.SessionID()
	if sid == "" {
		return
	}
	if re, ok := m.statusEvent(ev, sid, epoch); ok {
		q.push(re)
		return
	}
	active := m.activeAfterQueued(q, sid)
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
			re = m.idleEvent(re, epoch)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.applyQueuedLocked(q, true)
	m.applyLocked(re)
}

// statusEvent returns the run event of a session.idle, or of a session.status whose type it
// reads without a decode.
func (m *Manager) statusEvent(ev opencode.Event, sid string, epoch uint64) (runEvent, bool) {
	switch ev.Type {
	case opencode.EventSessionIdle:
		return m.idleEvent(runEvent{typ: ev.Type, sid: sid}, epoch), true
	case opencode.EventSessionStatus:
		if typ, ok := scan.BareStatusType(ev.Properties); ok {
			re := runEvent{typ: ev.Type, sid: sid, status: typ}
			if typ == "idle" {
				re = m.idleEvent(re, epoch)
			}
			return re, true
		}
	}
	return runEvent{}, false
}

// activeAfterQueued applies the events queued so far and reports whether sid is the session
// of an active task.
func (m *Manager) activeAfterQueued(q *eventQueue, sid string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.applyQueuedLocked(q, true)
	e := m.tasks[sid]
	return e != nil && e.task.Status.Active()
}

// idleEvent adds to an idle event of a session the frames its run's log recorded, when
// connection epoch carried the whole run.
func (m *Manager) idleEvent(re runEvent, epoch uint64) runEvent {
	if l := m.mirrorOf([]byte(re.sid)); l != nil {
		if frames := l.snapshot(epoch); frames != nil {
			re.mirror, re.reply = l, frames
		}
	}
	return re
}

// partUpdated handles message.part.updated: the part goes to the mirror of the session's run,
// a tool part of a task's run counts for progress, and any part of a run is activity. The
// part events of other sessions cost a session id (not copied), a map lookup and a byte
// search: only a tool part of a session without a mirror is looked up further, and decoded
// once the session is known to be a task's.
func (m *Manager) partUpdated(q *eventQueue, ev opencode.Event, epoch uint64) {
	sid := eventSession(ev)
	if len(sid) == 0 {
		return
	}
	r := m.mirrorOf(sid)
	if r != nil && r.broken {
		r = nil
	}
	tool, streamed := scan.PartTypes(ev.Properties)
	if !tool { // text and reasoning go to the mirror, decoded when the run is decided; other parts are written once
		if r != nil && streamed {
			r.add(logFrame{props: ev.Properties}, epoch)
		}
		m.activity(q, sid)
		return
	}
	if r == nil && !m.activeAfterQueued(q, string(sid)) {
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
		m.activity(q, sid)
		return
	}
	part := &opencode.Part{ID: p.ID, MessageID: p.MessageID, Type: opencode.PartTool, Tool: p.Tool}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.applyQueuedLocked(q, true)
	m.applyLocked(runEvent{typ: ev.Type, sid: string(sid), p: &opencode.EventProperties{Part: part}})
}

// activity records an event of session sid as activity, when the stale watchdog is on.
func (m *Manager) activity(q *eventQueue, sid []byte) {
	if m.cfg.stale > 0 {
		q.push(runEvent{sid: string(sid)})
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

// applyLocked applies an event of a task's run.
func (m *Manager) applyLocked(ev runEvent) {
	e := m.tasks[ev.sid]
	if e == nil {
		return
	}
	if ev.typ == "" { // activity alone
		e.active = m.now()
		return
	}
	if !e.task.Status.Active() {
		return
	}
	var p opencode.EventProperties // decoded: for the events that are not queued
	if ev.p != nil {
		p = *ev.p
	}
	e.active = m.now()
	switch ev.typ {
	case opencode.EventSessionIdle:
		m.idleLocked(e, ev)
	case opencode.EventSessionStatus:
		switch ev.status {
		case "":
			return
		case "idle":
			m.idleLocked(e, ev)
		case "retry":
			e.retry = p.Status.Message
			m.busyLocked(e)
		default: // busy: the next poll that finds it absent reads it again
			e.retry = ""
			m.busyLocked(e)
		}
	case opencode.EventSessionError:
		e.sessErr = p.Error.Message()
		if !e.seenBusy { // unknown agent: no busy, no idle will come
			m.enqueueLocked(e.task.ID, true)
		}
	case opencode.EventMessagePartUpdate:
		m.progressLocked(e, p.Part)
	case opencode.EventMessageUpdated:
		m.stepLocked(e, ev.step)
	case opencode.EventPermissionAsked:
		m.permissionAskedLocked(e, PendingPermission{ID: p.ID, Permission: p.Permission, Patterns: p.Patterns})
	case opencode.EventPermissionReplied:
		e.task.Permission = nil
		m.changedLocked(e)
	}
}

// idleLocked queues a reconcile of e's run, whose session was seen idle: from the messages
// of the run's mirror when the idle event carries them, else from a read.
func (m *Manager) idleLocked(e *entry, ev runEvent) {
	e.streamed = nil
	if ev.mirror != nil && ev.mirror == e.mirror {
		e.streamed = ev.reply
	}
	m.enqueueLocked(e.task.ID, true)
}

// sessionDeleted handles session.deleted: a deleted parent takes its tasks with it (active
// ones are aborted); a deleted task session cancels its task (and is aborted, since OpenCode
// lets a deleted busy session run on).
func (m *Manager) sessionDeleted(id string) {
	m.mu.Lock()
	var abort, remove []string
	var removed []*entry
	var start []*entry
	for _, tid := range slices.Clone(m.reg.Tasks(id)) {
		e := m.tasks[tid]
		if e.task.Status.Active() {
			abort = append(abort, tid)
		}
		remove = append(remove, tid)
		removed = append(removed, e)
		start = append(start, m.removeLocked(e)...)
	}
	own := m.tasks[id]
	if own != nil && own.task.Status.Active() {
		abort = append(abort, id) // OpenCode does not stop a deleted busy session
	}
	m.mu.Unlock()
	m.startQueued(start)
	for _, e := range removed { // saves in flight land before the delete
		e.saveMu.Lock()
		e.saveMu.Unlock() //nolint:staticcheck // empty critical section on purpose
	}
	for _, t := range abort {
		ctx, cancel := m.requestCtx()
		err := m.client.Abort(ctx, t)
		cancel()
		if err != nil {
			m.cfg.logger.Warn("asyncagents: abort task of deleted session", "task", t, "err", err)
		}
	}
	if len(remove) > 0 {
		if err := m.cfg.store.Delete(m.ctx, remove...); err != nil {
			m.cfg.logger.Warn("asyncagents: delete tasks of deleted parent", "err", err)
		}
	}
	if own != nil {
		m.finish(own, own.task.ResumeCount, StatusCancelled, "", "session deleted")
	}
}
