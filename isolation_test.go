package asyncagents_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/asyncagentstest"
	"github.com/asyncagents/asyncagents/opencode"
)

// gitIn runs git in dir with a configuration of its own (no system or global file) and
// returns its output.
func gitIn(t testing.TB, dir string, args ...string) string {
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

// gitProject makes dir a repository with one commit of files.
func gitProject(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gitIn(t, dir, "init", "--quiet")
	gitIn(t, dir, "add", "--", ".")
	gitIn(t, dir, "commit", "--quiet", "-m", "start")
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// callTool calls the tool of m named prefix_name with args and returns its text.
func callTool(t *testing.T, m *asyncagents.Manager, caller asyncagents.Caller, name string, args any) (string, error) {
	t.Helper()
	b, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range asyncagents.Tools(m) {
		if tool.Name == asyncagents.DefaultToolPrefix+"_"+name {
			return tool.Handler(context.Background(), caller, b)
		}
	}
	t.Fatalf("no tool %s", name)
	return "", nil
}

// The flow issue 32 is done with, on the real server, through the tools: a parent's model
// launches three isolated tasks on the same code; each works in a worktree of its own, which
// holds the parent's uncommitted edit, and the parent's checkout is untouched; each is told
// what it changed and of the overlap; two merge, the third conflicts and leaves the parent's
// files byte for byte as they were; a second merge is refused; clear removes the worktrees
// and the unmerged task's branch.
func TestRealServerIsolatedTasksMergeAndConflict(t *testing.T) {
	t.Parallel() // a project of its own on the shared server
	srv := shared.Get(t)
	c := srv.Client()
	dir, err := srv.NewProject(fmt.Sprintf("isolated-%d", time.Now().UnixNano()))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for i := 1; i <= 12; i++ {
		lines = append(lines, fmt.Sprintf("line %d", i))
	}
	original := strings.Join(lines, "\n") + "\n"
	gitProject(t, dir, map[string]string{"shared.txt": original}) // opencode.json too: the worktrees need the model
	// The parent's own edit, not committed: the tasks start from it.
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("parent's uncommitted note\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	status := gitIn(t, dir, "status", "--porcelain")

	ctx := ctxT(t, 6*time.Minute)
	parent, err := c.CreateSession(ctx, opencode.CreateSessionRequest{Directory: dir, Title: "isolated parent"})
	if err != nil {
		t.Fatal(err)
	}
	m := asyncagentstest.NewManager(t, c, fastPoll, asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply))
	caller := asyncagents.Caller{SessionID: parent.ID, Agent: "build"}

	edits := []struct{ name, cmd string }{
		{"one", `cp notes.txt seen.txt ||| sed -i 's/^line 2$/line 2 by one/' shared.txt`},
		{"two", `sed -i 's/^line 10$/line 10 by two/' shared.txt`},
		{"three", `sed -i 's/^line 2$/line 2 by three/' shared.txt`},
	}
	ids := map[string]string{}
	for _, e := range edits {
		text, err := callTool(t, m, caller, "task", map[string]any{"description": "edit " + e.name, "agent": "general",
			"prompt": "RUN:" + e.cmd, "isolation": "worktree"})
		if err != nil {
			t.Fatal(err)
		}
		tasks, _ := m.List(caller, "")
		ids[e.name] = tasks[0].ID
		if !strings.Contains(text, tasks[0].DisplayID) {
			t.Errorf("launch reply %q does not name %s", text, tasks[0].DisplayID)
		}
	}
	for _, e := range edits {
		// Each worktree is a project directory OpenCode opens an instance for, which on a
		// loaded machine takes a while: wait longer than Await does.
		out, err := m.Output(ctx, caller, ids[e.name], asyncagents.OutputOptions{Block: true, Timeout: 150 * time.Second})
		if err != nil || out.TimedOut {
			t.Fatalf("task %s: %v, still %s", e.name, err, out.Task.Status)
		}
		task := out.Task
		w := task.Worktree
		if task.Status != asyncagents.StatusCompleted || w == nil {
			t.Fatalf("task %s: %s %q, worktree %+v", e.name, task.Status, task.Error, w)
		}
		if task.Directory != w.Dir || w.Repo != dir || !strings.HasPrefix(w.Dir, filepath.Join(dir, ".git")) {
			t.Errorf("task %s works in %q, worktree %+v; want a worktree of %s", e.name, task.Directory, w, dir)
		}
		if !strings.Contains(strings.Join(w.Changed, ","), "shared.txt") || w.Added == 0 || w.Error != "" {
			t.Errorf("task %s's change = %+v", e.name, w)
		}
	}
	// The parent's checkout is as it was; the first task saw the parent's uncommitted note.
	if got := readFile(t, filepath.Join(dir, "shared.txt")); got != original {
		t.Errorf("the parent's shared.txt changed before any merge:\n%s", got)
	}
	if got := gitIn(t, dir, "status", "--porcelain"); got != status {
		t.Errorf("git status of the parent = %q, want %q", got, status)
	}
	one, _ := m.Output(ctx, caller, ids["one"], asyncagents.OutputOptions{})
	if got := gitIn(t, dir, "show", one.Task.Worktree.Branch+":seen.txt"); got != "parent's uncommitted note\n" {
		t.Errorf("the task saw notes.txt as %q", got)
	}

	// Every task's output names the file the others changed too, and the diff.
	text, err := callTool(t, m, caller, "output", map[string]any{"task_id": ids["three"], "diff": true})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"shared.txt" (`, ids["one"], ids["two"], "+line 2 by three", "<task_diff boundary="} {
		if !strings.Contains(text, want) {
			t.Errorf("output of task three lacks %q:\n%s", want, text)
		}
	}
	notes := asyncagentstest.AwaitNotifications(t, c, parent.ID, 3)
	if all := strings.Join(notes, "\n"); !strings.Contains(all, "Changed 1 files") || !strings.Contains(all, "Changed 2 files") {
		t.Errorf("the notifications do not say what changed:\n%s", all)
	}

	// Two merge; the third conflicts and changes nothing.
	for _, name := range []string{"one", "two"} {
		text, err := callTool(t, m, caller, "merge", map[string]any{"task_id": ids[name]})
		if err != nil || !strings.HasPrefix(text, "Merged task") {
			t.Fatalf("merge of %s = %q, %v", name, text, err)
		}
	}
	merged := readFile(t, filepath.Join(dir, "shared.txt"))
	if !strings.Contains(merged, "line 2 by one\n") || !strings.Contains(merged, "line 10 by two\n") {
		t.Errorf("after two merges shared.txt is:\n%s", merged)
	}
	statusMerged := gitIn(t, dir, "status", "--porcelain")
	text, err = callTool(t, m, caller, "merge", map[string]any{"task_id": ids["three"]})
	if err != nil || !strings.Contains(text, "conflicts") || !strings.Contains(text, `"shared.txt"`) || !strings.Contains(text, "line 2 by three") {
		t.Errorf("merge of three = %q, %v; want the conflict listed", text, err)
	}
	if got := readFile(t, filepath.Join(dir, "shared.txt")); got != merged {
		t.Errorf("a conflicting merge changed shared.txt:\n%s", got)
	}
	if got := gitIn(t, dir, "status", "--porcelain"); got != statusMerged {
		t.Errorf("a conflicting merge changed git status: %q, want %q", got, statusMerged)
	}
	if _, err := m.Merge(ctx, caller, ids["one"]); !errors.Is(err, asyncagents.ErrNotMergeable) {
		t.Errorf("a second merge = %v, want ErrNotMergeable", err)
	}

	// Clear takes the worktrees, and the branch of the task that was not merged.
	three, _ := m.Output(ctx, caller, ids["three"], asyncagents.OutputOptions{})
	if _, err := m.Clear(ctx, caller); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(three.Task.Worktree.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the worktree of a cleared task is still there: %v", err)
	}
	branches := gitIn(t, dir, "branch", "--list", "asyncagents/*")
	if !strings.Contains(branches, one.Task.Worktree.Branch) || strings.Contains(branches, three.Task.Worktree.Branch) {
		t.Errorf("branches after clear: %q; want the merged one's kept, the other's gone", branches)
	}
}
