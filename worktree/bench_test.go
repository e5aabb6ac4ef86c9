package worktree_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents/worktree"
)

// Targets of issue 32: isolating a repository of 10,000 files costs at most about a second
// (Start); the change summary of a task that changed 1,000 files (Commit, which commits and
// summarises) and the merge of a 100-file branch take under a second each.
//
//	go test -run '^$' -bench . -benchtime 1x -count 2 ./worktree/
//
// 2026-11-27, a 2-vCPU Firecracker VM (AMD EPYC, git 2.39.5, go 1.26), load average 6 to 9
// from other test runs; seconds per operation, the range of the runs:
//
//	                         tmpfs (TMPDIR=/dev/shm)   ext4 on the VM's disk (/tmp)
//	Start, 10,000 files      0.58–0.67                 1.3–6.3
//	  git worktree add alone 0.40–0.48                 3.5–6.5
//	Commit, 1,000 files      0.62–1.14                 0.43–0.78
//	Change + a Diff page     0.16–0.21                 0.09–0.14
//	Merge, 100 files         0.28–1.10                 0.20–0.21
//
// Start is the snapshot (about 0.2 s) plus git's own checkout of the worktree; on that disk
// the checkout of 10,000 files alone takes seconds.

// templates holds the repositories of n committed files that bigParent clones, made once
// per test binary and removed by TestMain.
var templates = map[int]string{}

func removeTemplates() {
	for _, dir := range templates {
		_ = os.RemoveAll(filepath.Dir(dir))
	}
}

// bigParent makes a repository of n committed files (100 per folder, about 300 bytes each,
// packed), edits 10 of them and adds 10 untracked files without committing, and returns its
// directory. The first call for n makes a template; the others clone it (objects are
// shared, files checked out).
func bigParent(b *testing.B, n int) string {
	b.Helper()
	template := templates[n]
	if template == "" {
		tmp, err := os.MkdirTemp("", "worktree-bench-")
		if err != nil {
			b.Fatal(err)
		}
		template = filepath.Join(tmp, "template")
		templates[n] = template
		git(b, tmp, "init", "--quiet", "--initial-branch=main", template)
		files := map[string]string{}
		for i := range n {
			files[name(i)] = content(i, "")
		}
		write(b, template, files)
		git(b, template, "add", "--all")
		git(b, template, "commit", "--quiet", "-m", "initial")
		git(b, template, "repack", "-adq")
		git(b, template, "prune-packed")
	}
	dir := filepath.Join(b.TempDir(), "parent")
	git(b, filepath.Dir(dir), "clone", "--quiet", "--local", template, dir)
	// A checkout's index is "racy" — its files are hashed again by every git that reads it —
	// until git writes it in a later second than the files (git compares times in whole
	// seconds); a user's checkout is long past that. git status writes it.
	time.Sleep(1100 * time.Millisecond)
	cmd := exec.Command("git", "status", "--porcelain")
	cmd.Dir, cmd.Env = dir, append(gitEnv(), "GIT_OPTIONAL_LOCKS=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("git status: %v: %s", err, out)
	}
	for i := range 10 {
		write(b, dir, map[string]string{name(i * 7): content(i*7, "parent"), fmt.Sprintf("untracked/u%d.txt", i): "new\n"})
	}
	return dir
}

func name(i int) string { return fmt.Sprintf("pkg%03d/file%05d.go", i/100, i) }

func content(i int, edit string) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "package pkg%03d\n\n// File %d.\n", i/100, i)
	for l := range 8 {
		fmt.Fprintf(&sb, "var v%d_%d = %q\n", i, l, edit)
	}
	return sb.String()
}

// BenchmarkStart isolates a task in a repository of 10,000 files with uncommitted changes:
// the snapshot and the checkout of the worktree.
func BenchmarkStart(b *testing.B) {
	dir := bigParent(b, 10_000)
	r := open(b, dir)
	i := 0
	for b.Loop() {
		if _, err := r.Start(b.Context(), fmt.Sprintf("ses_%d", i)); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(10_000, "files")
}

// BenchmarkWorktreeAdd is what git alone takes to check out the same 10,000 files in a new
// worktree (with the malloc settings the package gives git): the floor under
// BenchmarkStart, which adds the snapshot and its checks.
func BenchmarkWorktreeAdd(b *testing.B) {
	dir := bigParent(b, 10_000)
	root := b.TempDir()
	i := 0
	for b.Loop() {
		cmd := exec.Command("git", "worktree", "add", "--quiet", "-b", fmt.Sprintf("plain/%d", i), filepath.Join(root, fmt.Sprint(i)), "HEAD")
		cmd.Dir, cmd.Env = dir, append(gitEnv(), "MALLOC_TRIM_THRESHOLD_=268435456", "MALLOC_TOP_PAD_=67108864")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("git worktree add: %v: %s", err, out)
		}
		i++
	}
}

// BenchmarkCommit commits and summarises a task that changed 1,000 files of a repository
// of 10,000 (one line each; 100 of them new files).
func BenchmarkCommit(b *testing.B) {
	r := open(b, bigParent(b, 10_000))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		id := task(b, r, i, 900, 100, false)
		b.StartTimer()
		c, err := r.Commit(b.Context(), id, "")
		if err != nil || len(c.Files) != 1000 {
			b.Fatalf("Commit: %d files changed, %v; want 1000", len(c.Files), err)
		}
	}
	b.ReportMetric(1000, "files")
}

// BenchmarkChange summarises a committed task of 1,000 changed files, and reads the first
// page of its diff.
func BenchmarkChange(b *testing.B) {
	r := open(b, bigParent(b, 10_000))
	id := task(b, r, 0, 900, 100, true)
	for b.Loop() {
		c, err := r.Change(b.Context(), id)
		if err != nil || len(c.Files) != 1000 {
			b.Fatalf("Change: %d files, %v", len(c.Files), err)
		}
		if _, err := r.Diff(b.Context(), id, 0, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMerge merges a task's branch of 100 changed files into a parent of 10,000 files
// with uncommitted changes of its own.
func BenchmarkMerge(b *testing.B) {
	r := open(b, bigParent(b, 10_000))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		id := task(b, r, i, 100, 0, true)
		b.StartTimer()
		m, err := r.Merge(b.Context(), id)
		if err != nil || len(m.Files) != 100 {
			b.Fatalf("Merge: %d files merged, %v; want 100", len(m.Files), err)
		}
	}
	b.ReportMetric(100, "files")
}

// task starts task ses_<i>, changes files 1000, 1001, … of its bigParent checkout (changed
// of them) and adds new files, commits them when commit is set, and returns the id.
func task(b *testing.B, r *worktree.Repo, i, changed, added int, commit bool) string {
	b.Helper()
	id := fmt.Sprintf("ses_%d", i)
	t, err := r.Start(b.Context(), id)
	if err != nil {
		b.Fatal(err)
	}
	files := map[string]string{}
	for i := range changed {
		files[name(1000+i)] = content(1000+i, "task "+id) // each task's edit differs from the last
	}
	for i := range added {
		files[fmt.Sprintf("added/new%04d.go", i)] = "package added\n"
	}
	write(b, t.Dir, files)
	if commit {
		if _, err := r.Commit(b.Context(), id, ""); err != nil {
			b.Fatal(err)
		}
	}
	return id
}
