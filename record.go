package asyncagents

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asyncagents/asyncagents/opencode"
)

// entry is the Manager's record of a task plus the run state that is not stored.
type entry struct {
	task Task
	done chan struct{} // closed when the current run ends or the task is removed

	// Blocked Outputs do not need Manager.mu when the run they wait for ends: waiters counts
	// them (under Manager.mu), and finish, when there are any, marks a completed result
	// retrieved on their behalf and leaves them the task as the run ended in ended, before it
	// closes done.
	waiters int
	ended   atomic.Pointer[endView]

	// Saves of one task are serialized by saveMu and carry the newest version: version
	// counts changes (under Manager.mu), saved is the version the store has.
	saveMu  sync.Mutex
	version uint64
	saved   uint64
	removed bool // cleared or taken away with its parent: never saved again
	lost    bool // its lease is another host's now, or is being handed over (lease.go)
	// A handover whose save failed is tried again from handoverAt on; handoverWait, the time
	// before that, doubles with each failure (lease.go).
	handoverAt   time.Time
	handoverWait time.Duration
	// resuming: sendFollowUp is starting the run of a queued follow-up (resume.go)
	resuming bool
	acting   int // requests in flight that act on it under its lease (leaseCtx), and posts until their outcome is set (postCtx)

	slot string // the concurrency limit whose slot the run holds ("" for none)
	// aborting, set while the Manager aborts the run (Cancel, a watchdog), is how the run ends,
	// whatever a reconcile reads first (the abort's own MessageAbortedError).
	aborting *runEnd
	active   time.Time              // the last activity seen: an event, or a change seen by a poll
	polled   opencode.SessionStatus // what the last poll saw of a busy session
	retry    string                 // the message of the last retry status
	baseline string                 // id of the last message before the run's prompt ("" for a new session)
	seenBusy bool                   // the session went busy during this run
	// The run's prompt (Task.PromptID) is being sent, was last sent at sentAt, and has been
	// sent sends times (see sendPrompt).
	sending bool
	sentAt  time.Time
	sends   int
	// suspect is what a confirmed-idle look last found against the run (see
	// confirmUnfinished), first at suspectAt.
	suspect   string
	suspectAt time.Time
	sessErr   string // the last session.error of this run

	// While the status poll finds the session idle and the run undecided, its messages are
	// read again at recheckAt, with a delay that doubles up to maxRecheck.
	recheckAt    time.Time
	recheckDelay time.Duration

	recent [16]string
	next   int // ids of tool parts already counted, a ring

	steps      map[string]bool // the run's steps counted in its running usage (usage.go)
	lastFinish string          // the finish of the newest of them

	mirror   *runLog    // what the event stream carried of the run (nil for a run started before New)
	streamed []logFrame // the log's frames at the run's last idle event, when it carried the whole run
}

// endView is the task as a run ended, for the Outputs that waited for it (entry.ended). It
// is never changed: each waiter returns a clone.
type endView struct {
	done chan struct{} // the run's done channel
	task Task
	left atomic.Int64 // waiters yet to take it; the last one clears entry.ended
}

// maxRecheck bounds the delay between two reads of an idle, undecided task's messages.
const maxRecheck = 30 * time.Second

// batch counts the tasks of one batch: launched by one parent while another of its tasks
// was active. Notifications report done/total.
type batch struct {
	total  int
	active int
}

func (m *Manager) batchLocked(id string) *batch {
	b := m.batches[id]
	if b == nil {
		b = &batch{}
		m.batches[id] = b
	}
	return b
}

func (m *Manager) snapshot(e *entry) Task {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.viewLocked(e)
}

// viewLocked copies a task and sets its display id.
func (m *Manager) viewLocked(e *entry) Task {
	t := e.task.clone()
	t.DisplayID = m.reg.DisplayID(t.ID)
	if t.Status == StatusQueued {
		t.QueuePosition = m.queuePositionLocked(e)
	}
	return t
}

// persist saves the newest version of e unless the store has it already or e was removed.
// Saves of one task never overlap, so an older snapshot never overwrites a newer one. A
// save that finds the task's lease lost drops the task (see lease.go). It returns the
// store's error, which is also logged.
func (m *Manager) persist(e *entry) error {
	e.saveMu.Lock()
	defer e.saveMu.Unlock()
	m.mu.Lock()
	if e.removed && e.lost && e.saved != e.version { // handed over: its new holder decides
		m.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrLeaseLost, e.task.ID)
	}
	if e.removed || e.saved == e.version {
		m.mu.Unlock()
		return nil
	}
	snap, v := e.task.clone(), e.version
	m.mu.Unlock()
	if err := m.cfg.store.Save(m.ctx, snap); err != nil {
		if lostLease(err) {
			m.dropLost(snap.ID)
			return err
		}
		m.cfg.logger.Warn("asyncagents: save task", "task", snap.ID, "err", err)
		return err
	}
	e.saved = v
	return nil
}

// closeBatchLocked ends the parent's open batch when it has no active task left, and
// forgets an empty batch.
func (m *Manager) closeBatchLocked(parent, id string, b *batch) {
	if b.active == 0 && m.open[parent] == id {
		delete(m.open, parent)
	}
	if b.total == 0 {
		delete(m.batches, id)
	}
}
