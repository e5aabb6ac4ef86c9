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

// Issue 32: "Two tasks that touch the same file race each other and the parent's own edits,
// and nobody can tell afterwards which task changed what or undo one task's work." Two
// tasks edit the same file at once: the parent's checkout is untouched until a merge, each
// branch holds its own edit, the overlap is reported; the first merge applies, the second
// conflicts and leaves the parent byte for byte as it was.
func TestTwoTasksEditOneFile(t *testing.T) {
	ctx := t.Context()
	dir := newParent(t, map[string]string{"shared.go": "package p\n\nconst A = 1\n", "other.txt": "one\n"})
	write(t, dir, map[string]string{"notes.txt": "the parent's own uncommitted note\n"})
	r := open(t, dir)
	before := state(t, dir)

	var wg sync.WaitGroup
	changes := make([]worktree.Change, 2)
	errs := make([]error, 2)
	for i, id := range []string{"ses_a", "ses_b"} {
		wg.Go(func() {
			task, err := r.Start(ctx, id)
			if err != nil {
				errs[i] = err
				return
			}
			content := "package p\n\nconst A = " + map[string]string{"ses_a": "2", "ses_b": "3"}[id] + "\n"
			if err := os.WriteFile(filepath.Join(task.Dir, "shared.go"), []byte(content), 0o644); err != nil {
				errs[i] = err
				return
			}
			changes[i], errs[i] = r.Commit(ctx, id, "edit shared.go")
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	unchanged(t, dir, before)
	for i, want := range []string{"2", "3"} {
		c := changes[i]
		if diff := cmp.Diff([]worktree.FileStat{{Path: "shared.go", Added: 1, Deleted: 1}}, c.Files); diff != "" {
			t.Errorf("task %s changed (-want +got):\n%s", c.Task, diff)
		}
		if len(c.Commits) != 1 {
			t.Errorf("task %s: %d commits, want 1", c.Task, len(c.Commits))
		}
		if got := git(t, dir, "show", c.Branch+":shared.go"); !strings.Contains(got, "const A = "+want) {
			t.Errorf("branch %s holds %q, want A = %s", c.Branch, got, want)
		}
	}

	ov, err := r.Overlaps(ctx, "ses_a", "ses_b")
	if err != nil {
		t.Fatal(err)
	}
	want := worktree.Overlaps{Tasks: []worktree.Shared{{Path: "shared.go", Tasks: []string{"ses_a", "ses_b"}}}}
	if diff := cmp.Diff(want, ov); diff != "" {
		t.Errorf("overlaps (-want +got):\n%s", diff)
	}

	m, err := r.Merge(ctx, "ses_a")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]worktree.FileStat{{Path: "shared.go", Added: 1, Deleted: 1}}, m.Files); diff != "" {
		t.Errorf("merge of ses_a changed (-want +got):\n%s", diff)
	}
	if got := read(t, dir, "shared.go"); got != "package p\n\nconst A = 2\n" {
		t.Errorf("after merging ses_a shared.go is %q", got)
	}
	if got := read(t, dir, "notes.txt"); got != "the parent's own uncommitted note\n" {
		t.Errorf("the parent's own edit is now %q", got)
	}
	if got := git(t, dir, "rev-parse", "HEAD"); got != before["refs"][len("refs/heads/main "):] {
		t.Errorf("HEAD moved to %s: Merge committed", got)
	}

	afterFirst := state(t, dir)
	_, err = r.Merge(ctx, "ses_b")
	var ce *worktree.ConflictError
	if !errors.As(err, &ce) || !errors.Is(err, worktree.ErrConflict) {
		t.Fatalf("second merge: %v, want a *ConflictError", err)
	}
	unchanged(t, dir, afterFirst)
	wantConflict := []worktree.Conflict{{
		Path:     "shared.go",
		Kinds:    []string{"contents"},
		Messages: []string{"CONFLICT (content): Merge conflict in shared.go"},
		Hunks:    []worktree.Hunk{{Line: 3, Parent: "const A = 2\n", Base: "const A = 1\n", Task: "const A = 3\n"}},
	}}
	if diff := cmp.Diff(wantConflict, ce.Conflicts); diff != "" {
		t.Errorf("conflicts (-want +got):\n%s", diff)
	}
}

// The child sees what the parent sees: HEAD plus its uncommitted changes, staged or not,
// tracked and untracked — but not ignored files; the parent's checkout, index and stash
// stay as they were.
func TestStartSeesUncommittedChanges(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := newParent(t, map[string]string{
		".gitignore": "*.log\n", "edited.txt": "old\n", "staged.txt": "old\n", "deleted.txt": "x\n", "kept.txt": "same\n",
	})
	write(t, dir, map[string]string{"staged.txt": "staged\n"})
	git(t, dir, "add", "staged.txt")
	write(t, dir, map[string]string{"edited.txt": "edited, not staged\n", "new/untracked.txt": "untracked\n", "build.log": "ignored\n"})
	if err := os.Remove(filepath.Join(dir, "deleted.txt")); err != nil {
		t.Fatal(err)
	}
	head := strings.TrimSpace(git(t, dir, "rev-parse", "HEAD"))
	before := state(t, dir)

	r := open(t, dir)
	task, err := r.Start(ctx, "ses_1")
	if err != nil {
		t.Fatal(err)
	}
	unchanged(t, dir, before)
	for name, want := range map[string]string{
		"edited.txt": "edited, not staged\n", "staged.txt": "staged\n", "new/untracked.txt": "untracked\n",
		"kept.txt": "same\n", "deleted.txt": "<missing>", "build.log": "<missing>",
	} {
		if got := read(t, task.Dir, name); got != want {
			t.Errorf("the worktree's %s is %q, want %q", name, got, want)
		}
	}
	if got := strings.TrimSpace(git(t, dir, "rev-parse", task.Base+"^")); got != head {
		t.Errorf("the base's parent is %s, want HEAD %s", got, head)
	}
	if got := git(t, task.Dir, "status", "--porcelain"); got != "" {
		t.Errorf("the new worktree is not clean:\n%s", got)
	}
	if got := strings.TrimSpace(git(t, task.Dir, "symbolic-ref", "HEAD")); got != "refs/heads/asyncagents/ses_1" {
		t.Errorf("the worktree is on %s", got)
	}
	if task.Dir != filepath.Join(r.Root(), "ses_1") || task.Branch != "asyncagents/ses_1" || task.ID != "ses_1" {
		t.Errorf("task = %+v", task)
	}
	got, err := r.Task(ctx, "ses_1")
	if err != nil || got != task {
		t.Errorf("Task = %+v, %v; want %+v", got, err, task)
	}
}

// A parent with no uncommitted change starts its tasks from HEAD itself, detached or not.
func TestStartFromCleanHead(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := newParent(t, map[string]string{"a.txt": "a\n"})
	head := strings.TrimSpace(git(t, dir, "rev-parse", "HEAD"))
	r := open(t, dir)
	task, err := r.Start(ctx, "ses_1")
	if err != nil || task.Base != head {
		t.Fatalf("Start = %+v, %v; want base %s", task, err, head)
	}
	git(t, dir, "checkout", "--quiet", "--detach")
	task, err = r.Start(ctx, "ses_2")
	if err != nil || task.Base != head {
		t.Fatalf("Start on a detached HEAD = %+v, %v; want base %s", task, err, head)
	}
}

// A merge is three-way against the task's base: the parent's later edits — committed, in
// the working tree, staged — are kept next to the task's, the index and HEAD stay, new
// files are untracked and deleted ones are gone from the working tree only.
func TestMergeKeepsParentEdits(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := newParent(t, map[string]string{"doc.txt": "1\n2\n3\n4\n5\n6\n7\n8\n", "gone.txt": "x\n", "staged.txt": "a\n"})
	r := open(t, dir)
	task, err := r.Start(ctx, "ses_1")
	if err != nil {
		t.Fatal(err)
	}
	write(t, task.Dir, map[string]string{"doc.txt": "1\n2\n3\n4\n5\n6\n7\nEIGHT\n", "added.txt": "new\n"})
	if err := os.Remove(filepath.Join(task.Dir, "gone.txt")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Commit(ctx, "ses_1", ""); err != nil {
		t.Fatal(err)
	}
	// The parent goes on: a commit, an uncommitted edit of the same file, a staged file.
	write(t, dir, map[string]string{"doc.txt": "ONE\n2\n3\n4\n5\n6\n7\n8\n"})
	git(t, dir, "commit", "--quiet", "-am", "parent's commit")
	write(t, dir, map[string]string{"doc.txt": "ONE\n2\n3\nFOUR\n5\n6\n7\n8\n", "staged.txt": "b\n"})
	git(t, dir, "add", "staged.txt")
	index := state(t, dir)[".git/index"]
	head := git(t, dir, "rev-parse", "HEAD")

	m, err := r.Merge(ctx, "ses_1")
	if err != nil {
		t.Fatal(err)
	}
	want := []worktree.FileStat{{Path: "added.txt", Added: 1}, {Path: "doc.txt", Added: 1, Deleted: 1}, {Path: "gone.txt", Deleted: 1}}
	if diff := cmp.Diff(want, m.Files); diff != "" {
		t.Errorf("merge changed (-want +got):\n%s", diff)
	}
	for name, want := range map[string]string{
		"doc.txt": "ONE\n2\n3\nFOUR\n5\n6\n7\nEIGHT\n", "added.txt": "new\n", "gone.txt": "<missing>", "staged.txt": "b\n",
	} {
		if got := read(t, dir, name); got != want {
			t.Errorf("after the merge %s is %q, want %q", name, got, want)
		}
	}
	st := state(t, dir)
	if st[".git/index"] != index || git(t, dir, "rev-parse", "HEAD") != head {
		t.Error("the merge changed the parent's index or HEAD")
	}
	wantStatus := " M doc.txt\n D gone.txt\nM  staged.txt\n?? added.txt\n"
	if got := git(t, dir, "status", "--porcelain"); got != wantStatus {
		t.Errorf("git status after the merge:\n%s\nwant:\n%s", got, wantStatus)
	}
	// Merging again applies nothing new: the parent's tree already holds the task's changes.
	if m, err := r.Merge(ctx, "ses_1"); err != nil || len(m.Files) != 0 {
		t.Errorf("second merge = %+v, %v; want nothing applied", m, err)
	}
}

// A conflict without text (the task deleted a file the parent edited) is listed without
// hunks, and changes nothing.
func TestMergeModifyDeleteConflict(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := newParent(t, map[string]string{"a.txt": "a\n", "b.txt": "b\n"})
	r := open(t, dir)
	task, err := r.Start(ctx, "ses_1")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(task.Dir, "a.txt")); err != nil {
		t.Fatal(err)
	}
	write(t, task.Dir, map[string]string{"b.txt": "task's b\n"})
	if _, err := r.Commit(ctx, "ses_1", ""); err != nil {
		t.Fatal(err)
	}
	write(t, dir, map[string]string{"a.txt": "parent's a\n"})
	before := state(t, dir)
	_, err = r.Merge(ctx, "ses_1")
	var ce *worktree.ConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("Merge: %v, want a *ConflictError", err)
	}
	unchanged(t, dir, before)
	if len(ce.Conflicts) != 1 || ce.Conflicts[0].Path != "a.txt" || !cmp.Equal(ce.Conflicts[0].Kinds, []string{"modify/delete"}) || len(ce.Conflicts[0].Hunks) != 0 {
		t.Errorf("conflicts = %+v", ce.Conflicts)
	}
	if !strings.Contains(err.Error(), "a.txt") {
		t.Errorf("error %q does not name a.txt", err)
	}
}

// Overlaps with the parent: files the parent changed since a task's base (committed or not)
// that the task changed too; a task's uncommitted changes count.
func TestOverlapsWithParent(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := newParent(t, map[string]string{"a.txt": "a\n", "b.txt": "b\n", "c.txt": "c\n"})
	r := open(t, dir)
	one, err := r.Start(ctx, "ses_1")
	if err != nil {
		t.Fatal(err)
	}
	two, err := r.Start(ctx, "ses_2")
	if err != nil {
		t.Fatal(err)
	}
	write(t, one.Dir, map[string]string{"a.txt": "1\n", "b.txt": "1\n"}) // not committed
	write(t, two.Dir, map[string]string{"c.txt": "2\n", "new.txt": "2\n"})
	if _, err := r.Commit(ctx, "ses_2", ""); err != nil {
		t.Fatal(err)
	}
	write(t, dir, map[string]string{"b.txt": "parent\n"})
	git(t, dir, "commit", "--quiet", "-am", "b")
	write(t, dir, map[string]string{"c.txt": "parent\n", "d.txt": "parent\n"})
	before := state(t, dir)
	worktreeIndex := state(t, one.Dir)[".git/index"]

	ov, err := r.Overlaps(ctx, "ses_1", "ses_2")
	if err != nil {
		t.Fatal(err)
	}
	unchanged(t, dir, before)
	if state(t, one.Dir)[".git/index"] != worktreeIndex {
		t.Error("Overlaps changed a task's index")
	}
	want := worktree.Overlaps{Parent: []worktree.Shared{{Path: "b.txt", Tasks: []string{"ses_1"}}, {Path: "c.txt", Tasks: []string{"ses_2"}}}}
	if diff := cmp.Diff(want, ov); diff != "" {
		t.Errorf("overlaps (-want +got):\n%s", diff)
	}
	if _, err := r.Overlaps(ctx, "ses_1", "ses_9"); !errors.Is(err, worktree.ErrNoTask) {
		t.Errorf("Overlaps of an unknown task: %v, want ErrNoTask", err)
	}
}

// Commit: no commit when nothing changed; the task's own commits are kept and listed with
// the final one; untracked files are taken, ignored ones are not.
func TestCommit(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := newParent(t, map[string]string{".gitignore": "out/\n", "a.txt": "a\n"})
	r := open(t, dir)
	task, err := r.Start(ctx, "ses_1")
	if err != nil {
		t.Fatal(err)
	}
	c, err := r.Commit(ctx, "ses_1", "")
	if err != nil || len(c.Commits) != 0 || len(c.Files) != 0 || c.Head != task.Base {
		t.Fatalf("Commit of an unchanged worktree = %+v, %v; want no commit", c, err)
	}
	write(t, task.Dir, map[string]string{"a.txt": "a\nb\n"})
	git(t, task.Dir, "commit", "--quiet", "-am", "the agent's own commit")
	write(t, task.Dir, map[string]string{"new.txt": "1\n2\n3\n", "out/bin": "ignored\n", "img.bin": "\x00\x01\x02"})
	c, err = r.Commit(ctx, "ses_1", "the rest")
	if err != nil {
		t.Fatal(err)
	}
	want := worktree.Change{
		Task: "ses_1", Branch: "asyncagents/ses_1", Base: task.Base, Head: c.Head, Commits: c.Commits,
		Files: []worktree.FileStat{{Path: "a.txt", Added: 1}, {Path: "img.bin", Binary: true}, {Path: "new.txt", Added: 3}},
		Added: 4,
	}
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("change (-want +got):\n%s", diff)
	}
	if len(c.Commits) != 2 || c.Commits[1] != c.Head {
		t.Errorf("commits = %v, want 2 ending at %s", c.Commits, c.Head)
	}
	if msg := git(t, dir, "log", "-1", "--format=%an <%ae> %s", c.Head); msg != "asyncagents <asyncagents@localhost> the rest\n" {
		t.Errorf("the commit reads %q", msg)
	}
	if got := git(t, task.Dir, "status", "--porcelain"); got != "" {
		t.Errorf("the worktree is not clean after Commit:\n%s", got)
	}
	same, err := r.Change(ctx, "ses_1")
	if err != nil || !cmp.Equal(same, c) {
		t.Errorf("Change = %+v, %v; want %+v", same, err, c)
	}
}

// A worktree that left its branch cannot be committed, and a branch that no longer
// descends from its base cannot be merged.
func TestBranchMoved(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := newParent(t, map[string]string{"a.txt": "a\n"})
	r := open(t, dir)
	task, err := r.Start(ctx, "ses_1")
	if err != nil {
		t.Fatal(err)
	}
	git(t, task.Dir, "checkout", "--quiet", "--detach")
	if _, err := r.Commit(ctx, "ses_1", ""); !errors.Is(err, worktree.ErrBranchMoved) {
		t.Errorf("Commit on a detached worktree: %v, want ErrBranchMoved", err)
	}
	git(t, task.Dir, "checkout", "--quiet", task.Branch)
	git(t, task.Dir, "checkout", "--quiet", "--orphan", "other")
	git(t, task.Dir, "commit", "--quiet", "-m", "unrelated")
	git(t, task.Dir, "branch", "--quiet", "--force", task.Branch, "other")
	before := state(t, dir)
	if _, err := r.Merge(ctx, "ses_1"); !errors.Is(err, worktree.ErrBranchMoved) {
		t.Errorf("Merge of a rewritten branch: %v, want ErrBranchMoved", err)
	}
	unchanged(t, dir, before)
}

// Diff pages join up to the whole diff; each is within the limit and ends at a line's end.
func TestDiffPages(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	files := map[string]string{}
	for i := range 20 {
		files["f"+string(rune('a'+i))+".txt"] = strings.Repeat("line\n", 30)
	}
	dir := newParent(t, files)
	r := open(t, dir)
	task, err := r.Start(ctx, "ses_1")
	if err != nil {
		t.Fatal(err)
	}
	for name := range files {
		write(t, task.Dir, map[string]string{name: strings.Repeat("changed line ✓\n", 30)})
	}
	c, err := r.Commit(ctx, "ses_1", "")
	if err != nil {
		t.Fatal(err)
	}
	whole := git(t, dir, "diff", task.Base, c.Head)
	var got strings.Builder
	pages := 0
	for off, more := 0, true; more; pages++ {
		p, err := r.Diff(ctx, "ses_1", off, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Text) > 1000 || p.Offset != off || p.Next != off+len(p.Text) || p.Head != c.Head || p.Base != task.Base {
			t.Fatalf("page at %d: %d bytes, offset %d, next %d, head %s", off, len(p.Text), p.Offset, p.Next, p.Head)
		}
		if p.More && !strings.HasSuffix(p.Text, "\n") {
			t.Fatalf("page at %d does not end at a line's end: %q", off, p.Text[len(p.Text)-20:])
		}
		got.WriteString(p.Text)
		off, more = p.Next, p.More
	}
	if got.String() != whole {
		t.Errorf("the pages (%d) do not join up to git diff (%d bytes, got %d)", pages, len(whole), got.Len())
	}
	if p, err := r.Diff(ctx, "ses_1", len(whole)+10, 0); err != nil || p.Text != "" || p.More {
		t.Errorf("a page past the end = %+v, %v", p, err)
	}
	if _, err := r.Diff(ctx, "ses_1", -1, 0); !errors.Is(err, worktree.ErrInvalidInput) {
		t.Errorf("a negative offset: %v, want ErrInvalidInput", err)
	}
	// A line longer than the page is cut before a UTF-8 sequence it would split.
	long := strings.Repeat("✓", 2000)
	write(t, task.Dir, map[string]string{"fa.txt": long})
	if _, err := r.Commit(ctx, "ses_1", ""); err != nil {
		t.Fatal(err)
	}
	for off, more := 0, true; more; {
		p, err := r.Diff(ctx, "ses_1", off, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(p.Text, "✓") && !strings.HasSuffix(p.Text, "\n") && !strings.HasSuffix(p.Text, "✓") {
			t.Fatalf("page at %d splits a character: ends %q", off, p.Text[len(p.Text)-4:])
		}
		off, more = p.Next, p.More
	}
}

// A merge that would overwrite a file the parent ignores — where the task adds that file,
// a folder over it, or a file over an ignored folder — is refused before anything is
// written; one that adds a file beside ignored ones is not.
func TestMergeRefusesToOverwriteIgnoredFiles(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		parent, task  map[string]string // ignored files of the parent; files the task adds
		want          error
		wantInMessage string
	}{
		{"the same file", map[string]string{"build.log": "parent\n"}, map[string]string{"build.log": "task\n"}, worktree.ErrWouldOverwrite, "build.log"},
		{"a folder over an ignored file", map[string]string{"out": "parent\n"}, map[string]string{"out/x.txt": "task\n"}, worktree.ErrWouldOverwrite, "out"},
		{"a file over an ignored folder", map[string]string{"cache/a": "parent\n"}, map[string]string{"cache": "task\n"}, worktree.ErrWouldOverwrite, "cache/"},
		{"a file beside ignored ones", map[string]string{"cache/a": "parent\n"}, map[string]string{"cache/b": "task\n"}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			dir := newParent(t, map[string]string{".gitignore": "build.log\nout\ncache\n", "a.txt": "a\n"})
			write(t, dir, tc.parent)
			r := open(t, dir)
			task, err := r.Start(ctx, "ses_1")
			if err != nil {
				t.Fatal(err)
			}
			write(t, task.Dir, tc.task)
			write(t, task.Dir, map[string]string{".gitignore": "", "a.txt": "task\n"})
			if _, err := r.Commit(ctx, "ses_1", ""); err != nil {
				t.Fatal(err)
			}
			before := state(t, dir)
			_, err = r.Merge(ctx, "ses_1")
			if !errors.Is(err, tc.want) || err != nil && !strings.Contains(err.Error(), tc.wantInMessage) {
				t.Fatalf("Merge: %v; want %v naming %s", err, tc.want, tc.wantInMessage)
			}
			if err != nil {
				unchanged(t, dir, before)
				return
			}
			for name, content := range tc.parent {
				if got := read(t, dir, name); got != content {
					t.Errorf("the parent's ignored %s is now %q", name, got)
				}
			}
		})
	}
}

// A conflict lists at most MaxHunks hunks and counts the rest; a side longer than
// MaxHunkBytes is cut at a line's end and the hunk marked.
func TestConflictBounds(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	n := worktree.MaxHunks + 5
	lines := func(side string) string {
		var sb strings.Builder
		for i := range n {
			fmt.Fprintf(&sb, "keep %d\nkeep %d'\nkeep %d''\n%s %d\n", i, i, i, side, i)
		}
		return sb.String()
	}
	dir := newParent(t, map[string]string{"big.txt": lines("base"), "long.txt": "short\n"})
	r := open(t, dir)
	task, err := r.Start(ctx, "ses_1")
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("a long line of the task\n", worktree.MaxHunkBytes/10)
	write(t, task.Dir, map[string]string{"big.txt": lines("task"), "long.txt": long})
	if _, err := r.Commit(ctx, "ses_1", ""); err != nil {
		t.Fatal(err)
	}
	write(t, dir, map[string]string{"big.txt": lines("parent"), "long.txt": "the parent's\n"})
	_, err = r.Merge(ctx, "ses_1")
	var ce *worktree.ConflictError
	if !errors.As(err, &ce) || len(ce.Conflicts) != 2 {
		t.Fatalf("Merge: %v, want conflicts in big.txt and long.txt", err)
	}
	big, lng := ce.Conflicts[0], ce.Conflicts[1]
	if len(big.Hunks) != worktree.MaxHunks || big.MoreHunks != 5 {
		t.Errorf("big.txt: %d hunks and %d more, want %d and 5", len(big.Hunks), big.MoreHunks, worktree.MaxHunks)
	}
	if h := big.Hunks[1]; h.Parent != "parent 1\n" || h.Base != "base 1\n" || h.Task != "task 1\n" || h.Cut {
		t.Errorf("big.txt's second hunk = %+v", h)
	}
	h := lng.Hunks[0]
	if !h.Cut || len(h.Task) > worktree.MaxHunkBytes || !strings.HasSuffix(h.Task, "\n") || h.Parent != "the parent's\n" {
		t.Errorf("long.txt's hunk: cut %v, task side %d bytes, parent %q", h.Cut, len(h.Task), h.Parent)
	}
}
