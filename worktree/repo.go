package worktree

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// DefaultRoot is where [Open] puts the task worktrees when it is given no root folder,
// relative to the repository's common git directory (.git of the main checkout).
const DefaultRoot = "asyncagents/worktrees"

// MaxIDLen is the longest task id a [Repo] takes.
const MaxIDLen = 128

// Repo is a parent's checkout — the working tree, its index and HEAD — whose tasks each work
// in a git worktree of their own, on a branch of their own, under a root folder. Make one
// with [Open]. A Repo is safe for concurrent use; see the package comment for what runs at
// once.
type Repo struct {
	git    *runner
	cfg    config
	top    string        // the parent's working tree (absolute)
	gitDir string        // the parent checkout's own git directory: HEAD, index, MERGE_HEAD
	common string        // the repository's common git directory: objects, refs, worktrees
	root   string        // where task worktrees are made: <root>/<id> (absolute)
	sem    chan struct{} // the repository's lock, shared by every Repo of the same common directory
}

// repoLocks holds one lock per repository (by its common git directory) for the whole
// process, so that two Repo values of one repository (two checkouts of it, or two Opens)
// never run git on it at once. Entries are never removed: one small channel per repository
// ever opened.
var repoLocks sync.Map // string → chan struct{}

// Open returns the Repo of the git working tree that holds dir (its top level: dir may be
// any folder inside it), with the task worktrees under root: task id works in
// <root>/<id>. root is made when the first task starts. It must not be inside the
// parent's working tree (git add -A would take the worktrees in), except inside its .git
// directory. An empty root is [DefaultRoot] of the repository: <common git dir>/asyncagents/worktrees,
// which goes with the repository, and which neither git status nor a search of the parent's
// files sees.
//
// Tasks belong to the repository, not to the checkout: a Repo of another checkout of the
// same repository — a linked worktree, or a task's worktree opened as the parent of nested
// tasks — sees the same tasks ([Repo.Tasks], [Repo.Sweep]). Open every checkout of one
// repository with the same root and options.
//
// Open returns [ErrGitMissing], [ErrGitVersion], [ErrNotRepository] (dir is in no
// repository, inside a .git directory, or in a bare repository) or [ErrInvalidOption]. It
// runs git six times and changes nothing.
func Open(ctx context.Context, dir, root string, opts ...Option) (*Repo, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o.apply(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("%w: %s is not a directory", ErrNotRepository, dir)
	}
	g, err := newRunner(ctx, cfg)
	if err != nil {
		return nil, err
	}
	inside, err := g.line(ctx, dir, "rev-parse", "--is-inside-work-tree")
	if ge := (*gitError)(nil); errors.As(err, &ge) && strings.Contains(ge.stderr, "not a git repository") {
		return nil, fmt.Errorf("%w: %s: %s", ErrNotRepository, dir, strings.TrimSpace(ge.stderr))
	}
	if err != nil {
		return nil, err
	}
	if inside != "true" {
		return nil, fmt.Errorf("%w: %s is inside a .git directory or a bare repository", ErrNotRepository, dir)
	}
	out, err := g.line(ctx, dir, "rev-parse", "--path-format=absolute", "--show-toplevel", "--git-dir", "--git-common-dir")
	if err != nil {
		return nil, err
	}
	paths := strings.Split(out, "\n")
	if len(paths) != 3 {
		return nil, fmt.Errorf("worktree: git rev-parse: unexpected output %q", out)
	}
	r := &Repo{git: g, cfg: cfg, top: paths[0], gitDir: paths[1], common: paths[2]}
	if err := g.carry(ctx, r.top, cfg); err != nil {
		return nil, err
	}
	for _, ref := range []string{r.branchRef("x"), r.baseRef("x")} {
		if _, err := g.run(ctx, r.top, nil, "check-ref-format", ref); err != nil {
			return nil, fmt.Errorf("%w: branch prefix %q makes the ref %s, which git refuses", ErrInvalidOption, cfg.prefix, ref)
		}
	}
	if r.root, err = r.checkRoot(root); err != nil {
		return nil, err
	}
	key := r.common
	if real, err := filepath.EvalSymlinks(key); err == nil {
		key = real
	}
	sem, _ := repoLocks.LoadOrStore(key, make(chan struct{}, 1))
	r.sem = sem.(chan struct{})
	return r, nil
}

// checkRoot returns root as an absolute path with its existing part's symlinks resolved,
// or ErrInvalidOption when it lies in the parent's working tree outside the .git directory.
func (r *Repo) checkRoot(root string) (string, error) {
	if root == "" {
		root = filepath.Join(r.common, DefaultRoot)
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return "", fmt.Errorf("%w: root %s: %v", ErrInvalidOption, root, err)
	}
	abs = resolve(abs)
	if within(abs, r.top) && !within(abs, resolve(r.common)) && !within(abs, resolve(r.gitDir)) {
		return "", fmt.Errorf("%w: root %s is inside the working tree %s (only its .git directory may hold the worktrees)", ErrInvalidOption, root, r.top)
	}
	if fi, err := os.Stat(abs); err == nil && !fi.IsDir() {
		return "", fmt.Errorf("%w: root %s is not a directory", ErrInvalidOption, root)
	}
	return abs, nil
}

// resolve is path with the symlinks of its longest existing prefix resolved.
func resolve(path string) string {
	rest := ""
	for p := path; ; {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(real, rest)
		}
		parent := filepath.Dir(p)
		if parent == p {
			return path
		}
		rest = filepath.Join(filepath.Base(p), rest)
		p = parent
	}
}

// within reports whether path is dir or inside it.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// Dir is the top level of the parent's working tree.
func (r *Repo) Dir() string { return r.top }

// Root is the folder the task worktrees are made in.
func (r *Repo) Root() string { return r.root }

// lock takes the repository's lock, waiting at most until ctx ends (then it returns the
// context's cause).
func (r *Repo) lock(ctx context.Context) (unlock func(), err error) {
	select {
	case r.sem <- struct{}{}:
		return func() { <-r.sem }, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// Task is a task's isolated checkout: a worktree on a branch of its own, started from a base
// commit.
type Task struct {
	// ID is the task's id, as given to [Repo.Start].
	ID string
	// Dir is the worktree's directory: <root>/<id>, absolute.
	Dir string
	// Branch is the task's branch, short: <prefix>/<id> (refs/heads/<prefix>/<id>).
	Branch string
	// Base is the commit the task started from (hexadecimal): the parent's HEAD when its
	// checkout had no uncommitted change, otherwise a snapshot commit whose parent is HEAD
	// and whose tree is the parent's working tree. It is held by the ref
	// refs/<prefix>/base/<id>, which marks the task as the package's.
	Base string
}

func (r *Repo) branch(id string) string    { return r.cfg.prefix + "/" + id }
func (r *Repo) branchRef(id string) string { return "refs/heads/" + r.branch(id) }
func (r *Repo) baseRef(id string) string   { return "refs/" + r.cfg.prefix + "/base/" + id }
func (r *Repo) dir(id string) string       { return filepath.Join(r.root, id) }

// checkID returns ErrInvalidInput unless id is 1 to MaxIDLen ASCII letters, digits, '_' or
// '-', starting with a letter or digit: a name that is the same as a folder, in a ref and
// on every file system.
func checkID(id string) error {
	if id == "" || len(id) > MaxIDLen {
		return fmt.Errorf("%w: a task id of %d bytes; it must have 1 to %d characters", ErrInvalidInput, len(id), MaxIDLen)
	}
	for i, c := range []byte(id) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || i > 0 && (c == '_' || c == '-')
		if !ok {
			return fmt.Errorf("%w: task id %q may hold only letters, digits, '_' and '-', and starts with a letter or digit", ErrInvalidInput, id)
		}
	}
	return nil
}

// Task returns the task of that id: [ErrNoTask] when none was started, or it was discarded.
// It runs git once and takes no lock.
func (r *Repo) Task(ctx context.Context, id string) (Task, error) {
	if err := checkID(id); err != nil {
		return Task{}, err
	}
	base, err := r.git.line(ctx, r.top, "rev-parse", "--verify", "--quiet", r.baseRef(id)+"^{commit}")
	if exitCode(err) == 1 {
		return Task{}, fmt.Errorf("%w: %s", ErrNoTask, id)
	}
	if err != nil {
		return Task{}, err
	}
	return Task{ID: id, Dir: r.dir(id), Branch: r.branch(id), Base: base}, nil
}

// Tasks returns the repository's tasks — those started and not discarded — sorted by id.
// It runs git once and takes no lock.
func (r *Repo) Tasks(ctx context.Context) ([]Task, error) {
	prefix := "refs/" + r.cfg.prefix + "/base/"
	out, err := r.git.run(ctx, r.top, nil, "for-each-ref", "--format=%(objectname) %(refname)", prefix)
	if err != nil {
		return nil, err
	}
	var tasks []Task
	for line := range strings.Lines(out) {
		base, ref, _ := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
		id := strings.TrimPrefix(ref, prefix)
		if checkID(id) == nil {
			tasks = append(tasks, Task{ID: id, Dir: r.dir(id), Branch: r.branch(id), Base: base})
		}
	}
	return tasks, nil
}

// worktree is one entry of git worktree list.
type worktree struct {
	path, head, branch string // branch is the full ref; empty when detached
	prunable           bool
}

// worktrees lists the repository's worktrees (the main one first).
func (r *Repo) worktrees(ctx context.Context) ([]worktree, error) {
	out, err := r.git.run(ctx, r.top, nil, "worktree", "list", "--porcelain", "-z")
	if err != nil {
		return nil, err
	}
	var list []worktree
	for _, rec := range strings.Split(out, "\x00\x00") {
		var w worktree
		for field := range strings.SplitSeq(rec, "\x00") {
			key, value, _ := strings.Cut(field, " ")
			switch key {
			case "worktree":
				w.path = filepath.Clean(value)
			case "HEAD":
				w.head = value
			case "branch":
				w.branch = value
			case "prunable":
				w.prunable = true
			}
		}
		if w.path != "" {
			list = append(list, w)
		}
	}
	return list, nil
}

// checkout returns the task's worktree entry: ErrNoWorktree when it is not a worktree of the
// repository or its folder is gone, ErrBranchMoved when it has another branch checked out.
func (r *Repo) checkout(ctx context.Context, t Task) (worktree, error) {
	list, err := r.worktrees(ctx)
	if err != nil {
		return worktree{}, err
	}
	for _, w := range list {
		if w.path != t.Dir {
			continue
		}
		if _, err := os.Stat(t.Dir); w.prunable || errors.Is(err, fs.ErrNotExist) {
			return worktree{}, fmt.Errorf("%w: %s (task %s) was deleted", ErrNoWorktree, t.Dir, t.ID)
		}
		if w.branch != r.branchRef(t.ID) {
			what := "a detached HEAD"
			if w.branch != "" {
				what = "branch " + strings.TrimPrefix(w.branch, "refs/heads/")
			}
			return worktree{}, fmt.Errorf("%w: the worktree of task %s has %s checked out, not %s", ErrBranchMoved, t.ID, what, t.Branch)
		}
		return w, nil
	}
	return worktree{}, fmt.Errorf("%w: %s (task %s) is not a worktree of %s", ErrNoWorktree, t.Dir, t.ID, r.top)
}

// inProgress names the files of a git directory that mark an operation in progress.
var inProgress = []struct{ file, what string }{
	{"MERGE_HEAD", "a merge"},
	{"CHERRY_PICK_HEAD", "a cherry-pick"},
	{"REVERT_HEAD", "a revert"},
	{"rebase-merge", "a rebase"},
	{"rebase-apply", "a rebase or am"},
}

// maxNamed is how many paths an error message names.
const maxNamed = 5

// checkState returns ErrUnmerged when the index of the checkout of dir (with git directory
// gitDir) has unmerged paths, and otherwise ErrInProgress when an operation is in progress
// in it.
func (r *Repo) checkState(ctx context.Context, dir, gitDir string) error {
	out, err := r.git.run(ctx, dir, nil, "ls-files", "--unmerged", "-z")
	if err != nil {
		return err
	}
	if out == "" {
		for _, p := range inProgress {
			if _, err := os.Lstat(filepath.Join(gitDir, p.file)); err == nil {
				return fmt.Errorf("%w: %s is in progress in %s", ErrInProgress, p.what, dir)
			}
		}
		return nil
	}
	var paths []string
	for entry := range strings.SplitSeq(strings.TrimSuffix(out, "\x00"), "\x00") {
		_, path, _ := strings.Cut(entry, "\t")
		if len(paths) == 0 || paths[len(paths)-1] != path {
			paths = append(paths, path)
		}
	}
	named := strings.Join(paths[:min(len(paths), maxNamed)], ", ")
	if len(paths) > maxNamed {
		named += fmt.Sprintf(" and %d more", len(paths)-maxNamed)
	}
	return fmt.Errorf("%w: %s has %d: %s", ErrUnmerged, dir, len(paths), named)
}
