package asyncagents

import (
	"slices"

	"github.com/asyncagents/asyncagents/opencode"
)

// applyLocked applies an event of a task's run.
func (m *Manager) applyLocked(ev runEvent) {
	e := m.tasks.inSession(ev.sid)
	if e == nil {
		return
	}
	if ev.typ == "" { // activity alone
		e.run.active = m.bg.now()
		return
	}
	if !e.task.Status.Active() {
		return
	}
	var p opencode.EventProperties // decoded: for the events that are not queued
	if ev.p != nil {
		p = *ev.p
	}
	e.run.active = m.bg.now()
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
			e.run.retry = p.Status.Message
			e.run.busy()
		default: // busy: the next poll that finds it absent reads it again
			e.run.retry = ""
			e.run.busy()
		}
	case opencode.EventSessionError:
		e.run.sessErr = p.Error.Message()
		if !e.run.seenBusy { // unknown agent: no busy, no idle will come
			m.recon.enqueue(e, true)
		}
	case opencode.EventMessagePartUpdate:
		if e.countTool(p.Part, m.bg.now()) {
			m.changedLocked(e)
		}
	case opencode.EventMessageUpdated:
		if e.countStep(ev.step) {
			m.changedLocked(e)
		}
	case opencode.EventPermissionAsked:
		m.permissionAskedLocked(e, boundPermission(PendingPermission{ID: p.ID, Permission: p.Permission, Patterns: p.Patterns}))
	case opencode.EventPermissionReplied:
		e.task.Permission = nil
		m.changedLocked(e)
	}
}

// idleLocked queues a reconcile of e's run, whose session was seen idle: from the messages
// of the run's mirror when the idle event carries them, else from a read.
func (m *Manager) idleLocked(e *entry, ev runEvent) {
	e.run.streamed = nil
	if ev.mirror != nil && ev.mirror == e.run.mirror {
		e.run.streamed = ev.reply
	}
	m.recon.enqueue(e, true)
}

// sessionDeleted handles session.deleted: a deleted parent takes its tasks with it (active
// ones are aborted); a deleted task session cancels its task (and is aborted, since OpenCode
// lets a deleted busy session run on).
func (m *Manager) sessionDeleted(id string) {
	m.mu.Lock()
	var abort, remove []string
	var removed []*entry
	var start []*entry
	for _, tid := range slices.Clone(m.tasks.reg.Tasks(id)) {
		e := m.tasks.byID[tid]
		if e.task.Status.Active() && e.task.SessionID != "" {
			abort = append(abort, e.task.SessionID)
		}
		remove = append(remove, tid)
		removed = append(removed, e)
		start = append(start, m.removeLocked(e)...)
	}
	isolated := isolatedOf(removed)
	own := m.tasks.inSession(id)
	if own != nil && own.task.Status.Active() {
		abort = append(abort, id) // OpenCode does not stop a deleted busy session
	}
	m.mu.Unlock()
	m.startQueued(start)
	for _, e := range removed { // saves in flight land before the delete
		e.save.mu.Lock()
		e.save.mu.Unlock() //nolint:staticcheck // empty critical section on purpose
	}
	for _, t := range abort {
		ctx, cancel := m.bg.requestCtx()
		err := m.client.Abort(ctx, t)
		cancel()
		if err != nil {
			m.cfg.logger.Warn("asyncagents: abort task of deleted session", "session", t, "err", err)
		}
	}
	if len(remove) > 0 {
		if err := m.cfg.store.Delete(m.bg.ctx, remove...); err != nil {
			m.cfg.logger.Warn("asyncagents: delete tasks of deleted parent", "err", err)
		}
	}
	m.isolation.removeWorktrees(m.bg.ctx, isolated, m.cfg.logger)
	if own != nil {
		m.finish(own, own.task.ResumeCount, StatusCancelled, "", "session deleted")
	}
}
