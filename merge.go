package asyncagents

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/asyncagents/asyncagents/hints"
	"github.com/asyncagents/asyncagents/worktree"
)

// MergeResult is what [Manager.Merge] applied.
type MergeResult struct {
	// Task is the task, with Worktree.Merged set.
	Task Task
	// Files are the files the merge changed in the parent's working tree, sorted by path,
	// with their lines added and deleted.
	Files []worktree.FileStat
}

// MergeConflictError is the error of a [Manager.Merge] whose task's changes conflict with
// the parent's working tree. It matches [ErrConflict]; nothing changed.
type MergeConflictError struct {
	// Task is the task's id; DisplayID its display id.
	Task, DisplayID string
	// Conflicts are the conflicting files with their hunks (bounded as the worktree package
	// says: [worktree.MaxHunks] hunks a file, [worktree.MaxHunkBytes] a side).
	Conflicts []worktree.Conflict
}

func (e *MergeConflictError) Error() string {
	paths := make([]string, 0, min(len(e.Conflicts), 5))
	for _, c := range e.Conflicts[:min(len(e.Conflicts), 5)] {
		paths = append(paths, echo(c.Path))
	}
	more := ""
	if n := len(e.Conflicts) - len(paths); n > 0 {
		more = fmt.Sprintf(" and %d more", n)
	}
	return fmt.Sprintf("%s: task %s conflicts with your working tree in %d files: %s%s; nothing changed",
		ErrConflict, e.Task, len(e.Conflicts), strings.Join(paths, ", "), more)
}

// Is reports whether target is ErrConflict.
func (e *MergeConflictError) Is(target error) bool { return target == ErrConflict }

// Merge applies the caller's isolated task's branch to the parent's working tree with a
// three-way merge — the base is what the task started from, the other sides the branch's
// tip and the parent's working tree now, uncommitted changes included — and marks the task
// merged (Worktree.Merged). The changes land as uncommitted changes beside the parent's
// own; nothing is committed in the parent's branch, and its index and HEAD stay as they
// were. The task's worktree and branch are left until [Manager.Clear] (which then keeps the
// branch).
//
// On a conflict nothing in the parent's working tree or index changes, and the error is a
// *[MergeConflictError] (it matches [ErrConflict]) listing the conflicting files and hunks:
// resolve them, for instance by resuming the task with instructions, and merge again.
//
// Errors, each leaving everything as it was: [ErrNotMergeable] (the task was not isolated,
// is queued or active, was merged or discarded already, or the parent's checkout has its
// own unmerged paths or operation in progress, an ignored file where the task adds one, or
// a lock of another git process), [ErrInvalidInput], [ErrTaskNotFound], [ErrAmbiguousID],
// [ErrClosed], or git's failure. The work runs the git command in the parent's checkout;
// the host must see it at the path the server does.
func (m *Manager) Merge(ctx context.Context, caller Caller, id string) (MergeResult, error) {
	e, w, err := m.isolatedTask(ctx, caller, id, "merge")
	if err != nil {
		return MergeResult{}, err
	}
	defer w.done()
	r, err := m.isolation.repo(ctx, w.Repo, nil)
	if err != nil {
		return MergeResult{}, isolationErr(err)
	}
	if _, err := r.Commit(ctx, w.ID, ""); err != nil && !errors.Is(err, worktree.ErrNoWorktree) {
		return MergeResult{}, fmt.Errorf("%w: commit the task's last changes: %w", ErrNotMergeable, err)
	}
	res, err := r.Merge(ctx, w.ID)
	var ce *worktree.ConflictError
	switch {
	case errors.As(err, &ce):
		return MergeResult{}, &MergeConflictError{Task: w.task, DisplayID: w.display, Conflicts: ce.Conflicts}
	case err != nil:
		return MergeResult{}, fmt.Errorf("%w: %w", ErrNotMergeable, err)
	}
	t, err := m.markWorktree(e, func(w *Worktree) { w.Merged = m.bg.now() })
	return MergeResult{Task: t, Files: res.Files}, err
}

// Discard removes the caller's isolated task's worktree — whatever it holds — and its
// branch unless keepBranch, and marks the task discarded (Worktree.Discarded); the task
// stays until [Manager.Clear]. It takes the same errors as [Manager.Merge], except
// conflicts.
func (m *Manager) Discard(ctx context.Context, caller Caller, id string, keepBranch bool) (Task, error) {
	e, w, err := m.isolatedTask(ctx, caller, id, "discard")
	if err != nil {
		return Task{}, err
	}
	defer w.done()
	r, err := m.isolation.repo(ctx, w.Repo, nil)
	if err == nil {
		err = r.Discard(ctx, w.ID, keepBranch)
	}
	if err != nil {
		return Task{}, fmt.Errorf("%w: %w", ErrNotMergeable, err)
	}
	return m.markWorktree(e, func(w *Worktree) { w.Discarded = m.bg.now() })
}

// worktreeOp is a merge or discard of a task's worktree under way: a copy of its record,
// the task's ids, and done, which ends the operation.
type worktreeOp struct {
	*Worktree
	task, display string
	done          func()
}

// isolatedTask returns the caller's task id, when it is isolated, ended, neither merged nor
// discarded, and no other merge or discard of it is under way; the operation counts in m.ops
// until the caller calls op.done.
func (m *Manager) isolatedTask(ctx context.Context, caller Caller, id, op string) (*entry, worktreeOp, error) {
	if err := m.begin(); err != nil {
		return nil, worktreeOp{}, err
	}
	e, err := m.lockTask(ctx, caller, id)
	if err != nil {
		m.ops.Done()
		return nil, worktreeOp{}, err
	}
	defer m.mu.Unlock()
	w := e.task.Worktree.clone()
	switch {
	case w == nil:
		err = fmt.Errorf("%w: task %s was not isolated: its changes are in your working tree already", ErrNotMergeable, e.task.ID)
	case !w.Merged.IsZero():
		err = fmt.Errorf("%w: task %s was merged already", ErrNotMergeable, e.task.ID)
	case !w.Discarded.IsZero():
		err = fmt.Errorf("%w: task %s was discarded", ErrNotMergeable, e.task.ID)
	case !e.task.Status.Terminal():
		err = fmt.Errorf("%w: task %s is %s; %s it once it ended (or cancel it first)", ErrNotMergeable, e.task.ID, e.task.Status, op)
	case !m.isolation.claim(w.ID):
		err = fmt.Errorf("%w: task %s is being merged or discarded already", ErrNotMergeable, e.task.ID)
	}
	if err != nil {
		m.ops.Done()
		return nil, worktreeOp{}, err
	}
	return e, worktreeOp{Worktree: w, task: e.task.ID, display: m.tasks.reg.DisplayID(e.task.ID), done: func() {
		m.isolation.release(w.ID)
		m.ops.Done()
	}}, nil
}

// markWorktree applies mark to e's worktree record, saves it and returns the task.
func (m *Manager) markWorktree(e *entry, mark func(*Worktree)) (Task, error) {
	m.mu.Lock()
	w := e.task.Worktree.clone()
	mark(w)
	e.task.Worktree = w
	m.changedLocked(e)
	m.mu.Unlock()
	err := m.persist(e)
	return m.snapshot(e), err
}

func (h toolHandlers) merge(ctx context.Context, caller Caller, args json.RawMessage) (string, error) {
	var in mergeArgs
	if err := decodeArgs(args, mergeSchema, &in); err != nil {
		return "", err
	}
	if in.Discard {
		t, err := h.m.Discard(ctx, caller, in.TaskID, false)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("Discarded task %s's changes and worktree; your files are as they were.", t.DisplayID), nil
	}
	r, err := h.m.Merge(ctx, caller, in.TaskID)
	var ce *MergeConflictError
	if errors.As(err, &ce) {
		return conflictText(ce, h.prefix), nil
	}
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Merged task %s into your working tree: %d files changed, as uncommitted changes beside yours (nothing was committed).", r.Task.DisplayID, len(r.Files))
	for i, f := range r.Files {
		if i == maxListedFiles {
			fmt.Fprintf(&b, "\n… and %d more", len(r.Files)-i)
			break
		}
		fmt.Fprintf(&b, "\n- %s (+%d −%d)", hints.Quote(f.Path), f.Added, f.Deleted)
	}
	return b.String(), nil
}
