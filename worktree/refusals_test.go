package worktree_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/asyncagents/asyncagents/worktree"
)

// Bad input gets a clear error that matches a sentinel, and changes nothing.
func TestOpenRefuses(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	repo := newParent(t, map[string]string{"a.txt": "a\n"})
	plain := t.TempDir()
	oldGit := filepath.Join(t.TempDir(), "git")
	if err := os.WriteFile(oldGit, []byte("#!/bin/sh\necho git version 2.30.1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	bare := filepath.Join(t.TempDir(), "bare.git")
	git(t, repo, "clone", "--quiet", "--bare", repo, bare)
	for _, tc := range []struct {
		name string
		dir  string
		root string
		opts []worktree.Option
		want error
	}{
		{"a folder in no repository", plain, t.TempDir(), nil, worktree.ErrNotRepository},
		{"a missing folder", filepath.Join(plain, "missing"), t.TempDir(), nil, worktree.ErrNotRepository},
		{"a bare repository", bare, t.TempDir(), nil, worktree.ErrNotRepository},
		{"the .git directory", filepath.Join(repo, ".git"), t.TempDir(), nil, worktree.ErrNotRepository},
		{"git missing", repo, t.TempDir(), []worktree.Option{worktree.WithGit(filepath.Join(plain, "no-git"))}, worktree.ErrGitMissing},
		{"git too old", repo, t.TempDir(), []worktree.Option{worktree.WithGit(oldGit)}, worktree.ErrGitVersion},
		{"a root inside the working tree", repo, filepath.Join(repo, "worktrees"), nil, worktree.ErrInvalidOption},
		{"the working tree as root", repo, repo, nil, worktree.ErrInvalidOption},
		{"a bad branch prefix", repo, t.TempDir(), []worktree.Option{worktree.WithBranchPrefix("a..b")}, worktree.ErrInvalidOption},
		{"an empty branch prefix", repo, t.TempDir(), []worktree.Option{worktree.WithBranchPrefix("")}, worktree.ErrInvalidOption},
		{"an author with <", repo, t.TempDir(), []worktree.Option{worktree.WithAuthor("a<b", "c")}, worktree.ErrInvalidOption},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := worktree.Open(ctx, tc.dir, tc.root, tc.opts...)
			if !errors.Is(err, tc.want) || r != nil {
				t.Errorf("Open = %v, %v; want %v", r, err, tc.want)
			}
			if err != nil && !strings.HasPrefix(err.Error(), "worktree: ") {
				t.Errorf("the message %q does not start with the package's name", err)
			}
		})
	}
	// The .git directory may hold the worktrees; Open from a subfolder opens the top.
	r, err := worktree.Open(ctx, filepath.Join(repo, ".git"), filepath.Join(repo, ".git", "worktrees-of-tasks"))
	if !errors.Is(err, worktree.ErrNotRepository) {
		t.Errorf("Open of .git: %v", err)
	}
	write(t, repo, map[string]string{"sub/b.txt": "b\n"})
	// No root: the worktrees go under the common git directory.
	if r, err = worktree.Open(ctx, repo, ""); err != nil || r.Root() != filepath.Join(repo, ".git", worktree.DefaultRoot) {
		t.Errorf("Open with no root = %v, %v; want the root %s", r, err, filepath.Join(repo, ".git", worktree.DefaultRoot))
	}
	if r, err = worktree.Open(ctx, filepath.Join(repo, "sub"), filepath.Join(repo, ".git", "asyncagents")); err != nil || r.Dir() != repo {
		t.Errorf("Open of a subfolder = %v, %v; want the top %s", r, err, repo)
	}
}

// A parent's checkout the snapshot cannot take, or a task id that is no name, is refused
// by Start and Merge, and nothing changes.
func TestStartAndMergeRefuse(t *testing.T) {
	t.Parallel()
	ctx := t.Context()

	unborn := filepath.Join(t.TempDir(), "unborn")
	git(t, t.TempDir(), "init", "--quiet", unborn)
	write(t, unborn, map[string]string{"a.txt": "a\n"})

	conflicted := newParent(t, map[string]string{"a.txt": "a\n"})
	git(t, conflicted, "checkout", "--quiet", "-b", "other")
	write(t, conflicted, map[string]string{"a.txt": "other\n"})
	git(t, conflicted, "commit", "--quiet", "-am", "other")
	git(t, conflicted, "checkout", "--quiet", "main")
	write(t, conflicted, map[string]string{"a.txt": "main\n"})
	git(t, conflicted, "commit", "--quiet", "-am", "main")
	if _, err := gitErr(conflicted, "merge", "--quiet", "other"); err == nil {
		t.Fatal("the merge did not conflict")
	}

	resolved := newParent(t, map[string]string{"a.txt": "a\n"})
	git(t, resolved, "checkout", "--quiet", "-b", "other")
	write(t, resolved, map[string]string{"b.txt": "b\n"})
	git(t, resolved, "add", "b.txt")
	git(t, resolved, "commit", "--quiet", "-m", "other")
	git(t, resolved, "checkout", "--quiet", "main")
	git(t, resolved, "merge", "--quiet", "--no-commit", "--no-ff", "other")

	ok := newParent(t, map[string]string{"a.txt": "a\n"})

	for _, tc := range []struct {
		name string
		dir  string
		id   string
		want error
	}{
		{"an unborn HEAD", unborn, "ses_1", worktree.ErrUnbornHead},
		{"unmerged paths", conflicted, "ses_1", worktree.ErrUnmerged},
		{"a merge in progress", resolved, "ses_1", worktree.ErrInProgress},
		{"an empty id", ok, "", worktree.ErrInvalidInput},
		{"an id with a slash", ok, "a/b", worktree.ErrInvalidInput},
		{"an id of dots", ok, "..", worktree.ErrInvalidInput},
		{"an id with a space", ok, "ses 1", worktree.ErrInvalidInput},
		{"a long id", ok, strings.Repeat("a", worktree.MaxIDLen+1), worktree.ErrInvalidInput},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := open(t, tc.dir)
			before := state(t, tc.dir)
			task, err := r.Start(ctx, tc.id)
			if !errors.Is(err, tc.want) {
				t.Errorf("Start = %+v, %v; want %v", task, err, tc.want)
			}
			unchanged(t, tc.dir, before)
			if tasks, err := r.Tasks(ctx); err != nil || len(tasks) != 0 {
				t.Errorf("Tasks = %v, %v; want none", tasks, err)
			}
			if entries, _ := os.ReadDir(r.Root()); len(entries) != 0 {
				t.Errorf("the root holds %v", entries)
			}
		})
	}
	if _, err := open(t, ok).Start(ctx, strings.Repeat("a", worktree.MaxIDLen)); err != nil {
		t.Errorf("Start with the longest id: %v", err)
	}

	// Merge into a parent with its own conflicts in progress.
	for _, tc := range []struct {
		name string
		dir  string
		want error
	}{
		{"unmerged paths", conflicted, worktree.ErrUnmerged},
		{"a merge in progress", resolved, worktree.ErrInProgress},
	} {
		t.Run("merge into "+tc.name, func(t *testing.T) {
			r := open(t, tc.dir)
			// The task starts before the parent's merge: make it on a clean clone's state.
			git(t, tc.dir, "update-ref", "refs/asyncagents/base/ses_m", "HEAD")
			git(t, tc.dir, "update-ref", "refs/heads/asyncagents/ses_m", "HEAD")
			before := state(t, tc.dir)
			if _, err := r.Merge(ctx, "ses_m"); !errors.Is(err, tc.want) {
				t.Errorf("Merge = %v, want %v", err, tc.want)
			}
			unchanged(t, tc.dir, before)
		})
	}
}

// An existing task, or a folder in its place, is not started again; an unknown task is
// ErrNoTask everywhere.
func TestTaskExistsAndNoTask(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := newParent(t, map[string]string{"a.txt": "a\n"})
	r := open(t, dir)
	if _, err := r.Start(ctx, "ses_1"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Start(ctx, "ses_1"); !errors.Is(err, worktree.ErrTaskExists) {
		t.Errorf("Start again: %v, want ErrTaskExists", err)
	}
	write(t, r.Root(), map[string]string{"ses_2/foreign.txt": "not git's\n"})
	if _, err := r.Start(ctx, "ses_2"); !errors.Is(err, worktree.ErrTaskExists) {
		t.Errorf("Start over a folder: %v, want ErrTaskExists", err)
	}
	if got := read(t, r.Root(), "ses_2/foreign.txt"); got != "not git's\n" {
		t.Errorf("the folder's file is now %q", got)
	}
	for name, call := range map[string]func() error{
		"Task":     func() error { _, err := r.Task(ctx, "ses_9"); return err },
		"Commit":   func() error { _, err := r.Commit(ctx, "ses_9", ""); return err },
		"Change":   func() error { _, err := r.Change(ctx, "ses_9"); return err },
		"Diff":     func() error { _, err := r.Diff(ctx, "ses_9", 0, 0); return err },
		"Merge":    func() error { _, err := r.Merge(ctx, "ses_9"); return err },
		"Overlaps": func() error { _, err := r.Overlaps(ctx, "ses_9"); return err },
	} {
		if err := call(); !errors.Is(err, worktree.ErrNoTask) {
			t.Errorf("%s of an unknown task: %v, want ErrNoTask", name, err)
		}
	}
}

// A cancelled context stops a call before it changes anything.
func TestCancelledContext(t *testing.T) {
	t.Parallel()
	dir := newParent(t, map[string]string{"a.txt": "a\n"})
	write(t, dir, map[string]string{"a.txt": "edited\n"})
	r := open(t, dir)
	before := state(t, dir)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := r.Start(ctx, "ses_1"); !errors.Is(err, context.Canceled) {
		t.Errorf("Start with a cancelled context: %v", err)
	}
	unchanged(t, dir, before)
	if tasks, err := r.Tasks(t.Context()); err != nil || len(tasks) != 0 {
		t.Errorf("Tasks = %v, %v; want none", tasks, err)
	}
}

// A file the parent changed in the same instant as its index was written, with the same
// size, is still seen as changed: the index copy keeps the index's time.
func TestStartSeesRacyEdit(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := newParent(t, map[string]string{"a.txt": "aaa\n"})
	write(t, dir, map[string]string{"a.txt": "bbb\n"})
	r := open(t, dir)
	task, err := r.Start(ctx, "ses_1")
	if err != nil {
		t.Fatal(err)
	}
	if got := read(t, task.Dir, "a.txt"); got != "bbb\n" {
		t.Errorf("the worktree's a.txt is %q, want the parent's edit", got)
	}
}

// Another git process holding a lock the call needs is ErrLocked, and the call can be tried
// again. Start does not need the parent's index lock: it stages on a copy.
func TestLocked(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := newParent(t, map[string]string{"a.txt": "a\n"})
	write(t, dir, map[string]string{"a.txt": "edited\n"})
	r := open(t, dir)
	lock := filepath.Join(dir, ".git", "index.lock")
	write(t, dir, map[string]string{".git/index.lock": ""})
	task, err := r.Start(ctx, "ses_1")
	if err != nil {
		t.Fatalf("Start while the parent's index is locked: %v", err)
	}
	if got := read(t, task.Dir, "a.txt"); got != "edited\n" {
		t.Errorf("the worktree's a.txt is %q", got)
	}
	if err := os.Remove(lock); err != nil {
		t.Fatal(err)
	}
	write(t, task.Dir, map[string]string{"b.txt": "b\n"})
	gitDir := strings.TrimSpace(git(t, task.Dir, "rev-parse", "--absolute-git-dir"))
	write(t, gitDir, map[string]string{"index.lock": ""})
	if _, err := r.Commit(ctx, "ses_1", ""); !errors.Is(err, worktree.ErrLocked) {
		t.Errorf("Commit while the worktree's index is locked: %v, want ErrLocked", err)
	}
	if err := os.Remove(filepath.Join(gitDir, "index.lock")); err != nil {
		t.Fatal(err)
	}
	if c, err := r.Commit(ctx, "ses_1", ""); err != nil || len(c.Files) != 1 || c.Files[0].Path != "b.txt" {
		t.Errorf("Commit again = %+v, %v; want b.txt", c.Files, err)
	}
}

// A Start that fails after it made the base ref removes what it made.
func TestStartFailureLeavesNothing(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := newParent(t, map[string]string{"a.txt": "a\n"})
	write(t, dir, map[string]string{"a.txt": "edited\n"})
	r := open(t, dir)
	before := state(t, dir)
	write(t, filepath.Dir(r.Root()), map[string]string{filepath.Base(r.Root()): "a file where the root should be"})
	if _, err := r.Start(ctx, "ses_1"); err == nil {
		t.Fatal("Start with a file for a root succeeded")
	}
	if refs := git(t, dir, "for-each-ref", "refs/asyncagents", "refs/heads/asyncagents"); refs != "" {
		t.Errorf("refs left:\n%s", refs)
	}
	unchanged(t, dir, before)
}
