package worktree_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/worktree"
)

func TestMain(m *testing.M) { testmain.Run(m, removeTemplates) }

// gitEnv is the environment the tests' own git commands run with: none of the user's or
// the system's configuration, a fixed author.
func gitEnv() []string {
	env := []string{"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "LC_ALL=C", "GIT_OPTIONAL_LOCKS=0",
		"GIT_CONFIG_COUNT=2", "GIT_CONFIG_KEY_0=gc.auto", "GIT_CONFIG_VALUE_0=0", // no gc in the background
		"GIT_CONFIG_KEY_1=maintenance.auto", "GIT_CONFIG_VALUE_1=false",
		"GIT_AUTHOR_NAME=Parent", "GIT_AUTHOR_EMAIL=parent@example.com",
		"GIT_COMMITTER_NAME=Parent", "GIT_COMMITTER_EMAIL=parent@example.com"}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GIT_") && !strings.HasPrefix(kv, "LC_ALL=") {
			env = append(env, kv)
		}
	}
	return env
}

// git runs git args in dir as the user would, and returns its output; it fails tb on an
// error.
func git(tb testing.TB, dir string, args ...string) string {
	tb.Helper()
	out, err := gitErr(dir, args...)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// gitErr is git that returns the error.
func gitErr(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir, cmd.Env = dir, gitEnv()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

// write writes files (path → content) under dir, making folders.
func write(tb testing.TB, dir string, files map[string]string) {
	tb.Helper()
	for name, content := range files {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
}

// read is the content of dir/name; "<missing>" when there is no such file.
func read(tb testing.TB, dir, name string) string {
	tb.Helper()
	data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
	if os.IsNotExist(err) {
		return "<missing>"
	}
	if err != nil {
		tb.Fatal(err)
	}
	return string(data)
}

// newParent makes a repository in a temporary folder with files committed on main, and
// returns its directory.
func newParent(tb testing.TB, files map[string]string) string {
	tb.Helper()
	dir := filepath.Join(tb.TempDir(), "parent")
	if err := os.Mkdir(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	git(tb, dir, "init", "--quiet", "--initial-branch=main")
	write(tb, dir, files)
	git(tb, dir, "add", "--all")
	git(tb, dir, "commit", "--quiet", "--message=initial")
	return dir
}

// open opens the Repo of dir with its worktrees in a new temporary folder.
func open(tb testing.TB, dir string, opts ...worktree.Option) *worktree.Repo {
	tb.Helper()
	r, err := worktree.Open(context.Background(), dir, filepath.Join(tb.TempDir(), "worktrees"), opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

// state is a checkout as the user would see it, byte for byte: every file of the working
// tree (content and mode; symlinks by target), the index file, HEAD and the refs of the
// branches, tags and stash. Task branches and base refs are left out (they are the
// package's), and so are the objects.
func state(tb testing.TB, dir string) map[string]string {
	tb.Helper()
	st := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.IsDir() {
			if rel == ".git" {
				return fs.SkipDir
			}
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		var data []byte
		if d.Type()&fs.ModeSymlink != 0 {
			target, err := os.Readlink(path)
			data = []byte(target)
			if err != nil {
				return err
			}
		} else if data, err = os.ReadFile(path); err != nil {
			return err
		}
		st[filepath.ToSlash(rel)] = fmt.Sprintf("%v %s", info.Mode(), data)
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	gitDir := strings.TrimSpace(git(tb, dir, "rev-parse", "--absolute-git-dir"))
	for _, name := range []string{"index", "HEAD", "MERGE_HEAD", "ORIG_HEAD"} {
		data, err := os.ReadFile(filepath.Join(gitDir, name))
		if err == nil {
			sum := sha256.Sum256(data)
			st[".git/"+name] = hex.EncodeToString(sum[:])
		}
	}
	st["refs"] = git(tb, dir, "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads/main", "refs/tags", "refs/stash")
	st["status"] = git(tb, dir, "status", "--porcelain=v1", "--untracked-files=all", "--ignored")
	return st
}

// unchanged fails tb when dir's state differs from before.
func unchanged(tb testing.TB, dir string, before map[string]string) {
	tb.Helper()
	if diff := cmp.Diff(before, state(tb, dir)); diff != "" {
		tb.Errorf("the parent's checkout changed (-before +after):\n%s", diff)
	}
}
