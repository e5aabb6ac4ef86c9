package worktree_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/asyncagents/asyncagents/worktree"
)

// The user's configuration cannot change what git does for the package — no hooks (global
// or the repository's), no signing, no prefix-less diffs, no other conflict style — and git
// variables in the environment do not point it elsewhere; only the user's ignore rules are
// carried, so the snapshot takes what the user's git would.
func TestUserConfigurationIgnored(t *testing.T) {
	home := t.TempDir()
	marker := filepath.Join(home, "hook-ran")
	hooks := filepath.Join(home, "hooks")
	hook := "#!/bin/sh\necho ran >> " + marker + "\nexit 1\n"
	for _, name := range []string{"post-checkout", "pre-commit", "post-commit", "reference-transaction", "post-index-change"} {
		write(t, hooks, map[string]string{name: hook})
		if err := os.Chmod(filepath.Join(hooks, name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, home, map[string]string{
		".gitconfig": "[core]\n\thooksPath = " + hooks + "\n\texcludesFile = ~/global-ignore\n" +
			"[commit]\n\tgpgSign = true\n[gpg]\n\tprogram = false\n[merge]\n\tconflictStyle = merge\n" +
			"[diff]\n\tnoprefix = true\n\texternal = false\n[color]\n\tui = always\n[gc]\n\tauto = 1\n",
		"global-ignore": "secret.env\n",
	})
	dir := newParent(t, map[string]string{"a.txt": "a\n", "b.txt": "1\n2\n3\n"})
	local := filepath.Join(dir, ".git", "hooks")
	write(t, local, map[string]string{"post-checkout": hook})
	if err := os.Chmod(filepath.Join(local, "post-checkout"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, dir, map[string]string{"secret.env": "TOKEN=1\n", "a.txt": "edited\n"})

	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, ".config"))
	t.Setenv("GIT_DIR", filepath.Join(home, "elsewhere"))
	t.Setenv("GIT_INDEX_FILE", filepath.Join(home, "index"))
	t.Setenv("GIT_WORK_TREE", home)
	ctx := t.Context()
	r := open(t, dir)
	before := state(t, dir)
	task, err := r.Start(ctx, "ses_1")
	if err != nil {
		t.Fatal(err)
	}
	unchanged(t, dir, before)
	if got := read(t, task.Dir, "secret.env"); got != "<missing>" {
		t.Errorf("the worktree has secret.env, which the user's global ignore file ignores")
	}
	if got := read(t, task.Dir, "a.txt"); got != "edited\n" {
		t.Errorf("the worktree's a.txt is %q", got)
	}
	write(t, task.Dir, map[string]string{"b.txt": "1\nTASK\n3\n"})
	if _, err := r.Commit(ctx, "ses_1", ""); err != nil {
		t.Fatal(err)
	}
	p, err := r.Diff(ctx, "ses_1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := "diff --git a/b.txt b/b.txt\n"; len(p.Text) < len(want) || p.Text[:len(want)] != want {
		t.Errorf("the diff starts %q, want %q", p.Text[:min(len(p.Text), 40)], want)
	}
	write(t, dir, map[string]string{"b.txt": "1\nPARENT\n3\n"})
	before = state(t, dir)
	_, err = r.Merge(ctx, "ses_1")
	var ce *worktree.ConflictError
	if !errors.As(err, &ce) || len(ce.Conflicts) != 1 || len(ce.Conflicts[0].Hunks) != 1 || ce.Conflicts[0].Hunks[0].Base != "2\n" {
		t.Fatalf("Merge: %v (%+v); want one hunk with the base's lines", err, ce)
	}
	unchanged(t, dir, before)
	if err := r.Discard(ctx, "ses_1", false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Errorf("a hook ran")
	}
	if _, err := os.Stat(filepath.Join(home, "elsewhere")); !os.IsNotExist(err) {
		t.Errorf("git wrote where GIT_DIR pointed")
	}
}
