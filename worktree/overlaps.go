package worktree

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
)

// Shared is a file that more than one change touched.
type Shared struct {
	// Path is the file's path, slash-separated, relative to the repository's top.
	Path string
	// Tasks are the ids of the tasks that changed it, sorted.
	Tasks []string
}

// Overlaps are the files where tasks' changes meet each other's or the parent's: where a
// [Repo.Merge] may conflict, or silently combine edits no one saw together.
type Overlaps struct {
	// Tasks are the files two or more of the tasks changed, sorted by path.
	Tasks []Shared
	// Parent are the files the parent's checkout changed since a task's base (committed or
	// not) that the task changed too, sorted by path; Tasks names those tasks.
	Parent []Shared
}

// Overlaps compares the changes of the tasks ids — what each changed against its base, in
// its worktree now, uncommitted changes included (the branch's tip when the worktree is
// gone) — with each other and with the parent's working tree now. It returns [ErrNoTask]
// for an id that is not a task; it changes nothing (the snapshots are staged on temporary
// indexes).
func (r *Repo) Overlaps(ctx context.Context, ids ...string) (Overlaps, error) {
	tasks := make([]Task, 0, len(ids))
	for _, id := range ids {
		t, err := r.Task(ctx, id)
		if err != nil {
			return Overlaps{}, err
		}
		tasks = append(tasks, t)
	}
	unlock, err := r.lock(ctx)
	if err != nil {
		return Overlaps{}, err
	}
	defer unlock()
	parent, err := r.take(ctx, r.top, r.gitDir)
	if err != nil {
		return Overlaps{}, err
	}
	parent.close()
	byTask := map[string][]string{} // path → tasks that changed it
	byParent := map[string][]string{}
	for _, t := range tasks {
		tree, err := r.now(ctx, t)
		if err != nil {
			return Overlaps{}, err
		}
		changed, err := r.changed(ctx, t.Base, tree)
		if err != nil {
			return Overlaps{}, err
		}
		theirs, err := r.changed(ctx, t.Base, parent.tree)
		if err != nil {
			return Overlaps{}, err
		}
		for _, p := range changed {
			byTask[p] = append(byTask[p], t.ID)
			if _, ok := slices.BinarySearch(theirs, p); ok {
				byParent[p] = append(byParent[p], t.ID)
			}
		}
	}
	return Overlaps{Tasks: shared(byTask, 2), Parent: shared(byParent, 1)}, nil
}

// now is the tree of t's work now: its worktree's snapshot, or its branch's tip when the
// worktree is gone.
func (r *Repo) now(ctx context.Context, t Task) (string, error) {
	_, err := r.checkout(ctx, t)
	if errors.Is(err, ErrNoWorktree) {
		head, err := r.head(ctx, t)
		if err != nil {
			return "", err
		}
		return head + "^{tree}", nil
	}
	if err != nil {
		return "", err
	}
	gitDir, err := r.git.line(ctx, t.Dir, "rev-parse", "--absolute-git-dir")
	if err != nil {
		return "", err
	}
	s, err := r.take(ctx, t.Dir, gitDir)
	if err != nil {
		return "", err
	}
	s.close()
	return s.tree, nil
}

// changed lists the paths tree-ish to changes against from, sorted.
func (r *Repo) changed(ctx context.Context, from, to string) ([]string, error) {
	out, err := r.git.run(ctx, r.top, nil, "diff-tree", "-r", "-z", "--name-only", "--no-renames", "--no-commit-id", from, to)
	if err != nil {
		return nil, err
	}
	paths := strings.Split(strings.TrimSuffix(out, "\x00"), "\x00")
	if out == "" {
		paths = nil
	}
	slices.Sort(paths)
	return paths, nil
}

// shared lists the paths of m that have at least n tasks, sorted by path, the tasks sorted.
func shared(m map[string][]string, n int) []Shared {
	var list []Shared
	for _, p := range slices.Sorted(maps.Keys(m)) {
		ids := m[p]
		slices.Sort(ids)
		if ids = slices.Compact(ids); len(ids) >= n {
			list = append(list, Shared{Path: p, Tasks: ids})
		}
	}
	return list
}
