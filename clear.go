package asyncagents

import (
	"context"
	"fmt"
)

// Cancel aborts the caller's running or resumed task (POST /session/{id}/abort), or takes a
// queued one out of its queue, marks it [StatusCancelled] and notifies the parent. It returns
// the cancelled task. Errors, each leaving the task unchanged: [ErrNotRunning] for a task in
// any other state, [ErrInvalidInput], [ErrTaskNotFound], [ErrAmbiguousID], [ErrLeaseLost]
// (with a shared [LeaseStore], the task is being handed over to another host: try again),
// [ErrClosed], and the server's error when the abort request fails.
func (m *Manager) Cancel(ctx context.Context, caller Caller, id string) (Task, error) {
	if err := m.begin(); err != nil {
		return Task{}, err
	}
	defer m.ops.Done()
	e, err := m.lockTask(ctx, caller, id)
	if err != nil {
		return Task{}, err
	}
	tid, st, rc := e.task.ID, e.task.Status, e.task.ResumeCount
	if st.Terminal() {
		m.mu.Unlock()
		return Task{}, fmt.Errorf("%w: only running or queued tasks can be cancelled; %s is %s", ErrNotRunning, tid, st)
	}
	m.mu.Unlock()
	if st == StatusQueued { // nothing runs on the server yet
		m.finish(e, rc, StatusCancelled, "", "cancelled")
		return m.snapshot(e), nil
	}
	if err := m.abortAs(ctx, e, rc, runEnd{status: StatusCancelled, msg: "cancelled"}); err != nil {
		return Task{}, fmt.Errorf("asyncagents: abort %s: %w", tid, err)
	}
	return m.snapshot(e), nil
}

// ClearResult reports what [Manager.Clear] did.
type ClearResult struct {
	Aborted int // active tasks whose sessions were aborted
	Removed int // tasks removed from the Manager and its store
}

// Clear aborts the caller's active tasks (POST /session/{id}/abort) and removes all the
// caller's tasks from the Manager and its store, and the worktrees of isolated ones with
// their branches (a merged task's branch is kept). Tasks of other parents are untouched. An
// abort that fails is logged and the task is removed all the same; a blocked Output on a
// removed task returns [ErrTaskNotFound]. Errors: [ErrInvalidInput] (an empty caller),
// [ErrClosed], or the store's Delete error (the tasks are gone from the Manager).
func (m *Manager) Clear(ctx context.Context, caller Caller) (ClearResult, error) {
	if err := checkCaller(caller); err != nil {
		return ClearResult{}, err
	}
	m.hosts.pullAll(ctx, caller) // the caller's tasks on other hosts first come here
	return m.clear(ctx, func(parent string) bool { return parent == caller.SessionID })
}

// ClearAll aborts every active task and removes every task, whatever its parent: for
// shutdown and admin use. It works as [Manager.Clear].
func (m *Manager) ClearAll(ctx context.Context) (ClearResult, error) {
	return m.clear(ctx, func(string) bool { return true })
}

func (m *Manager) clear(ctx context.Context, match func(parent string) bool) (ClearResult, error) {
	if err := m.begin(); err != nil {
		return ClearResult{}, err
	}
	defer m.ops.Done()
	m.mu.Lock()
	var active, ids []string
	var removed, start []*entry
	for id, e := range m.tasks.byID {
		if !match(e.task.ParentSessionID) {
			continue
		}
		if e.task.Status.Active() && e.task.SessionID != "" {
			active = append(active, e.task.SessionID)
		}
		ids = append(ids, id)
		removed = append(removed, e)
		start = append(start, m.removeLocked(e)...)
	}
	isolated := isolatedOf(removed)
	m.mu.Unlock()
	m.startQueued(start)
	var res ClearResult
	for _, id := range active {
		if err := m.client.Abort(ctx, id); err != nil {
			m.cfg.logger.Warn("asyncagents: abort on clear", "session", id, "err", err)
			continue
		}
		res.Aborted++
	}
	for _, e := range removed {
		m.saveRemoved(ctx, e)
	}
	res.Removed = len(ids)
	if err := m.cfg.store.Delete(ctx, ids...); err != nil {
		return res, fmt.Errorf("asyncagents: delete tasks: %w", err)
	}
	m.isolation.removeWorktrees(m.bg.ctx, isolated, m.cfg.logger)
	return res, nil
}

// saveRemoved is the barrier between a removed task's saves and its delete: a save in flight
// lands first, and the change no save took yet (e.removed stops them) is saved now, so that
// the store counts what the task used (a LimitStore keeps a deleted task's usage) and no
// later save brings the record back.
func (m *Manager) saveRemoved(ctx context.Context, e *entry) {
	e.save.mu.Lock()
	defer e.save.mu.Unlock()
	m.mu.Lock()
	pending := e.save.stored && e.save.saved != e.save.version && !e.hold.lost
	snap := e.task.clone()
	m.mu.Unlock()
	if !pending {
		return
	}
	if m.cfg.recordKey != nil {
		snap.Seal = seal(snap, m.cfg.recordKey)
	}
	if err := m.cfg.store.Save(ctx, snap); err != nil {
		m.cfg.logger.Warn("asyncagents: save a cleared task", "task", snap.ID, "err", err)
	}
}

// removeLocked forgets a task; a blocked Output on it returns at once. It returns the queued
// tasks that can start in the slot it freed (see startQueued).
func (m *Manager) removeLocked(e *entry) []*entry {
	if !e.hold.lost { // a task another host holds now is not removed: the feed shows it from there
		m.publishLocked(e, true)
	}
	m.tasks.remove(e)
	m.recon.forget(e)
	m.mirrors.drop(e)
	e.removed = true
	if b := m.tasks.batches[e.task.BatchID]; b != nil {
		b.total--
		if !e.task.Status.Terminal() {
			b.active--
			m.slots.unreserve(e.task.ParentSessionID, e.task.AnchorSessionID)
		}
		m.tasks.closeBatch(e.task.ParentSessionID, e.task.BatchID, b)
	}
	m.notes.waveOver(e.task.ParentSessionID)
	select {
	case <-e.done:
	default:
		close(e.done)
	}
	return m.startedLocked(m.slots.free(e))
}
