package asyncagents_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/asyncagentstest"
	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
	"github.com/asyncagents/asyncagents/worktree"
)

// isolatedLaunch launches a task of caller in a worktree of its own.
// isolatedLaunch launches an isolated task and returns it once its start is over.
func isolatedLaunch(m *asyncagents.Manager, caller asyncagents.Caller, prompt string) (asyncagents.Task, error) {
	task, err := m.Launch(context.Background(), asyncagents.LaunchInput{Caller: caller, Description: "isolated", Agent: "general",
		Prompt: prompt, Isolation: asyncagents.IsolationWorktree})
	for err == nil && task.Starting && !task.Status.Terminal() {
		time.Sleep(5 * time.Millisecond)
		task, err = m.Get(task.ID)
	}
	return task, err
}

// A project that cannot give a task a worktree is refused with ErrIsolation, and nothing
// is created: no session, no task. An isolation that is no choice is ErrInvalidInput.
func TestIsolationRefusedChangesNothing(t *testing.T) {
	t.Parallel()
	unborn := t.TempDir()
	gitIn(t, unborn, "init", "--quiet")
	for name, tc := range map[string]struct {
		dir  string
		want error
	}{
		"not a git repository": {t.TempDir(), worktree.ErrNotRepository},
		"no commit yet":        {unborn, worktree.ErrUnbornHead},
	} {
		t.Run(name, func(t *testing.T) {
			f := asyncagentstest.NewFakeClient(t, opencodetest.WithFakeDirectory(tc.dir))
			m := asyncagentstest.NewManager(t, f)
			caller := asyncagentstest.NewParent(t, f)
			before := f.SessionCount()
			_, err := isolatedLaunch(m, caller, "work")
			if !errors.Is(err, asyncagents.ErrIsolation) || !errors.Is(err, tc.want) {
				t.Errorf("Launch = %v; want ErrIsolation and %v", err, tc.want)
			}
			if tasks, _ := m.List(caller, ""); len(tasks) != 0 || f.SessionCount() != before {
				t.Errorf("a refused launch left %d tasks and %d sessions", len(tasks), f.SessionCount()-before)
			}
		})
	}
	f := asyncagentstest.NewFakeClient(t)
	m := asyncagentstest.NewManager(t, f)
	_, err := m.Launch(context.Background(), asyncagents.LaunchInput{Caller: asyncagentstest.NewParent(t, f), Description: "x",
		Agent: "general", Prompt: "x", Isolation: "container"})
	if !errors.Is(err, asyncagents.ErrInvalidInput) {
		t.Errorf("isolation %q = %v, want ErrInvalidInput", "container", err)
	}
	if _, err := asyncagents.New(f, asyncagents.WithIsolation("vm")); !errors.Is(err, asyncagents.ErrInvalidInput) {
		t.Errorf("WithIsolation(vm) = %v, want ErrInvalidInput", err)
	}
}

// A worktree a host made and never recorded (it was killed between the two) is swept when a
// Manager next opens the repository; recorded ones stay.
func TestWorktreeNoTaskRecordsIsSwept(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	gitProject(t, repo, map[string]string{"a.txt": "a\n"})
	r, err := worktree.Open(t.Context(), repo, "")
	if err != nil {
		t.Fatal(err)
	}
	stray, err := r.Start(t.Context(), "task-0123456789ab")
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour) // a host that crashed a while ago
	if err := os.Chtimes(stray.Dir, old, old); err != nil {
		t.Fatal(err)
	}

	f := asyncagentstest.NewFakeClient(t, opencodetest.WithFakeDirectory(repo))
	m := asyncagentstest.NewManager(t, f)
	caller := asyncagentstest.NewParent(t, f)
	task, err := isolatedLaunch(m, caller, "work")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stray.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the unrecorded worktree is still there: %v", err)
	}
	if branches := gitIn(t, repo, "branch", "--list", "asyncagents/*"); strings.Contains(branches, stray.Branch) {
		t.Errorf("the unrecorded worktree's branch is still there: %q", branches)
	}
	if fi, err := os.Stat(task.Worktree.Dir); err != nil || !fi.IsDir() || task.Directory != task.Worktree.Dir {
		t.Errorf("the new task's worktree %+v: %v", task.Worktree, err)
	}
}

// A host restart in the middle of an isolated task's run: the next Manager ends the run
// normally, commits what the task changed in its worktree, and says so in the notification.
// Merge and discard wait for the run's end; a discarded task cannot be resumed.
func TestIsolatedTaskEndsAfterHostRestart(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	gitProject(t, repo, map[string]string{"a.txt": "a\n"})
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithFakeDirectory(repo), opencodetest.WithHeldRuns())
	path := filepath.Join(t.TempDir(), "tasks.jsonl")
	store, err := asyncagents.NewFileStore(path)
	if err != nil {
		t.Fatal(err)
	}
	m1, err := asyncagents.New(f, asyncagents.WithStore(store))
	if err != nil {
		t.Fatal(err)
	}
	caller := asyncagentstest.NewParent(t, f)
	task, err := isolatedLaunch(m1, caller, "work")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m1.Merge(context.Background(), caller, task.ID); !errors.Is(err, asyncagents.ErrNotMergeable) {
		t.Errorf("Merge of a running task = %v, want ErrNotMergeable", err)
	}
	// What the task's tools would write, in its worktree.
	if err := os.WriteFile(filepath.Join(task.Worktree.Dir, "b.txt"), []byte("b\nc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := m1.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}

	store2, err := asyncagents.NewFileStore(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store2.Close() })
	m2 := asyncagentstest.NewManager(t, f, asyncagents.WithStore(store2), fastPoll)
	asyncagentstest.Release(t, f, task.SessionID, opencodetest.Reply{Text: "done"})
	got := asyncagentstest.Await(t, m2, caller, task.ID)
	if w := got.Worktree; got.Status != asyncagents.StatusCompleted || w == nil || w.Files != 1 || w.Added != 2 || w.Head == "" {
		t.Fatalf("after the restart: %s %q, worktree %+v", got.Status, got.Error, got.Worktree)
	}
	if notes := asyncagentstest.AwaitNotifications(t, f, caller.SessionID, 1); !strings.Contains(notes[0], "Changed 1 files (+2 −0)") {
		t.Errorf("notification %q does not say what changed", notes[0])
	}
	if got := gitIn(t, repo, "status", "--porcelain"); got != "" {
		t.Errorf("the parent's checkout changed: %q", got)
	}

	d, err := m2.Discard(context.Background(), caller, task.ID, false)
	if err != nil || d.Worktree.Discarded.IsZero() {
		t.Fatalf("Discard = %+v, %v", d.Worktree, err)
	}
	if _, err := os.Stat(task.Worktree.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a discarded worktree is still there: %v", err)
	}
	if _, err := m2.Resume(context.Background(), caller, task.ID, "more"); !errors.Is(err, asyncagents.ErrSessionExpired) {
		t.Errorf("Resume of a discarded task = %v, want ErrSessionExpired", err)
	}
	if _, err := m2.Merge(context.Background(), caller, task.ID); !errors.Is(err, asyncagents.ErrNotMergeable) {
		t.Errorf("Merge of a discarded task = %v, want ErrNotMergeable", err)
	}
}

// An isolated fork works in its worktree: it gets the digest even when native is asked for,
// since OpenCode keeps a native fork in the parent's directory.
func TestIsolatedForkGetsTheDigest(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	gitProject(t, repo, map[string]string{"a.txt": "a\n"})
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithFakeDirectory(repo))
	m := asyncagentstest.NewManager(t, f, asyncagents.WithForkMode(asyncagents.ForkNative))
	caller := asyncagentstest.NewParent(t, f)
	task, err := m.Launch(context.Background(), asyncagents.LaunchInput{Caller: caller, Description: "forked", Agent: "general",
		Prompt: "work", Fork: true, ForkMode: asyncagents.ForkNative, Isolation: asyncagents.IsolationWorktree})
	if err != nil {
		t.Fatal(err)
	}
	task = asyncagentstest.Started(t, m, task)
	if task.ForkMode != asyncagents.ForkDigest || task.Worktree == nil || task.Directory != task.Worktree.Dir {
		t.Errorf("isolated native fork: mode %q, directory %q, worktree %+v", task.ForkMode, task.Directory, task.Worktree)
	}
}

// A deleted parent takes its isolated tasks with it, and their worktrees and branches.
func TestDeletedParentRemovesWorktrees(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	gitProject(t, repo, map[string]string{"a.txt": "a\n"})
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithFakeDirectory(repo))
	m := asyncagentstest.NewManager(t, f, fastPoll)
	caller := asyncagentstest.NewParent(t, f)
	task, err := isolatedLaunch(m, caller, "work")
	if err != nil {
		t.Fatal(err)
	}
	task = asyncagentstest.Await(t, m, caller, task.ID)
	if err := f.DeleteSession(context.Background(), caller.SessionID); err != nil {
		t.Fatal(err)
	}
	gone := func() bool {
		_, err := os.Stat(task.Worktree.Dir)
		return errors.Is(err, os.ErrNotExist) && !strings.Contains(gitIn(t, repo, "branch", "--list", "asyncagents/*"), task.Worktree.Branch)
	}
	if !testmain.Eventually(10*time.Second, gone) {
		t.Errorf("the worktree %s of a deleted parent's task is still there", task.Worktree.Dir)
	}
}
