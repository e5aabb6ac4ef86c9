package worktree_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/asyncagents/asyncagents/worktree"
)

// Discard removes the worktree, uncommitted work and all, with the branch or without it;
// again is no error; a kept branch is no longer a task.
func TestDiscard(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := newParent(t, map[string]string{"a.txt": "a\n"})
	r := open(t, dir)
	before := state(t, dir)
	for _, id := range []string{"ses_1", "ses_2"} {
		task, err := r.Start(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		write(t, task.Dir, map[string]string{"a.txt": "changed\n", "new.txt": "untracked\n"})
	}
	if _, err := r.Commit(ctx, "ses_2", ""); err != nil {
		t.Fatal(err)
	}
	if err := r.Discard(ctx, "ses_1", false); err != nil {
		t.Fatal(err)
	}
	if err := r.Discard(ctx, "ses_2", true); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"ses_1", "ses_2"} {
		if _, err := os.Stat(filepath.Join(r.Root(), id)); !os.IsNotExist(err) {
			t.Errorf("the worktree of %s is still there: %v", id, err)
		}
		if _, err := r.Task(ctx, id); !errors.Is(err, worktree.ErrNoTask) {
			t.Errorf("Task(%s) after Discard: %v, want ErrNoTask", id, err)
		}
		if err := r.Discard(ctx, id, false); err != nil {
			t.Errorf("Discard(%s) again: %v", id, err)
		}
	}
	if got := git(t, dir, "for-each-ref", "--format=%(refname)", "refs/asyncagents", "refs/heads/asyncagents"); got != "refs/heads/asyncagents/ses_2\n" {
		t.Errorf("refs left:\n%s\nwant only the kept branch", got)
	}
	if got := git(t, dir, "show", "asyncagents/ses_2:a.txt"); got != "changed\n" {
		t.Errorf("the kept branch holds %q", got)
	}
	if got := git(t, dir, "worktree", "list", "--porcelain"); strings.Count(got, "worktree ") != 1 {
		t.Errorf("worktrees left:\n%s", got)
	}
	unchanged(t, dir, before)
}

// Sweep, after a crash: every task the caller does not report live goes, with whatever a
// crash left of it (a base ref alone, a worktree folder git no longer knows); live tasks,
// kept branches and folders that are not the repository's stay.
func TestSweep(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := newParent(t, map[string]string{"a.txt": "a\n"})
	r := open(t, dir)
	before := state(t, dir)
	for _, id := range []string{"ses_1", "ses_2", "ses_3", "ses_4", "ses_6"} {
		if _, err := r.Start(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Discard(ctx, "ses_4", true); err != nil {
		t.Fatal(err)
	}
	git(t, dir, "update-ref", "refs/asyncagents/base/ses_5", "HEAD") // a crash right after the base ref
	// A crash inside git worktree add: a folder whose registration is gone.
	if err := os.RemoveAll(filepath.Join(dir, ".git", "worktrees", "ses_6")); err != nil {
		t.Fatal(err)
	}
	git(t, dir, "update-ref", "-d", "refs/asyncagents/base/ses_6")
	write(t, r.Root(), map[string]string{"notes/keep.txt": "not a worktree\n", "ses_7/.git": "gitdir: /elsewhere/.git/worktrees/ses_7\n"})

	live := map[string]bool{"ses_1": true}
	swept, err := r.Sweep(ctx, func(id string) bool { return live[id] })
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"ses_2", "ses_3", "ses_5", "ses_6"}, swept); diff != "" {
		t.Errorf("swept (-want +got):\n%s", diff)
	}
	tasks, err := r.Tasks(ctx)
	if err != nil || len(tasks) != 1 || tasks[0].ID != "ses_1" {
		t.Errorf("Tasks after Sweep = %+v, %v; want ses_1", tasks, err)
	}
	if got := git(t, dir, "for-each-ref", "--format=%(refname)", "refs/heads/asyncagents"); got != "refs/heads/asyncagents/ses_1\nrefs/heads/asyncagents/ses_4\nrefs/heads/asyncagents/ses_6\n" {
		t.Errorf("branches left:\n%s", got)
	}
	entries, _ := os.ReadDir(r.Root())
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if diff := cmp.Diff([]string{"notes", "ses_1", "ses_7"}, names); diff != "" {
		t.Errorf("root holds (-want +got):\n%s", diff)
	}
	if _, err := r.Commit(ctx, "ses_1", ""); err != nil {
		t.Errorf("the live task after Sweep: %v", err)
	}
	unchanged(t, dir, before)
	if swept, err := r.Sweep(ctx, nil); err != nil || !cmp.Equal(swept, []string{"ses_1"}) {
		t.Errorf("Sweep(nil) = %v, %v; want ses_1", swept, err)
	}
}

// Many tasks start, commit and are discarded at once, through two Repo values of one
// repository: each gets its own worktree and branch, and the parent stays as it was.
func TestConcurrentTasks(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := newParent(t, map[string]string{"a.txt": "a\n"})
	write(t, dir, map[string]string{"a.txt": "uncommitted\n"})
	before := state(t, dir)
	repos := []*worktree.Repo{open(t, dir), open(t, dir)}
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() {
			r, id := repos[i%2], fmt.Sprintf("ses_%d", i)
			task, err := r.Start(ctx, id)
			if err != nil {
				errs[i] = err
				return
			}
			write(t, task.Dir, map[string]string{id + ".txt": id})
			c, err := r.Commit(ctx, id, "")
			if err == nil && (len(c.Files) != 1 || c.Files[0].Path != id+".txt") {
				err = fmt.Errorf("%s changed %+v", id, c.Files)
			}
			if err == nil && i%4 == 0 {
				err = r.Discard(ctx, id, false)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	tasks, err := repos[0].Tasks(ctx)
	if err != nil || len(tasks) != 6 {
		t.Errorf("Tasks = %d tasks, %v; want 6", len(tasks), err)
	}
	unchanged(t, dir, before)
}

// A task's worktree is a checkout of the repository too: opened as a parent with the same
// root, it starts nested tasks from its own state and merges them into itself; the
// repository's tasks are one set.
func TestNestedTasks(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := newParent(t, map[string]string{"a.txt": "a\n"})
	r := open(t, dir)
	before := state(t, dir)
	outer, err := r.Start(ctx, "ses_outer")
	if err != nil {
		t.Fatal(err)
	}
	write(t, outer.Dir, map[string]string{"a.txt": "outer\n"})
	inner, err := worktree.Open(ctx, outer.Dir, r.Root())
	if err != nil {
		t.Fatal(err)
	}
	task, err := inner.Start(ctx, "ses_inner")
	if err != nil {
		t.Fatal(err)
	}
	if got := read(t, task.Dir, "a.txt"); got != "outer\n" {
		t.Errorf("the nested task sees a.txt as %q, want the outer task's edit", got)
	}
	write(t, task.Dir, map[string]string{"b.txt": "inner\n"})
	if _, err := inner.Commit(ctx, "ses_inner", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := inner.Merge(ctx, "ses_inner"); err != nil {
		t.Fatal(err)
	}
	if got := read(t, outer.Dir, "b.txt"); got != "inner\n" {
		t.Errorf("the outer task's b.txt is %q after the merge", got)
	}
	tasks, err := r.Tasks(ctx)
	if err != nil || len(tasks) != 2 {
		t.Errorf("the repository's tasks: %+v, %v; want both", tasks, err)
	}
	if swept, err := r.Sweep(ctx, func(id string) bool { return id == "ses_outer" }); err != nil || !cmp.Equal(swept, []string{"ses_inner"}) {
		t.Errorf("Sweep = %v, %v; want ses_inner", swept, err)
	}
	unchanged(t, dir, before)
}
