package worktree

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// Start makes task id's isolated checkout: a worktree in <root>/<id> on a new branch
// <prefix>/<id>, started from what the parent's checkout holds now — HEAD plus its
// uncommitted changes, tracked and untracked files alike (not ignored ones). When the
// checkout has uncommitted changes, the base is a new snapshot commit whose parent is HEAD;
// otherwise it is HEAD. The parent's working tree, index, HEAD and stash are not touched:
// the snapshot is staged on a temporary copy of the index.
//
// The id must be 1 to [MaxIDLen] ASCII letters, digits, '_' or '-', starting with a letter
// or digit (an OpenCode session id such as "ses_3f2a…" is one). A detached HEAD is fine;
// ignored files (dependencies, build outputs) are not in the worktree, and submodules are
// not checked out in it.
//
// Start returns [ErrInvalidInput], [ErrUnbornHead], [ErrInProgress], [ErrUnmerged] (the
// snapshot would take conflict markers for content), [ErrTaskExists] or [ErrLocked], and
// then has changed nothing; on any later failure it removes what it made.
func (r *Repo) Start(ctx context.Context, id string) (Task, error) {
	return r.start(ctx, id)
}

// Check returns the error [Repo.Start] would return now for the state of the repository
// alone, without making anything: [ErrUnbornHead] when HEAD has no commit, the error of a
// merge, rebase or the like in progress, or git's. It runs git rev-parse and reads the git
// directory; it takes no lock, so a Start right after it may still fail.
func (r *Repo) Check(ctx context.Context) error {
	if err := r.checkState(ctx, r.top, r.gitDir); err != nil {
		return err
	}
	_, err := r.git.line(ctx, r.top, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
	if exitCode(err) == 1 {
		return fmt.Errorf("%w: %s", ErrUnbornHead, r.top)
	}
	return err
}

func (r *Repo) start(ctx context.Context, id string) (Task, error) {
	if err := checkID(id); err != nil {
		return Task{}, err
	}
	unlock, err := r.lock(ctx)
	if err != nil {
		return Task{}, err
	}
	defer unlock()
	if err := r.checkState(ctx, r.top, r.gitDir); err != nil {
		return Task{}, err
	}
	head, err := r.git.line(ctx, r.top, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
	if exitCode(err) == 1 {
		return Task{}, fmt.Errorf("%w: %s", ErrUnbornHead, r.top)
	}
	if err != nil {
		return Task{}, err
	}
	t := Task{ID: id, Dir: r.dir(id), Branch: r.branch(id)}
	refs, err := r.git.run(ctx, r.top, nil, "for-each-ref", "--format=%(refname)", r.branchRef(id), r.baseRef(id))
	if err != nil {
		return Task{}, err
	}
	if refs != "" {
		return Task{}, fmt.Errorf("%w: %s has %s", ErrTaskExists, r.top, strings.ReplaceAll(strings.TrimSpace(refs), "\n", " and "))
	}
	if _, err := os.Lstat(t.Dir); !errors.Is(err, fs.ErrNotExist) {
		return Task{}, fmt.Errorf("%w: %s exists", ErrTaskExists, t.Dir)
	}
	snap, err := r.take(ctx, r.top, r.gitDir)
	if err != nil {
		return Task{}, err
	}
	defer snap.close()
	headTree, err := r.git.line(ctx, r.top, "rev-parse", head+"^{tree}")
	if err != nil {
		return Task{}, err
	}
	t.Base = head
	if snap.tree != headTree {
		msg := "asyncagents: snapshot for task " + id + "\n\nThe parent's working tree, with its uncommitted changes, when the task started.\n"
		if t.Base, err = r.git.line(ctx, r.top, "commit-tree", snap.tree, "-p", head, "-m", msg); err != nil {
			return Task{}, err
		}
	}
	// The base ref first: it marks the task as the package's, so that Sweep finds whatever
	// a crash leaves behind from here on.
	if _, err := r.git.run(ctx, r.top, nil, "update-ref", "-m", "asyncagents: start "+id, r.baseRef(id), t.Base, ""); err != nil {
		return Task{}, err
	}
	err = os.MkdirAll(r.root, 0o755)
	if err == nil {
		_, err = r.git.run(ctx, r.top, nil, "worktree", "add", "--quiet", "-b", t.Branch, t.Dir, t.Base)
	}
	if err != nil {
		return Task{}, errors.Join(err, r.remove(context.WithoutCancel(ctx), id, false))
	}
	return t, nil
}
