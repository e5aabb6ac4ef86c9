package opencode_test

import (
	"context"
	"encoding/json"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// TestWorktreeSession records how OpenCode 1.18.33 treats a session whose directory is a linked
// git worktree of a repository, for a worktree inside the main checkout's .git folder (where
// the worktree package puts them) and for one outside the repository:
//
//   - A session created with the worktree as Directory has that Directory, and the project id
//     of the main checkout's sessions (one project for all worktrees of a repository).
//   - write, edit, read, grep and glob, given paths relative to the worktree or absolute in
//     it, act on the worktree's files and name them by their absolute paths there; bash runs
//     in the worktree. The main checkout is left byte for byte as it was. (grep and glob run
//     ripgrep: without rg in PATH they fail offline and are not checked.)
//   - A read of a file of the main checkout asks external_directory for "<repo>/*": the main
//     checkout is outside a worktree session's directory, even when the worktree is in .git.
//   - A fork is made in the directory of the session forked, whatever directory the request
//     names: the fork of a session of the main checkout is in the main checkout, with a
//     worktree as ?directory= and with none: ForkSessionRequest.Directory changes nothing.
func TestWorktreeSession(t *testing.T) {
	t.Parallel()
	srv := ownServer(t) // a server of its own: the test sets its model's script
	srv.Model.SetScript(planScript)
	c := srv.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel) // after the parallel subtests

	home, repo := t.TempDir(), t.TempDir()
	// The scripted model's opencode.json is committed: a session reads its directory's.
	cfg, err := os.ReadFile(filepath.Join(srv.Directory, "opencode.json"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"a.txt": "alpha\n", "sub/b.txt": "beta alpha\n", "opencode.json": string(cfg)}
	for name, content := range files {
		p := filepath.Join(repo, name)
		if os.MkdirAll(filepath.Dir(p), 0o755) != nil || os.WriteFile(p, []byte(content), 0o644) != nil {
			t.Fatalf("cannot write %s", p)
		}
	}
	git(t, home, "-C", repo, "init", "-q", "-b", "main")
	git(t, home, "-C", repo, "add", ".")
	git(t, home, "-C", repo, "commit", "-q", "-m", "start")
	placements := map[string]string{
		"in .git": filepath.Join(repo, ".git", "asyncagents", "worktrees", "wt1"),
		"outside": filepath.Join(t.TempDir(), "wt2"),
	}
	for _, wt := range placements {
		git(t, home, "-C", repo, "worktree", "add", "-q", "-b", "task/"+filepath.Base(wt), wt)
	}

	parent, err := c.CreateSession(ctx, opencode.CreateSessionRequest{Directory: repo, Title: "main checkout"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PostMessage(ctx, parent.ID, opencode.PromptRequest{NoReply: true, Parts: []opencode.TextPartInput{opencode.NewText("context")}}); err != nil {
		t.Fatal(err)
	}
	for name, wt := range placements {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, err := c.CreateSession(ctx, opencode.CreateSessionRequest{Directory: wt, Title: "worktree"})
			if err != nil || s.Directory != wt || s.ProjectID != parent.ProjectID {
				t.Fatalf("session in the worktree = %+v, %v; want directory %s, project %s", s, err, wt, parent.ProjectID)
			}
			abs := func(p string) string { return filepath.Join(wt, p) }
			parts := runPlan(t, ctx, c, s.ID, [][]opencodetest.ToolCall{
				{call("write-rel", "write", "filePath", "new-rel.txt", "content", "rel\n"),
					call("write-abs", "write", "filePath", abs("new-abs.txt"), "content", "abs\n"),
					call("read-rel", "read", "filePath", "a.txt"),
					call("read-abs", "read", "filePath", abs("sub/b.txt")),
					call("bash-rel", "bash", "command", "pwd > where.txt; touch bashed.txt", "description", "rel"),
					call("bash-abs", "bash", "command", "touch "+abs("bashed-abs.txt"), "description", "abs")},
				{call("edit-rel", "edit", "filePath", "a.txt", "oldString", "alpha", "newString", "alpha-rel"),
					call("edit-abs", "edit", "filePath", abs("sub/b.txt"), "oldString", "beta", "newString", "beta-abs")},
				{call("grep", "grep", "pattern", "alpha"), call("grep-rel", "grep", "pattern", "alpha", "path", "sub"),
					call("grep-abs", "grep", "pattern", "alpha", "path", wt), call("glob", "glob", "pattern", "**/*.txt"),
					call("glob-rel", "glob", "pattern", "*.txt", "path", "sub"), call("glob-abs", "glob", "pattern", "**/*.txt", "path", wt)},
			})
			want := map[string]string{"new-rel.txt": "rel\n", "new-abs.txt": "abs\n", "a.txt": "alpha-rel\n",
				"sub/b.txt": "beta-abs alpha\n", "where.txt": wt + "\n", "bashed.txt": "", "bashed-abs.txt": ""}
			for name, content := range want {
				if b, err := os.ReadFile(abs(name)); err != nil || string(b) != content {
					t.Errorf("worktree's %s = %q, %v; want %q", name, b, err, content)
				}
			}
			for id, file := range map[string]string{"read-rel": "a.txt", "read-abs": "sub/b.txt"} {
				if out := parts[id].Output; !strings.HasPrefix(out, "<path>"+abs(file)+"</path>") {
					t.Errorf("%s read %q, want the worktree's %s", id, out, file)
				}
			}
			if p := parts["grep"]; p.Status == opencode.ToolError && strings.Contains(p.Error, "ripgrep") {
				t.Logf("grep and glob not checked: OpenCode found no ripgrep (%s): put rg in PATH", p.Error)
			} else {
				for _, id := range []string{"grep", "grep-rel", "grep-abs", "glob", "glob-rel", "glob-abs"} {
					if paths := absPaths(parts[id].Output); len(paths) == 0 || slices.ContainsFunc(paths, func(p string) bool { return !strings.HasPrefix(p, wt+"/") }) {
						t.Errorf("%s found %q, want paths in the worktree only", id, parts[id].Output)
					}
				}
			}
			if st := git(t, home, "-C", repo, "status", "--porcelain"); st != "" || !maps.Equal(tree(t, repo), files) {
				t.Errorf("the main checkout changed: status %q, files %v", st, tree(t, repo))
			}
			checkAsksMainCheckout(t, ctx, c, s.ID, wt, repo)
			for _, dir := range []string{wt, ""} {
				if f, err := c.ForkSession(ctx, parent.ID, opencode.ForkSessionRequest{Directory: dir}); err != nil || f.Directory != repo {
					t.Errorf("fork with directory %q = %+v, %v; want it in %s", dir, f, err, repo)
				}
			}
		})
	}
}

// checkAsksMainCheckout has session id, in worktree wt, read the main checkout's a.txt, and
// checks that OpenCode asks external_directory for repo's files; it rejects the request.
func checkAsksMainCheckout(t *testing.T, ctx context.Context, c *opencode.HTTPClient, id, wt, repo string) {
	t.Helper()
	plan, _ := json.Marshal([][]opencodetest.ToolCall{{call("read-main", "read", "filePath", filepath.Join(repo, "a.txt"))}})
	if err := c.PromptAsync(ctx, id, opencode.PromptRequest{Parts: []opencode.TextPartInput{opencode.NewText("PLAN:" + string(plan))}}); err != nil {
		t.Fatal(err)
	}
	var asked *opencode.Permission
	testmain.Eventually(60*time.Second, func() bool {
		ps, _ := c.Permissions(ctx, wt)
		for i := range ps {
			if ps[i].SessionID == id {
				asked = &ps[i]
			}
		}
		return asked != nil
	})
	if asked == nil || asked.Permission != "external_directory" || !slices.Equal(asked.Patterns, []string{repo + "/*"}) {
		t.Fatalf("a read of the main checkout asked %+v, want external_directory for %s/*", asked, repo)
	}
	if err := c.ReplyPermission(ctx, wt, asked.ID, opencode.PermissionReply{Reply: opencode.ReplyReject}); err != nil {
		t.Fatal(err)
	}
	testmain.Eventually(30*time.Second, func() bool { st, err := c.SessionStatus(ctx, wt); return err == nil && st[id].Type == "" })
}

// planScript answers a prompt "PLAN:<steps>", steps a JSON list of steps each a list of tool
// calls made at once: the next step after the tool results so far, then the text "done".
func planScript(r *opencodetest.Request) (opencodetest.Reply, bool) {
	_, text := r.LastUser()
	_, spec, ok := strings.Cut(text, "PLAN:")
	var steps [][]opencodetest.ToolCall
	if !ok || json.Unmarshal([]byte(strings.SplitN(spec, "\n", 2)[0]), &steps) != nil {
		return opencodetest.Reply{}, false
	}
	done := len(r.ToolResultsSinceUser())
	for _, step := range steps {
		if done < len(step) {
			return opencodetest.Reply{ToolCalls: step}, true
		}
		done -= len(step)
	}
	return opencodetest.Text("done"), true
}

// runPlan prompts session id with steps and returns the state of each tool part by call id,
// failing the test unless every call but grep and glob (which need ripgrep) completed.
func runPlan(t *testing.T, ctx context.Context, c *opencode.HTTPClient, id string, steps [][]opencodetest.ToolCall) map[string]opencode.ToolState {
	t.Helper()
	plan, _ := json.Marshal(steps)
	if _, err := c.Prompt(ctx, id, opencode.PromptRequest{Parts: []opencode.TextPartInput{opencode.NewText("PLAN:" + string(plan))}}); err != nil {
		t.Fatal(err)
	}
	msgs, err := c.Messages(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]opencode.ToolState{}
	for _, m := range msgs {
		for _, p := range m.Parts {
			if p.Type == opencode.PartTool {
				states[p.CallID] = *p.State
			}
		}
	}
	for _, step := range steps {
		for _, tc := range step {
			if st := states[tc.ID]; st.Status != opencode.ToolCompleted && !(tc.Name == "grep" || tc.Name == "glob") {
				t.Errorf("%s %s: %s %q", tc.Name, tc.Arguments, st.Status, st.Error)
			}
		}
	}
	return states
}

// call returns a tool call with id and the arguments kv (name, value, …).
func call(id, tool string, kv ...string) opencodetest.ToolCall {
	args := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		args[kv[i]] = kv[i+1]
	}
	b, _ := json.Marshal(args)
	return opencodetest.ToolCall{ID: id, Name: tool, Arguments: string(b)}
}

// absPaths returns the absolute paths in a grep or glob output (a trailing colon removed).
func absPaths(out string) []string {
	var paths []string
	for _, f := range strings.Fields(out) {
		if strings.HasPrefix(f, "/") {
			paths = append(paths, strings.TrimSuffix(f, ":"))
		}
	}
	return paths
}

// tree returns the files below dir, .git left out, by slash path.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && d.Name() == ".git":
			return filepath.SkipDir
		case d.IsDir():
			return nil
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		files[filepath.ToSlash(rel)] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// git runs the real git with a HOME of its own and no system config, and returns its output.
func git(t *testing.T, home string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_OPTIONAL_LOCKS=0", "HOME="+home, "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}
