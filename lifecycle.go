package asyncagents

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/asyncagents/asyncagents/manager"
	"github.com/asyncagents/asyncagents/opencode"
)

// reconcileWindow is how many of the latest messages a reconcile reads: enough to find
// the run's final assistant message and the prompt it answers.
const reconcileWindow = 8

func (m *Manager) start() {
	m.goLoop(m.eventLoop)
	m.goLoop(m.pollLoop)
	for range m.cfg.reconcilers {
		m.goLoop(m.reconcileLoop)
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
func (m *Manager) eventLoop() {
	b := newBackoff(200*time.Millisecond, 10*time.Second)
	for {
		m.subscribe(b)
		if !m.wait(b.NextBackOff()) {
			return
		}
	}
}

// subscribe reads one connection of the event stream until it ends.
func (m *Manager) subscribe(b *backoff.ExponentialBackOff) {
	defer m.recoverAndLog("the event stream")
	// The handshake gets the request timeout; the stream, once open, lives until it ends.
	ctx, cancel := context.WithCancel(m.ctx)
	defer cancel()
	handshake := time.AfterFunc(m.cfg.requestTimeout, cancel)
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
	m.enqueueActive()
	m.catchUpPermissions(false) // requests asked while no stream was open
	for ev, err := range stream.All() {
		if err != nil {
			m.cfg.logger.Debug("asyncagents: event stream ended", "err", err)
			return
		}
		b.Reset()
		m.handle(ev)
	}
}

// handle applies one event.
func (m *Manager) handle(ev opencode.Event) {
	defer m.recoverAndLog("handling an event")
	switch ev.Type {
	case opencode.EventSessionIdle, opencode.EventSessionStatus, opencode.EventSessionError,
		opencode.EventMessagePartUpdate, opencode.EventSessionDeleted,
		opencode.EventPermissionAsked, opencode.EventPermissionReplied:
	case opencode.EventMessagePartDelta:
		if m.cfg.stale > 0 { // streaming text is activity, nothing else
			m.touch(ev.SessionID())
		}
		return
	default:
		return
	}
	// Only tool parts count for progress; the other part updates are activity at most.
	if ev.Type == opencode.EventMessagePartUpdate && !bytes.Contains(ev.Properties, []byte(`"type":"tool"`)) {
		if m.cfg.stale > 0 {
			m.touch(ev.SessionID())
		}
		return
	}
	// The session id first: events of other sessions cost no more.
	sid := ev.SessionID()
	if sid == "" {
		return
	}
	if ev.Type == opencode.EventSessionDeleted {
		m.sessionDeleted(sid)
		return
	}
	m.mu.Lock()
	e := m.tasks[sid]
	ok := e != nil && e.task.Status.Active()
	m.mu.Unlock()
	if !ok {
		return
	}
	var (
		p   opencode.EventProperties
		err error
	)
	if ev.Type == opencode.EventMessagePartUpdate {
		part, err := toolPart(ev)
		if err != nil || part == nil {
			return
		}
		p.Part = part
	} else if p, err = ev.Decode(); err != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.tasks[sid] != e || !e.task.Status.Active() {
		return
	}
	e.active = m.now()
	switch ev.Type {
	case opencode.EventSessionIdle:
		m.enqueueLocked(e.task.ID, true)
	case opencode.EventSessionStatus:
		if p.Status == nil {
			return
		}
		switch p.Status.Type {
		case "idle":
			m.enqueueLocked(e.task.ID, true)
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

// toolPart decodes the id and tool name of a message.part.updated event's part, and
// returns nil for parts that are not tool parts.
func toolPart(ev opencode.Event) (*opencode.Part, error) {
	var p struct {
		Part struct {
			ID   string `json:"id"`
			Type string `json:"type"`
			Tool string `json:"tool"`
		} `json:"part"`
	}
	if err := json.Unmarshal(ev.Properties, &p); err != nil || p.Part.Type != opencode.PartTool {
		return nil, err
	}
	return &opencode.Part{ID: p.Part.ID, Type: p.Part.Type, Tool: p.Part.Tool}, nil
}

// touch records activity of a task session.
func (m *Manager) touch(sid string) {
	if sid == "" {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.tasks[sid]; e != nil {
		e.active = m.now()
	}
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

// busyLocked records that the run's session is busy: the poll rechecks it as soon as it
// is idle again.
func (m *Manager) busyLocked(e *entry) {
	e.seenBusy = true
	e.recheckAt, e.recheckDelay = time.Time{}, 0
}

// confirmUnfinished decides a run whose session was seen idle while its last step had not
// finished. If the server still reports the session idle, the step will never finish (the
// server stopped mid-run: a restart or a crash), unless it finished meanwhile: the messages
// are read once more to tell.
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
	return manager.Decide(msgs, run)
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
	for dir, ids := range dirs {
		ctx, cancel := m.requestCtx()
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
		ctx, cancel := m.requestCtx()
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
	select {
	case m.rqWake <- struct{}{}:
	default:
	}
}

func (m *Manager) reconcileLoop() {
	for {
		m.mu.Lock()
		var (
			id   string
			idle bool
			ok   bool
		)
		for len(m.rqOrder) > 0 && !ok {
			id, m.rqOrder = m.rqOrder[0], m.rqOrder[1:]
			idle, ok = m.rq[id]
			delete(m.rq, id)
		}
		more := len(m.rqOrder) > 0
		m.mu.Unlock()
		if more { // pass the wake-up on to another reconciler
			select {
			case m.rqWake <- struct{}{}:
			default:
			}
		}
		if ok {
			m.reconcile(id, idle)
			continue
		}
		select {
		case <-m.stop:
			return
		case <-m.rqWake:
		}
	}
}

// reconcile reads the task session's latest messages and decides whether the run ended.
// A panic (in the Client or in deciding) ends the task in StatusError with the panic's value
// and stack.
func (m *Manager) reconcile(id string, idle bool) {
	m.mu.Lock()
	e := m.tasks[id]
	if e == nil || !e.task.Status.Active() {
		m.mu.Unlock()
		return
	}
	rc := e.task.ResumeCount
	run := manager.Run{Baseline: e.baseline, SessionError: e.sessErr, Idle: idle}
	m.mu.Unlock()
	defer func() {
		if r := recover(); r != nil {
			m.cfg.logger.Error("asyncagents: panic while reconciling", "task", id, "panic", r)
			m.finish(e, rc, StatusError, "", fmt.Sprintf("asyncagents: panic while reconciling: %v\n%s", r, debug.Stack()))
		}
	}()

	ctx, cancel := m.requestCtx()
	defer cancel()
	msgs, err := m.client.Messages(ctx, id, reconcileWindow)
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
	}
}

// finish moves an active task of run rc to a terminal state once, persists it and queues
// the parent notification. It does nothing when the run is no longer active.
func (m *Manager) finish(e *entry, rc int, st Status, result, errMsg string) {
	m.mu.Lock()
	if m.tasks[e.task.ID] != e || e.task.ResumeCount != rc || e.task.Status.Terminal() {
		m.mu.Unlock()
		return
	}
	if e.aborting != nil {
		st, result, errMsg = e.aborting.status, "", e.aborting.msg
		e.aborting = nil
	}
	e.task.Status, e.task.Completed = st, m.now()
	e.task.Result, e.task.Error = result, errMsg
	e.task.Permission = nil
	if st == StatusCancelled {
		e.task.FollowUps = nil // a cancel stops what was queued too
	}
	followUp := len(e.task.FollowUps) > 0
	m.changedLocked(e)
	close(e.done)
	if b := m.batches[e.task.BatchID]; b != nil {
		b.active--
		m.closeBatchLocked(e.task.ParentSessionID, e.task.BatchID, b)
	}
	if m.cfg.notify {
		m.notifyLocked(e)
	}
	start := m.releaseLocked(e)
	m.mu.Unlock()
	m.persist(e)
	m.startQueued(start)
	if followUp {
		m.sendFollowUp(e)
	}
}
