package worktree

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Discard removes task id's worktree (with whatever it holds, committed or not) and its base
// ref, and its branch unless keepBranch. A kept branch is the user's from then on: it is no
// longer a task of the repository ([Repo.Task] returns [ErrNoTask]), and neither Discard
// nor [Repo.Sweep] deletes it later. Discard is idempotent: a task that is already gone, wholly or in part, is not an
// error. It never touches a folder in root that is not a worktree of the repository.
func (r *Repo) Discard(ctx context.Context, id string, keepBranch bool) error {
	if err := checkID(id); err != nil {
		return err
	}
	unlock, err := r.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	return r.remove(ctx, id, keepBranch)
}

// remove is Discard with the lock held. The base ref goes last when the branch goes (a crash
// leaves the mark Sweep looks for), first when the branch stays (a crash never takes a kept
// branch); a branch whose base ref is gone is never deleted.
func (r *Repo) remove(ctx context.Context, id string, keepBranch bool) error {
	if !keepBranch {
		refs, err := r.git.run(ctx, r.top, nil, "for-each-ref", "--format=%(refname)", r.baseRef(id))
		if err != nil {
			return err
		}
		keepBranch = refs == "" // a branch without a base ref is not a task's: it was kept
	}
	if keepBranch {
		if _, err := r.git.run(ctx, r.top, nil, "update-ref", "-d", r.baseRef(id)); err != nil {
			return err
		}
	}
	if err := r.removeWorktree(ctx, id); err != nil {
		return err
	}
	if keepBranch {
		return nil
	}
	for _, ref := range []string{r.branchRef(id), r.baseRef(id)} {
		if _, err := r.git.run(ctx, r.top, nil, "update-ref", "-d", ref); err != nil {
			return err
		}
	}
	return nil
}

// removeWorktree removes <root>/<id> when it is a worktree of the repository: a registered
// one with git worktree remove (its folder may be gone), an unregistered folder whose .git
// file points into the repository (a crash in git worktree add) by deleting it.
func (r *Repo) removeWorktree(ctx context.Context, id string) error {
	dir := r.dir(id)
	list, err := r.worktrees(ctx)
	if err != nil {
		return err
	}
	if slices.ContainsFunc(list, func(w worktree) bool { return w.path == dir }) {
		_, err := r.git.run(ctx, r.top, nil, "worktree", "remove", "--force", "--force", dir)
		return err
	}
	if r.owns(dir) {
		return os.RemoveAll(dir)
	}
	return nil
}

// owns reports whether dir is a worktree folder of the repository: its .git file reads
// "gitdir: <common>/worktrees/…".
func (r *Repo) owns(dir string) bool {
	data, err := os.ReadFile(filepath.Join(dir, ".git"))
	if err != nil {
		return false
	}
	gitdir, ok := strings.CutPrefix(strings.TrimSpace(string(data)), "gitdir: ")
	return ok && within(resolve(gitdir), filepath.Join(resolve(r.common), "worktrees"))
}

// Sweep removes what tasks no longer live left in the repository — for recovery after a
// crash, when the caller knows which tasks are live: every task of the repository (base
// ref) whose id live does not report, with its worktree and branch; and every worktree in
// root whose id live does not report (without a base ref, its branch is kept). A nil live
// reports no task. Branches kept by [Repo.Discard], and anything in root that is not a
// worktree of the repository, are left. Sweep returns the ids it removed, sorted; it goes on
// past a task it cannot remove and returns the errors joined.
//
// The tasks are the repository's, whichever checkout started them (see [Open]): live must
// report every live task of the repository, nested ones included. It is called with the
// repository's lock held, so it must not call the Repo.
func (r *Repo) Sweep(ctx context.Context, live func(id string) bool) ([]string, error) {
	unlock, err := r.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	tasks, err := r.Tasks(ctx)
	if err != nil {
		return nil, err
	}
	ids := map[string]bool{}
	for _, t := range tasks {
		ids[t.ID] = true
	}
	list, err := r.worktrees(ctx)
	if err != nil {
		return nil, err
	}
	for _, w := range list {
		if id := filepath.Base(w.path); filepath.Dir(w.path) == r.root && checkID(id) == nil {
			ids[id] = true
		}
	}
	entries, _ := os.ReadDir(r.root) // a missing root holds nothing
	for _, e := range entries {
		if id := e.Name(); checkID(id) == nil && r.owns(r.dir(id)) {
			ids[id] = true
		}
	}
	var swept []string
	var errs []error
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		if live != nil && live(id) {
			continue
		}
		if err := r.remove(ctx, id, false); err != nil {
			errs = append(errs, err)
			continue
		}
		swept = append(swept, id)
	}
	return swept, errors.Join(errs...)
}
