package worktree_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/asyncagents/asyncagents/worktree"
)

// project makes a git repository in a new temporary folder, with greeting.txt committed
// and then edited (not committed), and returns the folder.
func project() string {
	dir, err := os.MkdirTemp("", "project-")
	if err != nil {
		log.Fatal(err)
	}
	run := func(args ...string) {
		cmd := exec.Command("git", args...)
		cmd.Dir, cmd.Env = dir, gitEnv()
		if out, err := cmd.CombinedOutput(); err != nil {
			log.Fatalf("git %v: %v: %s", args, err, out)
		}
	}
	run("init", "--quiet")
	_ = os.WriteFile(filepath.Join(dir, "greeting.txt"), []byte("hello\nworld\n"), 0o644)
	run("add", "greeting.txt")
	run("commit", "--quiet", "-m", "initial")
	_ = os.WriteFile(filepath.Join(dir, "greeting.txt"), []byte("hello\nworld\nfrom the parent\n"), 0o644)
	return dir
}

// A task works in its own worktree, from the parent's uncommitted state; its work is
// committed on its branch when it ends, and merged into the parent's working tree on request.
func Example() {
	ctx := context.Background()
	dir := project()
	defer os.RemoveAll(dir)
	repo, err := worktree.Open(ctx, dir, filepath.Join(dir, ".git", "asyncagents"))
	if err != nil {
		log.Fatal(err)
	}

	task, err := repo.Start(ctx, "ses_1")
	if err != nil {
		log.Fatal(err)
	}
	// The task's session runs in task.Dir; here it edits a file there.
	_ = os.WriteFile(filepath.Join(task.Dir, "greeting.txt"), []byte("HELLO\nworld\nfrom the parent\n"), 0o644)

	change, err := repo.Commit(ctx, task.ID, "the task's work")
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range change.Files {
		fmt.Printf("%s changed %s: +%d -%d\n", task.Branch, f.Path, f.Added, f.Deleted)
	}

	if _, err := repo.Merge(ctx, task.ID); err != nil {
		log.Fatal(err)
	}
	data, _ := os.ReadFile(filepath.Join(dir, "greeting.txt"))
	fmt.Printf("the parent's greeting.txt:\n%s", data)
	if err := repo.Discard(ctx, task.ID, false); err != nil {
		log.Fatal(err)
	}
	// Output:
	// asyncagents/ses_1 changed greeting.txt: +1 -1
	// the parent's greeting.txt:
	// HELLO
	// world
	// from the parent
}

// Two tasks change the same line: the first merge applies, the second returns the
// conflict, and the parent's files stay as the first merge left them.
func ExampleConflictError() {
	ctx := context.Background()
	dir := project()
	defer os.RemoveAll(dir)
	repo, err := worktree.Open(ctx, dir, filepath.Join(dir, ".git", "asyncagents"))
	if err != nil {
		log.Fatal(err)
	}
	for _, id := range []string{"ses_a", "ses_b"} {
		task, err := repo.Start(ctx, id)
		if err != nil {
			log.Fatal(err)
		}
		_ = os.WriteFile(filepath.Join(task.Dir, "greeting.txt"), []byte("hello\n"+id+"\nfrom the parent\n"), 0o644)
		if _, err := repo.Commit(ctx, id, ""); err != nil {
			log.Fatal(err)
		}
	}
	ov, _ := repo.Overlaps(ctx, "ses_a", "ses_b")
	fmt.Println("both changed:", ov.Tasks)

	if _, err := repo.Merge(ctx, "ses_a"); err != nil {
		log.Fatal(err)
	}
	_, err = repo.Merge(ctx, "ses_b")
	var conflict *worktree.ConflictError
	if errors.As(err, &conflict) {
		for _, c := range conflict.Conflicts {
			for _, h := range c.Hunks {
				fmt.Printf("%s line %d: parent %q, base %q, task %q\n", c.Path, h.Line, h.Parent, h.Base, h.Task)
			}
		}
	}
	// Output:
	// both changed: [{greeting.txt [ses_a ses_b]}]
	// greeting.txt line 2: parent "ses_a\n", base "world\n", task "ses_b\n"
}
