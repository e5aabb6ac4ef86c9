//go:build unix

package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// gitAt runs git in dir with a configuration of its own (no system or global file) and
// returns its output.
func gitAt(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=Test", "-c", "user.email=test@example.com",
		"-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// isolatedTask returns the tool call that launches an isolated task whose model runs the
// shell command cmd in its worktree.
func isolatedTask(description, cmd string) opencodetest.ToolCall {
	return opencodetest.ToolCall{Name: "asyncagents_task", Arguments: fmt.Sprintf(
		`{"description":%q,"agent":"general","prompt":%q,"isolation":"worktree"}`, description, "RUN:"+cmd)}
}

// launchIsolated has parent's model launch an isolated task described description, whose
// model runs the shell command cmd in its worktree, and waits until the store at path
// records it completed with its changes committed on its branch (while the parent's turn
// ends). It returns the task's worktree.
func launchIsolated(t *testing.T, c *opencode.HTTPClient, parent, path, description, cmd string) *asyncagents.Worktree {
	t.Helper()
	launched := make(chan error, 1)
	go func() {
		launched <- launchCalls(t.Context(), c, parent, []opencodetest.ToolCall{isolatedTask(description, cmd)})
	}()
	var task asyncagents.Task
	// Each worktree is a project directory OpenCode opens an instance for: on a loaded
	// machine that takes a while.
	if !testmain.Eventually(150*time.Second, func() bool {
		tasks, err := asyncagents.ReadFileStore(t.Context(), path)
		if err != nil {
			return false
		}
		for _, got := range tasks {
			if got.Description == description {
				task = got
				return task.Status == asyncagents.StatusCompleted && task.Worktree != nil && task.Worktree.Head != ""
			}
		}
		return false
	}) {
		t.Fatalf("task %q not completed with its changes committed: %+v", description, task)
	}
	if err := <-launched; err != nil {
		t.Fatal(err)
	}
	return task.Worktree
}

// A serve is SIGKILLed while it starts an isolated task: the launch answered at once with the
// task, recorded as starting; the worktree and its branch are made, and the creation of the
// task's session (POST /session, held by a proxy between serve and OpenCode) has not
// answered, so the task records neither. Serve is started again on the same store; as the
// store holds another isolated task of the same repository, the new serve opens that
// repository at its start and removes the orphan worktree, its branch and base ref (its
// folder made older than the minute a sweep leaves a worktree to the host recording it),
// before any launch, and ends the task left starting in error, saying so. The recorded
// task's worktree and branch are kept; a launch after the restart gets a worktree that works,
// and the parent's checkout is as it was throughout.
//
// Issue 34, item 1: a host SIGKILLed while a launch is starting leaves a task the next host
// fails, never one stuck.
//
// Issue 32, item 7: SIGKILL of the host between creating and recording a worktree → swept at
// the next start.
func TestWorktreeOfAKilledLaunchIsSweptAtTheNextStart(t *testing.T) {
	// Not parallel: serves and OpenCode instances run before the hosts tests, not beside them.
	srv := opencodetest.Start(t)
	scriptHosts(t, srv)
	dir, err := srv.NewProject("repo")
	if err != nil {
		t.Fatal(err)
	}
	// The repository, made before OpenCode first serves the folder (its project is the git one).
	if err := os.WriteFile(filepath.Join(dir, "README.md"), []byte("the parent's file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gitAt(t, dir, "init", "--quiet")
	gitAt(t, dir, "add", "--", ".") // opencode.json too: the worktrees need the model
	gitAt(t, dir, "commit", "--quiet", "-m", "start")
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("the parent's uncommitted note\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	top := strings.TrimSpace(gitAt(t, dir, "rev-parse", "--show-toplevel"))
	root := filepath.Join(top, ".git", "asyncagents", "worktrees") // serve's default -worktree-root
	head, status := gitAt(t, dir, "rev-parse", "HEAD"), gitAt(t, dir, "status", "--porcelain")

	proxy := opencodetest.NewProxy(srv.URL)
	t.Cleanup(proxy.Close)
	state := filepath.Join(t.TempDir(), "state")
	store := filepath.Join(state, "tasks.jsonl")
	args := []string{"serve", "-url", proxy.URL, "-listen", "127.0.0.1:0", "-dir", dir, "-store", store,
		"-token-file", filepath.Join(state, "token"), "-socket", filepath.Join(state, "serve.sock"), "-notify", "none"}
	c := srv.Client(opencode.WithDirectory(dir))
	parent, err := c.CreateSession(t.Context(), opencode.CreateSessionRequest{Title: "isolated parent"})
	if err != nil {
		t.Fatal(err)
	}

	// A recorded isolated task: the store names the repository, so the next serve opens it.
	first := launchServe(t, "serve", args)
	kept := launchIsolated(t, c, parent.ID, store, "kept", "echo kept > kept.txt")

	// The launch that is killed: its worktree is made, its session's creation is held.
	held := proxy.Inject(opencodetest.Fault{Pattern: "POST /session", Times: 1, Delay: 5 * time.Minute})
	launched := make(chan error, 1)
	go func() {
		launched <- launchCalls(t.Context(), c, parent.ID, []opencodetest.ToolCall{isolatedTask("killed", "echo killed > killed.txt")})
	}()
	orphans := func() []string {
		entries, _ := os.ReadDir(root)
		var ids []string
		for _, e := range entries {
			if e.Name() != kept.ID {
				ids = append(ids, e.Name())
			}
		}
		return ids
	}
	if !testmain.Eventually(60*time.Second, func() bool { return held.Hits() == 1 && len(orphans()) == 1 }) {
		t.Fatalf("the killed launch did not reach POST /session with its worktree made: %d held, worktrees %v\n%s",
			held.Hits(), orphans(), first.out)
	}
	first.kill()
	held.Remove()
	orphan := orphans()[0]
	orphanDir := filepath.Join(root, orphan)
	tasks, err := asyncagents.ReadFileStore(t.Context(), store)
	if err != nil {
		t.Fatal(err)
	}
	var killed asyncagents.Task
	for _, tk := range tasks {
		if tk.Description == "killed" {
			killed = tk
		}
	}
	if len(tasks) != 2 || !killed.Starting || killed.SessionID != "" || killed.Worktree != nil {
		t.Fatalf("the store holds %+v; want the kept task and the killed one starting, with no session or worktree", tasks)
	}
	leftovers := func() []string { // what git still knows of the orphan
		var found []string
		for _, list := range [][]string{
			{"worktree", "list", "--porcelain"},
			{"branch", "--list", "asyncagents/*"},
			{"for-each-ref", "--format=%(refname)", "refs/asyncagents/base/"},
		} {
			if out := gitAt(t, dir, list...); strings.Contains(out, orphan) {
				found = append(found, strings.Join(list, " ")+": "+out)
			}
		}
		if _, err := os.Stat(orphanDir); !errors.Is(err, os.ErrNotExist) {
			found = append(found, "the folder "+orphanDir)
		}
		return found
	}
	if got := leftovers(); len(got) != 4 {
		t.Fatalf("the killed launch left %q; want its worktree, branch, base ref and folder", got)
	}
	// Older than the minute a sweep leaves a worktree to the host that may be recording it.
	old := time.Now().Add(-2 * time.Minute)
	if err := os.Chtimes(orphanDir, old, old); err != nil {
		t.Fatal(err)
	}

	// The next start sweeps it, before any launch.
	second := launchServe(t, "serve after the kill", args)
	restarted := time.Now()
	if !testmain.Eventually(30*time.Second, func() bool { return len(leftovers()) == 0 }) {
		t.Fatalf("%v after the restart the orphan worktree is still there: %q\n%s", time.Since(restarted), leftovers(), second.out)
	}
	t.Logf("the orphan worktree was swept %v after the restart", time.Since(restarted).Round(time.Millisecond))
	if _, err := os.Stat(filepath.Join(kept.Dir, "kept.txt")); err != nil {
		t.Errorf("the recorded task's worktree was swept: %v", err)
	}
	if branches := gitAt(t, dir, "branch", "--list", "asyncagents/*"); !strings.Contains(branches, kept.Branch) {
		t.Errorf("the recorded task's branch is gone: %q", branches)
	}

	// The launch had answered; the task it left starting ends in error.
	if err := <-launched; err != nil {
		t.Fatalf("the launch of the serve killed later: %v", err)
	}
	if !testmain.Eventually(30*time.Second, func() bool {
		tasks, err := asyncagents.ReadFileStore(t.Context(), store)
		return err == nil && slices.ContainsFunc(tasks, func(tk asyncagents.Task) bool {
			return tk.ID == killed.ID && tk.Status == asyncagents.StatusError && strings.Contains(tk.Error, "while the task was starting")
		})
	}) {
		t.Errorf("the task left starting did not end in error after the restart\n%s", second.out)
	}

	// A launch after the restart gets a worktree that works.
	after := launchIsolated(t, c, parent.ID, store, "after", "echo after > after.txt")
	if after.ID == orphan || !strings.HasPrefix(after.Dir, root) {
		t.Errorf("the launch after the restart got the worktree %+v", after)
	}
	if b, err := os.ReadFile(filepath.Join(after.Dir, "after.txt")); err != nil || string(b) != "after\n" {
		t.Errorf("after.txt in the new task's worktree = %q, %v", b, err)
	}
	if got := gitAt(t, dir, "show", after.Branch+":after.txt"); got != "after\n" {
		t.Errorf("after.txt on the new task's branch = %q", got)
	}
	if got := gitAt(t, dir, "show", after.Branch+":notes.txt"); got != "the parent's uncommitted note\n" {
		t.Errorf("the new task saw notes.txt as %q", got)
	}
	if changed := after.Changed; !slices.Equal(changed, []string{"after.txt"}) {
		t.Errorf("the new task changed %q, want after.txt", changed)
	}

	// The parent's checkout is as it was.
	if got := gitAt(t, dir, "rev-parse", "HEAD"); got != head {
		t.Errorf("the parent's HEAD moved to %s", got)
	}
	if got := gitAt(t, dir, "status", "--porcelain"); got != status {
		t.Errorf("git status of the parent = %q, want %q", got, status)
	}
	for _, name := range []string{"kept.txt", "killed.txt", "after.txt"} {
		if _, err := os.Stat(filepath.Join(dir, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a task's %s reached the parent's checkout: %v", name, err)
		}
	}
}
