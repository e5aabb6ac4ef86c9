package asyncagents

import (
	"fmt"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/asyncagents/asyncagents/hints"
	"github.com/asyncagents/asyncagents/opencode"
)

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
	now := m.bg.now()
	dirs := map[string]bool{}
	for _, e := range m.tasks.byID {
		if !e.task.Status.Active() || e.task.Permission != nil {
			continue
		}
		last := e.task.Started
		if e.run.active.After(last) {
			last = e.run.active
		}
		if !quietOnly || e.run.seenBusy && now.Sub(last) >= quietPermissions {
			dirs[e.task.Directory] = true
		}
	}
	m.mu.Unlock()
	for dir := range dirs {
		ctx, cancel := m.bg.quickCtx()
		reqs, err := m.client.Permissions(ctx, dir)
		cancel()
		if err != nil {
			if m.bg.ctx.Err() == nil {
				m.cfg.logger.Warn("asyncagents: list permission requests", "directory", dir, "err", err)
			}
			continue
		}
		m.mu.Lock()
		for _, r := range reqs {
			if e := m.tasks.inSession(r.SessionID); e != nil && e.task.Status.Active() {
				m.permissionAskedLocked(e, boundPermission(PendingPermission{ID: r.ID, Permission: r.Permission, Patterns: r.Patterns}))
			}
		}
		m.mu.Unlock()
	}
}

// PermissionReply is how a task session's permission request is answered.
type PermissionReply string

// Permission replies. PermissionAsk leaves the request waiting: the task shows it
// (Task.Permission) and its parent is told once.
const (
	PermissionAsk  PermissionReply = ""     // do not answer
	PermissionOnce PermissionReply = "once" // allow this call
	// PermissionAlways allows this call and the like. It is sent to OpenCode as "once":
	// OpenCode 1.18.33 keeps an "always" answer for every session of the project, the
	// caller's and other tasks' included, which would give them rights they did not have.
	PermissionAlways PermissionReply = "always"
	PermissionReject PermissionReply = "reject" // refuse it; the agent loop stops
)

// PermissionPolicy decides a permission request of a task's session (the permission.asked
// event): the task as it is, and the request (the permission or tool, and the patterns it
// asks for). It runs on a goroutine of the Manager, must not block for long, and may be
// called concurrently. A panic in it is recovered and logged, and leaves the request waiting.
type PermissionPolicy func(t Task, req PendingPermission) PermissionReply

// ReplyAll returns a policy that answers every request with r.
func ReplyAll(r PermissionReply) PermissionPolicy {
	return func(Task, PendingPermission) PermissionReply { return r }
}

func (r PermissionReply) valid() bool {
	return r == PermissionAsk || r == PermissionOnce || r == PermissionAlways || r == PermissionReject
}

// permissionAskedLocked records a permission request of e's session and, with a policy,
// answers it; without one (or when the policy asks), tells the parent once per request.
func (m *Manager) permissionAskedLocked(e *entry, req PendingPermission) {
	if e.task.Permission != nil && e.task.Permission.ID == req.ID {
		return // the same request again
	}
	e.task.Permission = &req
	m.changedLocked(e)
	if m.cfg.permissions != nil {
		snap, rc := e.task.clone(), e.task.ResumeCount
		// m.bg.wg is above zero here: the event loop that calls this is counted in it.
		m.bg.spawn("answering a permission request", func() { m.answerPermission(e, rc, snap, req) })
		return
	}
	m.waitingLocked(e, req)
}

// waitingLocked queues a notification that e waits for a permission answer.
func (m *Manager) waitingLocked(e *entry, req PendingPermission) {
	if !m.cfg.notify {
		return
	}
	t := &e.task
	n := hints.Notice{Outcome: hints.Waiting, Description: t.Description, Duration: t.Duration(m.bg.now()),
		DisplayID: m.tasks.reg.DisplayID(t.ID), Permission: req.Permission, Patterns: req.Patterns}
	if b := m.tasks.batches[t.BatchID]; b != nil {
		n.Total, n.Running, n.Completed = b.total, b.active, b.total-b.active
	}
	m.queueNoteLocked(e, Notification{
		Key:     t.ID + "/" + strconv.Itoa(t.ResumeCount) + "/permission/" + req.ID,
		Visible: hints.Visible(n, m.cfg.debugHints), Hidden: hints.Hidden(n, m.cfg.toolPrefix),
	})
}

// answerPermission asks the policy and replies (POST /permission/{id}/reply on the task's
// directory). A policy that asks, panics or gives an unknown reply leaves the request
// waiting, and the parent is told.
func (m *Manager) answerPermission(e *entry, rc int, t Task, req PendingPermission) {
	reply := func() (r PermissionReply) {
		defer func() {
			if p := recover(); p != nil {
				m.cfg.logger.Error("asyncagents: panic in the permission policy", "task", t.ID, "panic", p, "stack", string(debug.Stack()))
				r = PermissionAsk
			}
		}()
		return m.cfg.permissions(t, req)
	}()
	if !reply.valid() {
		m.cfg.logger.Warn("asyncagents: permission policy gave an unknown reply", "task", t.ID, "reply", string(reply))
		reply = PermissionAsk
	}
	if reply == PermissionAsk {
		m.mu.Lock()
		if e.task.ResumeCount == rc && e.task.Permission != nil && e.task.Permission.ID == req.ID {
			m.waitingLocked(e, req)
		}
		m.mu.Unlock()
		m.persist(e)
		return
	}
	ctx, cancel := m.bg.requestCtx()
	defer cancel()
	if reply == PermissionAlways { // see PermissionAlways: never a right for other sessions
		reply = PermissionOnce
	}
	err := m.client.ReplyPermission(ctx, t.Directory, req.ID, opencode.PermissionReply{Reply: string(reply)})
	if err != nil {
		m.cfg.logger.Warn("asyncagents: reply to a permission request", "task", t.ID, "request", req.ID, "err", err)
	}
}

// String returns the permission and its patterns, e.g. "bash /etc/*".
func (p PendingPermission) String() string {
	return strings.TrimSpace(fmt.Sprintf("%s %s", p.Permission, strings.Join(p.Patterns, ", ")))
}
