package asyncagents

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/asyncagents/asyncagents/manager"
	"github.com/asyncagents/asyncagents/opencode"
)

// reconcileWindow is how many of the latest messages a reconcile reads: enough to find
// the run's final assistant message and the prompt it answers.
const reconcileWindow = 8

func (m *Manager) start() {
	q := &eventQueue{wake: make(chan struct{}, 1)}
	m.goLoop(func() { m.eventLoop(q) })
	m.goLoop(func() { m.applyLoop(q) })
	m.goLoop(m.pollLoop)
	m.recon = reconcilers{alive: m.cfg.reconcilers, limit: min(reconcileBurst*m.cfg.reconcilers, maxReconcilers)}
	for range m.cfg.reconcilers {
		m.goLoop(func() { m.reconcileLoop(true) })
	}
	m.goLoop(m.notifyLoop)
}

func (m *Manager) goLoop(f func()) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		f()
	}()
}

// recoverAndLog is deferred by the background work that serves no single task: a panic
// there (in the Client, the Store or the Manager) is logged with its stack and the goroutine
// goes on with its next round. Work for one task records the panic on that task instead.
func (m *Manager) recoverAndLog(what string) {
	if r := recover(); r != nil {
		m.cfg.logger.Error("asyncagents: panic in "+what, "panic", r, "stack", string(debug.Stack()))
	}
}

// wait sleeps for d on the Manager's clock; false when the Manager is closing.
func (m *Manager) wait(d time.Duration) bool {
	select {
	case <-m.stop:
		return false
	case <-m.cfg.clock.After(d):
		return true
	}
}

func newBackoff(initial, maxInterval time.Duration) *backoff.ExponentialBackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = initial
	b.MaxInterval = maxInterval
	return b
}

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
	epoch := m.epoch.Add(1)
	defer m.live.Store(0)
	m.enqueueActive()
	m.catchUpPermissions(false) // requests asked while no stream was open
	for ev, err := range stream.All() {
		if err != nil {
			m.cfg.logger.Debug("asyncagents: event stream ended", "err", err)
			return
		}
		b.Reset()
		if ev.Type != opencode.EventServerConnected && ev.Type != opencode.EventServerHeartbeat && m.live.Load() != epoch {
			m.live.Store(epoch) // delivering: runs whose prompt is sent from now on are followed whole
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
	case opencode.EventSessionIdle, opencode.EventSessionStatus, opencode.EventSessionError,
		opencode.EventSessionDeleted, opencode.EventPermissionAsked, opencode.EventPermissionReplied:
	case opencode.EventMessagePartUpdate:
		m.partUpdated(q, ev)
		return
	case opencode.EventMessageUpdated:
		if l := m.mirrorOf(eventSession(ev)); l != nil {
			l.add(logFrame{props: ev.Properties, msg: true})
		}
		if m.nconfirm.Load() > 0 {
			m.confirmPosted(ev.Properties)
		}
		return
	case opencode.EventMessageRemoved, opencode.EventMessagePartRemoved:
		if l := m.mirrorOf(eventSession(ev)); l != nil {
			l.broken, l.frames = true, nil
		}
		return
	case opencode.EventMessagePartDelta:
		if m.cfg.stale > 0 { // streaming text is activity, nothing else
			if sid := ev.SessionID(); sid != "" {
				q.push(runEvent{sid: sid})
			}
		}
		return
	default:
		return
	}
	// The session id first: events of other sessions cost no more.
	sid := ev.SessionID()
	if sid == "" {
		return
	}
	switch ev.Type {
	case opencode.EventSessionIdle:
		q.push(m.idleEvent(runEvent{typ: ev.Type, sid: sid}, epoch))
		return
	case opencode.EventSessionStatus:
		if typ, ok := statusType(ev.Properties); ok {
			re := runEvent{typ: ev.Type, sid: sid, status: typ}
			if typ == "idle" {
				re = m.idleEvent(re, epoch)
			}
			q.push(re)
			return
		}
	}
	m.mu.Lock()
	m.applyQueuedLocked(q, true)
	e := m.tasks[sid]
	active := e != nil && e.task.Status.Active()
	m.mu.Unlock()
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
func (m *Manager) partUpdated(q *eventQueue, ev opencode.Event) {
	sid := eventSession(ev)
	if len(sid) == 0 {
		return
	}
	r := m.mirrorOf(sid)
	if r != nil && r.broken {
		r = nil
	}
	tool, streamed := partTypes(ev.Properties)
	switch {
	case r != nil && !tool && !streamed: // a part written once: a mirror needs none
		m.activity(q, sid)
		return
	case r == nil && !tool:
		m.activity(q, sid)
		return
	case r == nil:
		m.mu.Lock()
		m.applyQueuedLocked(q, true)
		e := m.tasks[string(sid)]
		active := e != nil && e.task.Status.Active()
		m.mu.Unlock()
		if !active {
			return
		}
	}
	if r != nil && !tool { // text or reasoning: decoded when the run is decided
		r.add(logFrame{props: ev.Properties})
		m.activity(q, sid)
		return
	}
	p, ok := decodePart(ev.Properties)
	if r != nil {
		if ok {
			r.add(logFrame{tool: &p})
		} else {
			r.add(logFrame{props: ev.Properties})
		}
	}
	if !ok || p.Type != opencode.PartTool {
		m.activity(q, sid)
		return
	}
	part := &opencode.Part{ID: p.ID, Type: opencode.PartTool, Tool: p.Tool}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.applyQueuedLocked(q, true)
	m.applyLocked(runEvent{typ: ev.Type, sid: string(sid), p: &opencode.EventProperties{Part: part}})
}

// partTypes reports whether a part's properties hold "type":"tool", and "type":"text" or
// "type":"reasoning" (parts that stream), without decoding them.
func partTypes(props []byte) (tool, streamed bool) {
	const key = `"type":"`
	for i := bytes.Index(props, []byte(key)); i >= 0; {
		rest := props[i+len(key):]
		switch {
		case bytes.HasPrefix(rest, []byte(`tool"`)):
			tool = true
		case bytes.HasPrefix(rest, []byte(`text"`)), bytes.HasPrefix(rest, []byte(`reasoning"`)):
			streamed = true
		}
		j := bytes.Index(rest, []byte(key))
		if j < 0 {
			break
		}
		i += len(key) + j
	}
	return tool, streamed
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
	if sid := sessionID(ev.Properties); sid != nil {
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

// statusType returns the type of a session.status event's status when it has no other field,
// as OpenCode writes busy and idle ({"sessionID":…,"status":{"type":"idle"}}), read without a
// decode; ok is false for any other shape (a retry, with its message), which is decoded.
func statusType(props []byte) (typ string, ok bool) {
	const key = `,"status":{"type":"`
	i := bytes.LastIndex(props, []byte(key))
	if i < 0 {
		return "", false
	}
	rest := props[i+len(key):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 || string(rest[j:]) != `"}}` {
		return "", false
	}
	switch string(rest[:j]) {
	case "idle":
		return "idle", true
	case "busy":
		return "busy", true
	}
	return "", false
}

// watchdog is a task whose deadline or stale timeout fired.
type watchdog struct {
	e   *entry
	rc  int
	msg string
}

// expiredLocked reports whether e's run has passed its deadline or been inactive for the
// stale timeout.
func (m *Manager) expiredLocked(e *entry, now time.Time) (watchdog, bool) {
	t := &e.task
	if t.Deadline > 0 && now.Sub(t.Started) >= t.Deadline {
		return watchdog{e, t.ResumeCount, fmt.Sprintf("deadline: the run took longer than its deadline of %v and was aborted", t.Deadline)}, true
	}
	if m.cfg.stale > 0 {
		last := t.Started
		if e.active.After(last) {
			last = e.active
		}
		if idle := now.Sub(last); idle >= m.cfg.stale {
			msg := fmt.Sprintf("stale: no activity for %v (stale timeout %v); the run was aborted", idle.Round(time.Second), m.cfg.stale)
			if e.retry != "" {
				msg += "; the session was retrying: " + e.retry
			}
			return watchdog{e, t.ResumeCount, msg}, true
		}
	}
	return watchdog{}, false
}

// expire aborts a run a watchdog fired for and ends it in error.
func (m *Manager) expire(w watchdog) {
	ctx, cancel := m.requestCtx()
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
	e.aborting = &end
	id := e.task.ID
	m.mu.Unlock()
	if err := m.client.Abort(ctx, id); err != nil {
		m.mu.Lock()
		if e.task.ResumeCount == rc {
			e.aborting = nil
		}
		m.mu.Unlock()
		return err
	}
	m.finish(e, rc, end.status, "", end.msg)
	return nil
}

// requestCtx bounds one request of the Manager's own goroutines by the request timeout, so
// a server that accepts a connection and never answers cannot hold a goroutine.
func (m *Manager) requestCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(m.ctx, m.cfg.requestTimeout)
}

// quickTimeout bounds a request the server answers at once: the status poll, the list of
// permission requests and the opening of the event stream.
func (m *Manager) quickTimeout() time.Duration { return min(m.cfg.requestTimeout, QuickRequestTimeout) }

// quickCtx is requestCtx for a request the server answers at once.
func (m *Manager) quickCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(m.ctx, m.quickTimeout())
}

// busyLocked records that the run's session is busy: the poll rechecks it as soon as it
// is idle again.
func (m *Manager) busyLocked(e *entry) {
	e.seenBusy = true
	e.recheckAt, e.recheckDelay = time.Time{}, 0
}

// minSuspect is how long a run must be seen idle with the same unfinished last step, or
// without its prompt, before it is decided so: OpenCode 1.18.33 writes a run's first
// assistant message some tens of milliseconds before it lists the session as busy, so one
// look at an idle session with an unfinished step proves nothing.
const minSuspect = time.Second

// confirmUnfinished decides a run whose session was seen idle while its last step had not
// finished (or its prompt was not there). If the server still reports the session idle, the
// step will never finish (the server stopped mid-run: a restart or a crash), unless it
// finished meanwhile: the messages are read once more to tell. A verdict that rests on the
// session being idle (interrupted, halted, unsent) stands only when an earlier look, at least
// minSuspect before, saw the same: until then the run stays undecided and the status poll
// looks again.
func (m *Manager) confirmUnfinished(e *entry, run manager.Run) manager.Verdict {
	m.mu.Lock()
	id, dir := e.task.ID, e.task.Directory
	m.mu.Unlock()
	ctx, cancel := m.requestCtx()
	defer cancel()
	st, err := m.client.SessionStatus(ctx, dir)
	if err != nil {
		return manager.Verdict{}
	}
	if _, busy := st[id]; busy {
		m.mu.Lock()
		m.busyLocked(e)
		m.mu.Unlock()
		return manager.Verdict{}
	}
	msgs, err := m.client.Messages(ctx, id, reconcileWindow)
	if err != nil {
		return manager.Verdict{}
	}
	run.Confirmed = true
	v := manager.Decide(msgs, run)
	if v.Outcome != manager.Unsent && (v.Outcome != manager.Failed || v.Error != manager.Interrupted && v.Error != manager.HaltedAfterToolCall) {
		return v
	}
	seen := strconv.Itoa(int(v.Outcome)) + v.Error
	if n := len(msgs); n > 0 {
		last := &msgs[n-1].Info
		seen += "\x00" + last.ID + "\x00" + last.Finish + "\x00" + strconv.FormatInt(last.Time.Completed, 10)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if e.suspect == seen && now.Sub(e.suspectAt) >= minSuspect {
		return v
	}
	if e.suspect != seen {
		e.suspect, e.suspectAt = seen, now
	}
	return manager.Verdict{}
}

// progressLocked counts a tool part the first time it is seen.
func (m *Manager) progressLocked(e *entry, part *opencode.Part) {
	for _, id := range e.recent {
		if id == part.ID {
			return
		}
	}
	e.recent[e.next] = part.ID
	e.next = (e.next + 1) % len(e.recent)
	pr := &e.task.Progress
	pr.ToolCalls++
	if pr.Tools == nil {
		pr.Tools = map[string]int{}
	}
	pr.Tools[part.Tool]++
	pr.LastTools = append(pr.LastTools, part.Tool)
	if n := len(pr.LastTools); n > 3 {
		pr.LastTools = append(pr.LastTools[:0], pr.LastTools[n-3:]...)
	}
	pr.Updated = m.now()
	m.changedLocked(e)
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

// pollLoop reconciles with GET /session/status every poll interval: one request per
// directory; a message read only for a task whose session left the busy map since the last
// poll.
func (m *Manager) pollLoop() {
	for m.wait(m.cfg.poll) {
		m.poll()
	}
}

func (m *Manager) poll() {
	defer m.recoverAndLog("the status poll")
	m.mu.Lock()
	dirs := map[string][]string{}
	var expired []watchdog
	now := m.now()
	for id, e := range m.tasks {
		if !e.task.Status.Active() {
			continue
		}
		if w, ok := m.expiredLocked(e, now); ok {
			expired = append(expired, w)
			continue
		}
		dirs[e.task.Directory] = append(dirs[e.task.Directory], id)
	}
	m.mu.Unlock()
	for _, w := range expired {
		m.expire(w)
	}
	m.catchUpPermissions(true)
	m.checkPosted()
	for dir, ids := range dirs {
		ctx, cancel := m.quickCtx()
		st, err := m.client.SessionStatus(ctx, dir)
		cancel()
		if err != nil {
			if m.ctx.Err() == nil {
				m.cfg.logger.Warn("asyncagents: poll session status", "directory", dir, "err", err)
			}
			continue
		}
		m.mu.Lock()
		for _, id := range ids {
			e := m.tasks[id]
			if e == nil || !e.task.Status.Active() {
				continue
			}
			if s, busy := st[id]; busy {
				if s != e.polled { // a change seen by the poll is activity
					e.polled, e.active = s, m.now()
				}
				if s.Type == "retry" {
					e.retry = s.Message
				}
				m.busyLocked(e)
			} else if now := m.now(); !now.Before(e.recheckAt) {
				// Idle and undecided: read it now and again later, less and less often, so
				// a run that starts late or ends between two polls is never left behind.
				e.recheckDelay = min(max(2*e.recheckDelay, m.cfg.poll), maxRecheck)
				e.recheckAt = now.Add(e.recheckDelay)
				m.enqueueLocked(id, true)
			}
		}
		m.mu.Unlock()
	}
}

// quietPermissions is how long a busy task may go without an event before the poll looks
// for a permission request it may have missed (an event lost while the stream was
// reconnecting).
const quietPermissions = 5 * time.Second

// catchUpPermissions reads the pending permission requests (GET /permission) of the
// directories with active tasks — with quietOnly, only of those with a busy task that has
// been without events for quietPermissions — and applies those of task sessions as their
// permission.asked events would have been.
func (m *Manager) catchUpPermissions(quietOnly bool) {
	m.mu.Lock()
	now := m.now()
	dirs := map[string]bool{}
	for _, e := range m.tasks {
		if !e.task.Status.Active() || e.task.Permission != nil {
			continue
		}
		last := e.task.Started
		if e.active.After(last) {
			last = e.active
		}
		if !quietOnly || e.seenBusy && now.Sub(last) >= quietPermissions {
			dirs[e.task.Directory] = true
		}
	}
	m.mu.Unlock()
	for dir := range dirs {
		ctx, cancel := m.quickCtx()
		reqs, err := m.client.Permissions(ctx, dir)
		cancel()
		if err != nil {
			if m.ctx.Err() == nil {
				m.cfg.logger.Warn("asyncagents: list permission requests", "directory", dir, "err", err)
			}
			continue
		}
		m.mu.Lock()
		for _, r := range reqs {
			if e := m.tasks[r.SessionID]; e != nil && e.task.Status.Active() {
				m.permissionAskedLocked(e, PendingPermission{ID: r.ID, Permission: r.Permission, Patterns: r.Patterns})
			}
		}
		m.mu.Unlock()
	}
}

// enqueueActive queues every active task for a reconcile.
func (m *Manager) enqueueActive() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, e := range m.tasks {
		if e.task.Status.Active() {
			m.enqueueLocked(id, false)
		}
	}
}

// enqueueLocked queues a reconcile of id once; idle records that the session was seen idle.
func (m *Manager) enqueueLocked(id string, idle bool) {
	if was, ok := m.rq[id]; ok {
		m.rq[id] = was || idle
		return
	}
	m.rq[id] = idle
	m.rqOrder = append(m.rqOrder, id)
	m.wakeReconcilerLocked()
}

// reconcilers counts the goroutines that read the messages of sessions that went idle: the
// resident ones (WithReconcilers) and, while sessions wait to be read with every reader busy,
// extra ones, up to limit: reconcileBurst times the resident ones, at most maxReconcilers.
// The extra ones end when the queue is empty. A server answers a burst of reads sooner with
// more of them in flight; when it is idle, the resident ones are enough. Under Manager.mu.
type reconcilers struct {
	alive, busy, limit int
}

// reconcileBurst bounds the extra reconcilers (see reconcilers).
const reconcileBurst = 16

// wakeReconcilerLocked sees that a reconciler takes the next queued read: it wakes one that
// waits or, when all are busy, starts an extra one if the limit allows.
func (m *Manager) wakeReconcilerLocked() {
	rs := &m.recon
	if rs.busy >= rs.alive && rs.alive < rs.limit && !isClosed(m.stop) {
		rs.alive++
		m.goLoop(func() { m.reconcileLoop(false) })
		return
	}
	select {
	case m.rqWake <- struct{}{}:
	default:
	}
}

func (m *Manager) reconcileLoop(resident bool) {
	rs := &m.recon
	working := false
	for {
		m.mu.Lock()
		if working {
			rs.busy--
		}
		r, ok := m.nextReconcileLocked()
		if working = ok; ok {
			rs.busy++
			if len(m.rqOrder) > 0 { // pass the wake-up on
				m.wakeReconcilerLocked()
			}
		} else if !resident {
			rs.alive--
			m.mu.Unlock()
			return
		}
		m.mu.Unlock()
		if ok {
			m.reconcile(r)
			continue
		}
		select {
		case <-m.stop:
			return
		case <-m.rqWake:
		}
	}
}

// reconcileJob is a reconcile of run rc of task e, as the queue hands it out.
type reconcileJob struct {
	e   *entry
	id  string
	rc  int
	run manager.Run
	// streamed holds the frames the run's log recorded when the session went idle, when the
	// stream carried the whole run; nil otherwise.
	streamed []logFrame
}

// nextReconcileLocked takes the next queued reconcile of a task that is still active.
func (m *Manager) nextReconcileLocked() (reconcileJob, bool) {
	for len(m.rqOrder) > 0 {
		id := m.rqOrder[0]
		m.rqOrder[0] = ""
		m.rqOrder = m.rqOrder[1:]
		idle, ok := m.rq[id]
		if !ok {
			continue
		}
		delete(m.rq, id)
		e := m.tasks[id]
		if e == nil || !e.task.Status.Active() {
			continue
		}
		streamed := e.streamed
		e.streamed = nil
		return reconcileJob{e: e, id: id, rc: e.task.ResumeCount, run: runOf(e, idle), streamed: streamed}, true
	}
	m.rqOrder = nil // let a burst's backing array go
	return reconcileJob{}, false
}

// reconcile decides whether the run ended: from the messages its mirror had when the session
// went idle, when they hold a completed reply, else from a read of the task session's latest
// messages. A panic (in the Client or in deciding) ends the task in StatusError with the
// panic's value and stack.
func (m *Manager) reconcile(r reconcileJob) {
	e, rc, run, id := r.e, r.rc, r.run, r.id
	defer func() {
		if r := recover(); r != nil {
			m.cfg.logger.Error("asyncagents: panic while reconciling", "task", id, "panic", r)
			m.finish(e, rc, StatusError, "", fmt.Sprintf("asyncagents: panic while reconciling: %v\n%s", r, debug.Stack()))
		}
	}()

	if r.streamed != nil && m.replays() {
		if msgs := replay(r.streamed, run.Baseline); msgs != nil {
			if v := manager.Decide(msgs, run); v.Outcome == manager.Completed {
				m.streamDecided.Add(1) // before the task shows as completed
				if !m.finish(e, rc, StatusCompleted, v.Result, "") {
					m.streamDecided.Add(-1)
				}
				return
			}
		}
	}
	ctx, cancel := m.requestCtx()
	defer cancel()
	asked := time.Now()
	msgs, err := m.client.Messages(ctx, id, reconcileWindow)
	m.quickest.observe(time.Since(asked))
	if errors.Is(err, opencode.ErrNotFound) {
		m.finish(e, rc, StatusCancelled, "", "session deleted")
		return
	}
	if err != nil {
		if m.ctx.Err() == nil {
			m.cfg.logger.Warn("asyncagents: read task messages", "task", id, "err", err)
		}
		return // the poll reads it again
	}
	v := manager.Decide(msgs, run)
	if v.Outcome == manager.Unfinished {
		v = m.confirmUnfinished(e, run)
	}
	switch v.Outcome {
	case manager.Completed:
		m.finish(e, rc, StatusCompleted, v.Result, "")
	case manager.Failed:
		m.finish(e, rc, StatusError, "", v.Error)
	case manager.Unsent:
		m.unsent(e, rc)
	}
}

// endWaitsLocked serves the Outputs blocked on e's run, which has just ended, so that they
// need not take m.mu again when they wake (with thousands of them, every one would queue for
// it): it marks a completed result retrieved, as each of them would, and leaves them the task
// as it is now.
func (m *Manager) endWaitsLocked(e *entry) {
	if e.waiters == 0 {
		return
	}
	if e.task.Status == StatusCompleted && e.task.Retrieved.IsZero() {
		e.task.Retrieved = m.now()
		m.changedLocked(e)
	}
	v := &endView{done: e.done, task: m.viewLocked(e)}
	v.left.Store(int64(e.waiters))
	e.ended.Store(v)
	e.waiters = 0
}

// finish moves an active task of run rc to a terminal state once, persists it and queues
// the parent notification, and reports whether it did: it does nothing when the run is no
// longer active.
func (m *Manager) finish(e *entry, rc int, st Status, result, errMsg string) bool {
	m.mu.Lock()
	if m.tasks[e.task.ID] != e || e.task.ResumeCount != rc || e.task.Status.Terminal() {
		m.mu.Unlock()
		return false
	}
	if e.aborting != nil {
		st, result, errMsg = e.aborting.status, "", e.aborting.msg
		e.aborting = nil
	}
	e.task.Status, e.task.Completed = st, m.now()
	e.task.Result, e.task.Error = result, errMsg
	m.dropMirrorLocked(e)
	e.task.Permission = nil
	if st == StatusCancelled {
		e.task.FollowUps = nil // a cancel stops what was queued too
	}
	followUp := len(e.task.FollowUps) > 0
	m.changedLocked(e)
	if b := m.batches[e.task.BatchID]; b != nil {
		b.active--
		m.closeBatchLocked(e.task.ParentSessionID, e.task.BatchID, b)
	}
	m.unreserveLocked(e.task.ParentSessionID)
	if m.cfg.notify {
		m.notifyLocked(e)
	}
	m.endWaitsLocked(e)
	close(e.done)
	start := m.releaseLocked(e)
	m.mu.Unlock()
	m.persist(e)
	m.startQueued(start)
	if followUp {
		m.sendFollowUp(e)
	}
	return true
}
