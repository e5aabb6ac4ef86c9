package worktree

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// FileStat is one file's change, as git diff --numstat counts it.
type FileStat struct {
	// Path is the file's path, slash-separated, relative to the repository's top. A renamed
	// file is a deletion and an addition.
	Path string
	// Added and Deleted are the lines added and deleted; both are 0 for a binary file.
	Added, Deleted int
	// Binary is set for a file git does not count lines of.
	Binary bool
}

// Change is what a task's branch holds: its commits after its base and the files they
// change.
type Change struct {
	// Task is the task's id; Branch its branch, short (<prefix>/<id>).
	Task, Branch string
	// Base is the commit the task started from; Head is the branch's tip.
	Base, Head string
	// Commits are the branch's commits after Base, oldest first (empty when the task
	// changed nothing).
	Commits []string
	// Files are the files Head changes against Base, sorted by path.
	Files []FileStat
	// Added and Deleted are the sums of the files' lines.
	Added, Deleted int
}

// Commit commits everything in task id's worktree — tracked and untracked files, not
// ignored ones — on the task's branch, with message (an empty one says "asyncagents: task
// <id>"), and returns the branch's [Change]. A worktree with no change makes no commit. Call
// it when the task's run ends: [Repo.Change], [Repo.Diff], [Repo.Merge] read the branch,
// not the worktree. Commits the task made itself, on its branch, are kept and listed.
//
// Commit returns [ErrNoTask], [ErrNoWorktree], [ErrBranchMoved] (the worktree has another
// branch or a detached HEAD), [ErrInProgress] or [ErrUnmerged] (of the worktree), or
// [ErrLocked]. It stages in the worktree's own index; no hook runs and nothing is signed.
func (r *Repo) Commit(ctx context.Context, id, message string) (Change, error) {
	t, err := r.Task(ctx, id)
	if err != nil {
		return Change{}, err
	}
	unlock, err := r.lock(ctx)
	if err != nil {
		return Change{}, err
	}
	defer unlock()
	w, err := r.checkout(ctx, t)
	if err != nil {
		return Change{}, err
	}
	gitDir, err := r.git.line(ctx, t.Dir, "rev-parse", "--absolute-git-dir")
	if err != nil {
		return Change{}, err
	}
	if err := r.checkState(ctx, t.Dir, gitDir); err != nil {
		return Change{}, err
	}
	if err := r.addAll(ctx, t.Dir, nil); err != nil {
		return Change{}, err
	}
	tree, err := r.git.line(ctx, t.Dir, "write-tree")
	if err != nil {
		return Change{}, err
	}
	headTree, err := r.git.line(ctx, t.Dir, "rev-parse", w.head+"^{tree}")
	if err != nil {
		return Change{}, err
	}
	if tree != headTree {
		if message == "" {
			message = "asyncagents: task " + id
		}
		commit, err := r.git.line(ctx, t.Dir, "commit-tree", tree, "-p", w.head, "-m", message)
		if err != nil {
			return Change{}, err
		}
		if _, err := r.git.run(ctx, t.Dir, nil, "update-ref", "-m", "asyncagents: commit "+id, r.branchRef(id), commit, w.head); err != nil {
			return Change{}, err
		}
	}
	return r.change(ctx, t)
}

// Change returns what task id's branch holds now: its commits after the base and the files
// they change. Uncommitted changes in the worktree are not in it (see [Repo.Commit]). It
// returns [ErrNoTask], or [ErrBranchMoved] when the branch is gone. It takes no lock.
func (r *Repo) Change(ctx context.Context, id string) (Change, error) {
	t, err := r.Task(ctx, id)
	if err != nil {
		return Change{}, err
	}
	return r.change(ctx, t)
}

// change is Change of t.
func (r *Repo) change(ctx context.Context, t Task) (Change, error) {
	head, err := r.head(ctx, t)
	if err != nil {
		return Change{}, err
	}
	c := Change{Task: t.ID, Branch: t.Branch, Base: t.Base, Head: head}
	out, err := r.git.run(ctx, r.top, nil, "rev-list", "--reverse", t.Base+".."+head)
	if err != nil {
		return Change{}, err
	}
	c.Commits = strings.Fields(out)
	if c.Files, err = r.numstat(ctx, t.Base, head); err != nil {
		return Change{}, err
	}
	for _, f := range c.Files {
		c.Added += f.Added
		c.Deleted += f.Deleted
	}
	return c, nil
}

// head is the tip of t's branch: ErrBranchMoved when the branch is gone.
func (r *Repo) head(ctx context.Context, t Task) (string, error) {
	head, err := r.git.line(ctx, r.top, "rev-parse", "--verify", "--quiet", r.branchRef(t.ID)+"^{commit}")
	if exitCode(err) == 1 {
		return "", fmt.Errorf("%w: branch %s of task %s is gone", ErrBranchMoved, t.Branch, t.ID)
	}
	return head, err
}

// numstat lists the files tree-ish to changes against from, sorted by path.
func (r *Repo) numstat(ctx context.Context, from, to string) ([]FileStat, error) {
	out, err := r.git.run(ctx, r.top, nil, "diff", "--numstat", "-z", "--no-renames", "--no-ext-diff", "--no-textconv", from, to, "--")
	if err != nil {
		return nil, err
	}
	var files []FileStat
	for entry := range strings.SplitSeq(strings.TrimSuffix(out, "\x00"), "\x00") {
		fields := strings.SplitN(entry, "\t", 3)
		if len(fields) != 3 {
			continue
		}
		f := FileStat{Path: fields[2], Binary: fields[0] == "-"}
		if !f.Binary {
			f.Added, _ = strconv.Atoi(fields[0])
			f.Deleted, _ = strconv.Atoi(fields[1])
		}
		files = append(files, f)
	}
	slices.SortFunc(files, func(a, b FileStat) int { return strings.Compare(a.Path, b.Path) })
	return files, nil
}
