package asyncagents

import (
	"strconv"

	"github.com/asyncagents/asyncagents/hints"
)

// finish moves an active task of run rc to a terminal state once, persists it and queues
// the parent notification, and reports whether it did: it does nothing when the run is no
// longer active. An isolated task's changes are committed on its branch first, so that the
// notification says what changed.
func (m *Manager) finish(e *entry, rc int, st Status, result, errMsg string) bool {
	if e.isolated {
		m.settleWorktree(e, rc) // its changes, in the notification
	}
	f, ok := func() (finished, bool) {
		m.mu.Lock()
		defer m.mu.Unlock() // a panic in it must not leave the Manager locked
		return m.finishLocked(e, rc, st, result, errMsg)
	}()
	if ok {
		m.afterFinish(f)
	}
	return ok
}

// finished is what is left to do, without the lock, for a task finishLocked ended.
type finished struct {
	e        *entry
	start    []*entry // queued tasks that got its slot
	followUp bool     // it has a queued follow-up to send
}

// finishLocked moves e to its terminal state as finish does, without the lock's release and
// what comes after it (afterFinish).
func (m *Manager) finishLocked(e *entry, rc int, st Status, result, errMsg string) (finished, bool) {
	if m.tasks.byID[e.task.ID] != e || e.task.ResumeCount != rc || e.task.Status.Terminal() {
		return finished{}, false
	}
	if a := e.run.aborting; a != nil {
		st, result, errMsg = a.status, a.result, a.msg
		e.task.Paused = a.paused
		e.run.aborting = nil
	}
	e.task.Status, e.task.Completed, e.task.Starting = st, m.bg.now(), false
	if end := e.run.ended; end.After(e.task.Started) && end.Before(e.task.Completed) {
		e.task.Completed = end // read later than it ended: the run's own duration
	}
	e.task.Result, e.task.Error = boundResult(result), boundError(errMsg)
	m.mirrors.drop(e)
	e.task.Permission = nil
	if st == StatusCancelled {
		e.task.FollowUps = nil // a cancel stops what was queued too
	}
	followUp := len(e.task.FollowUps) > 0
	m.changedLocked(e)
	if b := m.tasks.batches[e.task.BatchID]; b != nil {
		b.active--
		m.tasks.closeBatch(e.task.ParentSessionID, e.task.BatchID, b)
	}
	m.slots.unreserve(e.task.ParentSessionID, e.task.AnchorSessionID)
	if m.cfg.notify {
		m.notifyLocked(e)
	}
	m.notes.waveOver(e.task.ParentSessionID)
	m.endWaitsLocked(e)
	close(e.done)
	return finished{e: e, start: m.startedLocked(m.slots.free(e)), followUp: followUp}, true
}

// afterFinish persists a task finishLocked ended, starts the queued tasks that got its slot
// and sends its next follow-up.
func (m *Manager) afterFinish(f finished) {
	defer m.bg.recoverAndLog("recording the end of a run") // the task has ended whatever comes next
	m.persist(f.e)
	m.startQueued(f.start)
	if f.followUp {
		m.sendFollowUp(f.e)
	}
}

// notifyLocked records the notification of e's run end and queues it. m.mu is held.
func (m *Manager) notifyLocked(e *entry) {
	t := &e.task
	n := hints.Notice{Description: t.Description, Duration: t.Duration(m.bg.now()), DisplayID: m.tasks.reg.DisplayID(t.ID),
		Resume: t.ResumeCount, Usage: t.usageText(), Changes: t.Worktree.changes(), Paused: t.Paused}
	switch t.Status {
	case StatusCompleted:
		n.Outcome = hints.Completed
	case StatusError:
		n.Outcome, n.Error = hints.Failed, t.Error
	default:
		n.Outcome = hints.Cancelled
	}
	if b := m.tasks.batches[t.BatchID]; b != nil {
		n.Total, n.Running, n.Completed = b.total, b.active, b.total-b.active
	}
	m.queueNoteLocked(e, Notification{
		Key:     t.ID + "/" + strconv.Itoa(t.ResumeCount) + "/" + string(t.Status),
		Visible: hints.Visible(n, m.cfg.debugHints), Hidden: hints.Hidden(n, m.notes.prefix()),
	})
}

// queueNoteLocked adds a pending notification to e's record and queues it for e's parent.
func (m *Manager) queueNoteLocked(e *entry, note Notification) {
	t := &e.task
	note.State, note.Created = NotificationPending, m.bg.now()
	// Keep the undelivered ones, those whose turn is owed, and the last delivered one.
	kept := t.Notifications[:0]
	for i, o := range t.Notifications {
		if o.State != NotificationDelivered || o.Turn == TurnOwed || i == len(t.Notifications)-1 {
			kept = append(kept, o)
		}
	}
	t.Notifications = append(kept, note)
	m.changedLocked(e)
	ob := m.notes.queue(t.ParentSessionID, noteRef{e: e, key: note.Key})
	ob.lastEnd = note.Created
}

// endWaitsLocked serves the Outputs blocked on e's run, which has just ended, so that they
// need not take m.mu again when they wake (with thousands of them, every one would queue for
// it): it marks a completed result retrieved, as each of them would, and leaves them the task
// as it is now.
func (m *Manager) endWaitsLocked(e *entry) {
	if e.waits.n == 0 {
		return
	}
	if e.task.Status == StatusCompleted && e.task.Retrieved.IsZero() {
		e.task.Retrieved = m.bg.now()
		m.changedLocked(e)
	}
	v := &endView{done: e.done, task: m.viewLocked(e)}
	v.left.Store(int64(e.waits.n))
	e.waits.ended.Store(v)
	e.waits.n = 0
}
