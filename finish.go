package asyncagents

import (
	"time"

	"github.com/asyncagents/asyncagents/opencode"
)

// busyLocked records that the run's session is busy: the poll rechecks it as soon as it
// is idle again.
func (m *Manager) busyLocked(e *entry) {
	e.seenBusy = true
	e.recheckAt, e.recheckDelay = time.Time{}, 0
}

// progressLocked counts a tool part the first time it is seen.
func (m *Manager) progressLocked(e *entry, part *opencode.Part) {
	if part.MessageID != "" && part.MessageID <= e.baseline {
		return // a message from before the run: a native fork's copies, say
	}
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

// finish moves an active task of run rc to a terminal state once, persists it and queues
// the parent notification, and reports whether it did: it does nothing when the run is no
// longer active.
func (m *Manager) finish(e *entry, rc int, st Status, result, errMsg string) bool {
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
	if m.tasks[e.task.ID] != e || e.task.ResumeCount != rc || e.task.Status.Terminal() {
		return finished{}, false
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
	m.waveOverLocked(e.task.ParentSessionID)
	m.endWaitsLocked(e)
	close(e.done)
	return finished{e: e, start: m.releaseLocked(e), followUp: followUp}, true
}

// afterFinish persists a task finishLocked ended, starts the queued tasks that got its slot
// and sends its next follow-up.
func (m *Manager) afterFinish(f finished) {
	m.persist(f.e)
	m.startQueued(f.start)
	if f.followUp {
		m.sendFollowUp(f.e)
	}
}
