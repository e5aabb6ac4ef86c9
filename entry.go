package asyncagents

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asyncagents/asyncagents/opencode"
)

// entry is the Manager's record of a task: the task as it is stored, and what each part of
// the Manager keeps about it that is not stored, grouped by part. The parts' fields are
// guarded by Manager.mu unless they say otherwise.
type entry struct {
	task Task
	done chan struct{} // closed when the current run ends or the task is removed

	isolated bool   // it has a worktree (Task.Worktree); set before the entry is shared, never changed
	removed  bool   // cleared or taken away with its parent: never saved again
	resuming bool   // sendFollowUp is starting the run of a queued follow-up (resume.go)
	slot     string // the concurrency limit whose slot the run holds ("" for none; slots.go)

	waits waits     // the Outputs blocked on the run (output.go)
	save  saveState // its saves (persist)
	hold  hold      // its lease, with several hosts (hosts.go)
	run   runState  // the current run, as the Manager follows it; new for each run
}

// waits are the Outputs blocked on a task's run. They do not need Manager.mu when the run
// ends: n counts them (under Manager.mu), and finish, when there are any, marks a completed
// result retrieved on their behalf and leaves them the task as the run ended in ended,
// before it closes done.
type waits struct {
	n     int
	ended atomic.Pointer[endView]
}

// saveState serializes the saves of one task and makes each carry the newest version:
// version counts changes (under Manager.mu), saved is the version the store has (under mu).
type saveState struct {
	mu      sync.Mutex
	version uint64
	saved   uint64
	stored  bool // the store has a record of it (under mu)
	admit   bool // its next save admits a resumed run under every host's limits (under Manager.mu)
}

// hold is what a Manager on a LeaseStore keeps of its lease on a task.
type hold struct {
	lost bool // its lease is another host's now, or is being handed over
	// A handover whose save failed is tried again from retryAt on; retryWait, the time before
	// that, doubles with each failure.
	retryAt   time.Time
	retryWait time.Duration
	acting    int // requests in flight that act on it under its lease (leaseCtx), and posts until their outcome is set (postCtx)
}

// runState is what the Manager follows of a task's current run; a new run starts from
// runState{baseline: …}.
type runState struct {
	baseline string // id of the last message before the run's prompt ("" for a new session)
	// aborting, set while the Manager aborts the run (Cancel, a watchdog), is how the run ends,
	// whatever a reconcile reads first (the abort's own MessageAbortedError).
	aborting *runEnd
	active   time.Time              // the last activity seen: an event, or a change seen by a poll
	polled   opencode.SessionStatus // what the last poll saw of a busy session
	retry    string                 // the message of the last retry status
	seenBusy bool                   // the session went busy during this run
	sessErr  string                 // the last session.error of this run
	// ended is when the server says the run's last reply was completed, read after the
	// fact (a restart, a stream that missed the end): its end, not when the Manager learned it.
	ended time.Time

	// The run's prompt (Task.PromptID) is being sent, was last sent at sentAt, and has been
	// sent sends times (see sendPrompt).
	sending bool
	sentAt  time.Time
	sends   int
	claimed bool // the first send of a new task's prompt was claimed, by its start or a grant

	// suspect is what a confirmed-idle look last found against the run (see
	// confirmUnfinished), first at suspectAt.
	suspect   string
	suspectAt time.Time

	// While the status poll finds the session idle and the run undecided, its messages are
	// read again at recheckAt, with a delay that doubles up to maxRecheck.
	recheckAt    time.Time
	recheckDelay time.Duration

	tools toolRing // the tool parts already counted for progress

	steps      map[string]bool // the run's steps counted in its running usage (usage.go)
	lastFinish string          // the finish of the newest of them

	mirror   *runLog    // what the event stream carried of the run (nil for a run started before New)
	streamed []logFrame // the log's frames at the run's last idle event, when it carried the whole run
}

// toolRing holds the ids of the last tool parts counted, so that a part's updates count once.
type toolRing struct {
	recent [16]string
	next   int
}

// busy records that the run's session is busy: the poll rechecks it as soon as it is idle
// again.
func (r *runState) busy() {
	r.seenBusy = true
	r.recheckAt, r.recheckDelay = time.Time{}, 0
}

// countTool counts a tool part of the run in the task's progress the first time it is seen,
// at now, and reports whether it did.
func (e *entry) countTool(part *opencode.Part, now time.Time) bool {
	if part.MessageID != "" && part.MessageID <= e.run.baseline {
		return false // a message from before the run: a native fork's copies, say
	}
	for _, id := range e.run.tools.recent {
		if id == part.ID {
			return false
		}
	}
	e.run.tools.recent[e.run.tools.next] = part.ID
	e.run.tools.next = (e.run.tools.next + 1) % len(e.run.tools.recent)
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
	pr.Updated = now
	return true
}

// startRun starts e's next run after message baseline (the newest message of its session
// before the run's prompt, "" for none): the run's state starts afresh, and its prompt gets a
// message id newer than baseline, chosen at now, so that OpenCode answers it.
func (e *entry) startRun(now time.Time, baseline string) {
	e.run = runState{baseline: baseline}
	e.task.Paused = false
	e.task.PromptID = opencode.NewMessageID(now, baseline)
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

func (m *Manager) snapshot(e *entry) Task {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.viewLocked(e)
}

// viewLocked copies a task and sets its display id.
func (m *Manager) viewLocked(e *entry) Task {
	t := e.task.clone()
	t.DisplayID = m.tasks.reg.DisplayID(t.ID)
	if t.Status == StatusQueued {
		t.QueuePosition = m.slots.position(e)
	}
	return t
}

// persist saves the newest version of e unless the store has it already or e was removed; a
// LimitStore admits a new task (its first save), and a resumed one (save.admit), under the
// limits of every host.
// Saves of one task never overlap, so an older snapshot never overwrites a newer one. A
// save that finds the task's lease lost drops the task (see lease.go). It returns the
// store's error, which is also logged.
func (m *Manager) persist(e *entry) error {
	e.save.mu.Lock()
	defer e.save.mu.Unlock()
	m.mu.Lock()
	if e.removed && e.hold.lost && e.save.saved != e.save.version { // handed over: its new holder decides
		m.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrLeaseLost, e.task.ID)
	}
	if e.removed || e.save.saved == e.save.version {
		m.mu.Unlock()
		return nil
	}
	snap, v, admit := e.task.clone(), e.save.version, !e.save.stored || e.save.admit
	m.mu.Unlock()
	if m.cfg.recordKey != nil {
		snap.Seal = seal(snap, m.cfg.recordKey)
	}
	save := m.cfg.store.Save
	if ls, ok := m.cfg.store.(LimitStore); ok && admit { // a new task or run: admitted under every host's limits
		save = func(ctx context.Context, t Task) error { return ls.Admit(ctx, t, m.cfg.perParent, m.cfg.treeBudget) }
	}
	if err := save(m.bg.ctx, snap); err != nil {
		if lostLease(err) {
			m.dropLost(snap.ID)
			return err
		}
		m.cfg.logger.Warn("asyncagents: save task", "task", snap.ID, "err", err)
		return err
	}
	e.save.saved, e.save.stored = v, true
	if admit {
		m.mu.Lock()
		e.save.admit = false
		m.mu.Unlock()
	}
	return nil
}

// changedLocked records a change of e: a new version to save, and a Change for the
// subscribers.
func (m *Manager) changedLocked(e *entry) {
	e.save.version++
	m.publishLocked(e, false)
}

// publishLocked sends the current state of e to every subscriber that has room, and drops
// those that have none.
func (m *Manager) publishLocked(e *entry, removed bool) {
	if len(m.feed.subs) == 0 {
		m.feed.seq++ // no copy of the task for no one
		return
	}
	m.feed.publish(m.viewLocked(e), removed, false)
}
