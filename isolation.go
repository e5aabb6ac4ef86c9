package asyncagents

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/asyncagents/asyncagents/hints"
	"github.com/asyncagents/asyncagents/worktree"
)

// Isolation is where a task works: in its parent's directory, or in a git worktree of its
// own.
type Isolation string

// Isolations of [LaunchInput.Isolation] and [WithIsolation].
const (
	// IsolationNone: the task works in its parent's directory, on the parent's files.
	IsolationNone Isolation = "none"
	// IsolationWorktree: the task works in a git worktree of its own, on a branch of its own,
	// started from what the parent's checkout holds at the launch (HEAD plus its uncommitted
	// changes, tracked and untracked, not ignored). Its changes are committed on that branch
	// when each run ends (Task.Worktree says what changed), and reach the parent's working
	// tree only through [Manager.Merge]. A forked isolated task gets the parent's context as
	// a digest ([ForkDigest]) whatever the fork mode: OpenCode 1.18.33 keeps a native fork in
	// the parent's directory.
	IsolationWorktree Isolation = "worktree"
)

func (i Isolation) valid() bool { return i == "" || i == IsolationNone || i == IsolationWorktree }

// Bounds of what a [Worktree] record holds.
const (
	// MaxChangedFiles is how many paths Worktree.Changed lists; Worktree.Files counts all.
	MaxChangedFiles = 50
	// MaxOverlaps is how many files Worktree.Overlaps lists.
	MaxOverlaps = 20
)

// Worktree is an isolated task's git worktree ([IsolationWorktree]) and what its runs
// changed there. The paths are the OpenCode server's: the worktree is made by the Manager
// with the git command, so the host and the server must share the file system (the same
// machine, or the same mount at the same path).
type Worktree struct {
	// ID names the worktree: its folder under the repository's worktree root, and its branch.
	ID string `json:"id"`
	// Repo is the top of the parent's checkout, the working tree [Manager.Merge] writes to.
	Repo string `json:"repo"`
	// Dir is the worktree's folder; the task's session works in it (or in the same
	// subfolder of it as its parent works in of Repo).
	Dir string `json:"dir"`
	// Branch is the task's branch, short ("asyncagents/<ID>"); Base the commit it started
	// from: the parent's HEAD, or a commit of the parent's working tree with its uncommitted
	// changes whose parent is HEAD.
	Branch string `json:"branch"`
	Base   string `json:"base"`
	// Head is the branch's tip after the last run's changes were committed; empty before.
	Head string `json:"head,omitempty"`
	// Files counts the files the branch changes against Base, Added and Deleted their lines;
	// Changed lists the first [MaxChangedFiles] of them, sorted.
	Files   int      `json:"files,omitempty"`
	Added   int      `json:"added,omitempty"`
	Deleted int      `json:"deleted,omitempty"`
	Changed []string `json:"changed,omitempty"`
	// Overlaps are the files (at most [MaxOverlaps]) the task changed that another isolated
	// task of the parent, or the parent's own working tree since the launch, changed too, as
	// seen when the last run ended: where a merge may conflict.
	Overlaps []Overlap `json:"overlaps,omitempty"`
	// Error says why the last run's changes could not be committed; empty when they were.
	Error string `json:"error,omitempty"`
	// Merged is when [Manager.Merge] applied the branch to the parent's working tree;
	// Discarded when [Manager.Discard] removed the worktree.
	Merged    time.Time `json:"merged,omitzero"`
	Discarded time.Time `json:"discarded,omitzero"`
}

// Overlap is a file an isolated task changed that others changed too.
type Overlap struct {
	Path string `json:"path"` // slash-separated, relative to the repository's top
	// With are the ids of the other tasks that changed it, and "parent" when the parent's
	// working tree did.
	With []string `json:"with"`
}

// overlapParent stands for the parent's working tree in Overlap.With.
const overlapParent = "parent"

func (w *Worktree) clone() *Worktree {
	if w == nil {
		return nil
	}
	c := *w
	c.Changed = slices.Clone(w.Changed)
	c.Overlaps = slices.Clone(w.Overlaps)
	for i := range c.Overlaps {
		c.Overlaps[i].With = slices.Clone(c.Overlaps[i].With)
	}
	return &c
}

// isolation is the Manager's part that gives tasks worktrees: the repositories it opened,
// by the parent directory they were opened for, and the worktrees being started (made, not
// yet recorded), which a sweep must leave.
type isolation struct {
	opts []worktree.Option
	root string // the worktree root; "" for the repository's default

	mu       sync.Mutex
	repos    map[string]*worktree.Repo // by directory
	swept    map[string]bool           // repositories swept (by top)
	starting map[string]bool           // worktree ids
	busy     map[string]bool           // worktree ids being merged or discarded
}

// claim marks worktree id as being merged or discarded, unless it is already.
func (is *isolation) claim(id string) bool {
	is.mu.Lock()
	defer is.mu.Unlock()
	if is.busy[id] {
		return false
	}
	is.busy[id] = true
	return true
}

// release ends claim.
func (is *isolation) release(id string) {
	is.mu.Lock()
	delete(is.busy, id)
	is.mu.Unlock()
}

// worktreeSettle bounds the git work of one operation on a worktree (a commit, overlaps, a
// merge): generous, as a repository may be large.
const worktreeSettle = 2 * time.Minute

// repo returns the repository of dir, opened once. The first time it is asked for with live
// (a launch, or the start of a Manager whose stored tasks work there), what crashed launches
// left in it (worktrees no task records) is swept; live reports the worktree ids tasks record.
func (is *isolation) repo(ctx context.Context, dir string, live func() (map[string]bool, bool)) (*worktree.Repo, error) {
	is.mu.Lock()
	r := is.repos[dir]
	is.mu.Unlock()
	if r == nil {
		var err error
		if r, err = worktree.Open(ctx, dir, is.root, is.opts...); err != nil {
			return nil, err
		}
		is.mu.Lock()
		is.repos[dir] = r
		is.mu.Unlock()
	}
	if live != nil {
		is.sweepOnce(ctx, r, live)
	}
	return r, nil
}

// sweepOnce sweeps r the first time it is called for r's repository; a sweep whose live
// tasks could not be read is tried at the next call.
func (is *isolation) sweepOnce(ctx context.Context, r *worktree.Repo, live func() (map[string]bool, bool)) {
	is.mu.Lock()
	done := is.swept[r.Dir()]
	is.mu.Unlock()
	if done {
		return
	}
	ids, ok := live()
	if !ok {
		return
	}
	is.mu.Lock()
	is.swept[r.Dir()] = true
	is.mu.Unlock()
	is.sweep(ctx, r, ids)
}

// sweep removes the worktrees of r that no task records and no launch is starting. A
// worktree made less than a minute ago is left: another host of the store may be recording
// it.
func (is *isolation) sweep(ctx context.Context, r *worktree.Repo, live map[string]bool) {
	recent := time.Now().Add(-time.Minute)
	_, _ = r.Sweep(ctx, func(id string) bool {
		is.mu.Lock()
		starting := is.starting[id]
		is.mu.Unlock()
		if live[id] || starting {
			return true
		}
		fi, err := os.Stat(filepath.Join(r.Root(), id))
		return err == nil && fi.ModTime().After(recent)
	})
}

// newWorktreeID returns a fresh worktree name: "task-" and 12 hexadecimal digits.
func newWorktreeID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "task-" + hex.EncodeToString(b[:])
}

// isolate makes the worktree of a task launched from dir (its parent's directory): the
// returned record's Dir is where its session works. It returns an error matching
// ErrIsolation, and the worktree package's, when dir's project cannot give it one. live
// reports the worktrees tasks record, for the sweep of a repository opened the first time.
func (is *isolation) isolate(ctx context.Context, dir string, live func() (map[string]bool, bool)) (*Worktree, error) {
	r, err := is.repo(ctx, dir, live)
	if err != nil {
		return nil, isolationErr(err)
	}
	id := newWorktreeID()
	is.mu.Lock()
	is.starting[id] = true
	is.mu.Unlock()
	t, err := r.Start(ctx, id)
	if err != nil {
		is.started(id)
		return nil, isolationErr(err)
	}
	w := &Worktree{ID: id, Repo: r.Dir(), Dir: t.Dir, Branch: t.Branch, Base: t.Base}
	if rel, err := filepath.Rel(r.Dir(), dir); err == nil && rel != "." && filepath.IsLocal(rel) {
		w.Dir = filepath.Join(t.Dir, rel) // the parent works in a subfolder: so does the task
	}
	return w, nil
}

// check returns the error isolate would return for dir's repository as it is now, without
// making a worktree (worktree.Repo.Check).
func (is *isolation) check(ctx context.Context, dir string, live func() (map[string]bool, bool)) error {
	r, err := is.repo(ctx, dir, live)
	if err == nil {
		err = r.Check(ctx)
	}
	if err != nil {
		return isolationErr(err)
	}
	return nil
}

// started forgets a worktree being started: it is recorded, or was discarded.
func (is *isolation) started(id string) {
	is.mu.Lock()
	delete(is.starting, id)
	is.mu.Unlock()
}

// unisolate removes the worktree of a launch that failed before its task was recorded.
func (is *isolation) unisolate(ctx context.Context, w *Worktree, logger *slog.Logger) {
	if w == nil {
		return
	}
	defer is.started(w.ID)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), worktreeSettle)
	defer cancel()
	r, err := is.repo(ctx, w.Repo, nil)
	if err == nil {
		err = r.Discard(ctx, w.ID, false)
	}
	if err != nil {
		logger.Warn("asyncagents: remove the worktree of a failed launch", "worktree", w.Dir, "err", err)
	}
}

// liveWorktrees returns the ids of the worktrees tasks record: this Manager's and, with a
// HandoffStore, every host's; ok is false when the store could not say.
func (m *Manager) liveWorktrees() (live map[string]bool, ok bool) {
	live = map[string]bool{}
	m.mu.Lock()
	for _, e := range m.tasks.byID {
		if w := e.task.Worktree; w != nil {
			live[w.ID] = true
		}
	}
	m.mu.Unlock()
	if hs, ok := m.cfg.store.(HandoffStore); ok {
		ctx, cancel := m.bg.requestCtx()
		defer cancel()
		tasks, err := hs.Tasks(ctx, "")
		if err != nil {
			m.cfg.logger.Warn("asyncagents: read the tasks for a sweep of worktrees", "err", err)
			return nil, false // nothing is swept: every worktree may be live
		}
		for _, t := range tasks {
			if t.Worktree != nil {
				live[t.Worktree.ID] = true
			}
		}
	}
	return live, true
}

// settleWorktree commits what run rc of e, an isolated task whose run is ending, changed in
// its worktree, and records the change and the overlaps with the parent's other isolated
// tasks and working tree in e's record, so that the notification of the run's end names
// them. A failure is recorded in Worktree.Error. It does nothing for a task without a
// worktree, or when the run is no longer rc or active.
func (m *Manager) settleWorktree(e *entry, rc int) {
	m.mu.Lock()
	w := e.task.Worktree.clone()
	if w == nil || e.task.ResumeCount != rc || e.task.Status.Terminal() || !w.Discarded.IsZero() {
		m.mu.Unlock()
		return
	}
	siblings := m.tasks.siblingWorktrees(e)
	m.mu.Unlock()

	ctx, cancel := context.WithTimeout(m.bg.ctx, worktreeSettle)
	defer cancel()
	err := m.isolation.describe(ctx, w, siblings, true)
	m.mu.Lock()
	defer m.mu.Unlock()
	if e.task.ResumeCount != rc || e.task.Worktree == nil {
		return
	}
	if err != nil {
		m.cfg.logger.Warn("asyncagents: commit a task's changes", "task", e.task.ID, "err", err)
		w = e.task.Worktree.clone()
		w.Error = boundError(err.Error())
	}
	e.task.Worktree = w
	m.changedLocked(e)
}

// siblingWorktrees maps the worktree ids of e's parent's other isolated tasks of the same
// repository, neither merged nor discarded, to their task ids. Manager.mu is held.
func (ts *taskSet) siblingWorktrees(e *entry) map[string]string {
	ids := map[string]string{}
	for _, o := range ts.byID {
		w := o.task.Worktree
		if o == e || w == nil || o.task.ParentSessionID != e.task.ParentSessionID || w.Repo != e.task.Worktree.Repo ||
			!w.Merged.IsZero() || !w.Discarded.IsZero() {
			continue
		}
		ids[w.ID] = o.task.ID
	}
	return ids
}

// describe fills w's change (committing the worktree first when commit is set) and
// its overlaps with the worktrees siblings (worktree id → task id) and the parent's tree.
func (is *isolation) describe(ctx context.Context, w *Worktree, siblings map[string]string, commit bool) error {
	r, err := is.repo(ctx, w.Repo, nil)
	if err != nil {
		return err
	}
	var c worktree.Change
	if commit {
		c, err = r.Commit(ctx, w.ID, "")
	} else {
		c, err = r.Change(ctx, w.ID)
	}
	if err != nil {
		return err
	}
	w.Head, w.Files, w.Added, w.Deleted, w.Changed, w.Error = c.Head, len(c.Files), c.Added, c.Deleted, nil, ""
	for _, f := range c.Files[:min(len(c.Files), MaxChangedFiles)] {
		w.Changed = append(w.Changed, f.Path)
	}
	ids := append([]string{w.ID}, slices.Sorted(maps.Keys(siblings))...)
	o, err := r.Overlaps(ctx, ids...)
	if err != nil {
		return err
	}
	w.Overlaps = overlapsOf(w.ID, o, siblings)
	return nil
}

// overlapsOf returns the files of o that worktree id shares, naming the others by task id.
func overlapsOf(id string, o worktree.Overlaps, siblings map[string]string) []Overlap {
	by := map[string][]string{}
	for _, s := range o.Tasks {
		if !slices.Contains(s.Tasks, id) {
			continue
		}
		for _, other := range s.Tasks {
			if other != id {
				by[s.Path] = append(by[s.Path], siblings[other])
			}
		}
	}
	for _, s := range o.Parent {
		if slices.Contains(s.Tasks, id) {
			by[s.Path] = append(by[s.Path], overlapParent)
		}
	}
	var out []Overlap
	for _, p := range slices.Sorted(maps.Keys(by)) {
		if len(out) == MaxOverlaps {
			break
		}
		with := by[p]
		slices.Sort(with)
		out = append(out, Overlap{Path: p, With: slices.Compact(with)})
	}
	return out
}

// isolatedOf returns copies of the isolated tasks of entries. m.mu is held.
func isolatedOf(entries []*entry) []Task {
	var tasks []Task
	for _, e := range entries {
		if e.isolated {
			tasks = append(tasks, e.task.clone())
		}
	}
	return tasks
}

// removeWorktrees removes the worktrees of tasks that were removed (cleared, or their parent
// deleted): the branch too unless the task was merged. Failures are logged.
func (is *isolation) removeWorktrees(ctx context.Context, tasks []Task, logger *slog.Logger) {
	for _, t := range tasks {
		w := t.Worktree
		if w == nil || !w.Discarded.IsZero() {
			continue
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), worktreeSettle)
		r, err := is.repo(ctx, w.Repo, nil)
		if err == nil {
			err = r.Discard(ctx, w.ID, !w.Merged.IsZero())
		}
		cancel()
		if err != nil {
			logger.Warn("asyncagents: remove a removed task's worktree", "task", t.ID, "worktree", w.Dir, "err", err)
		}
	}
}

// isolationErr wraps an error of the worktree package for a caller: ErrIsolation with the
// package's own message, which says what to do.
func isolationErr(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrIsolation, err)
}

// worktreeRepos returns the repositories the isolated tasks of stored work in, sorted.
func worktreeRepos(stored []Task) []string {
	var repos []string
	for _, t := range stored {
		if t.Worktree != nil && !slices.Contains(repos, t.Worktree.Repo) {
			repos = append(repos, t.Worktree.Repo)
		}
	}
	slices.Sort(repos)
	return repos
}

// changes is what w says in a notification; nil for no worktree.
func (w *Worktree) changes() *hints.Changes {
	if w == nil {
		return nil
	}
	c := &hints.Changes{Branch: w.Branch, Files: w.Files, Added: w.Added, Deleted: w.Deleted, Error: w.Error}
	for _, o := range w.Overlaps {
		c.Overlaps = append(c.Overlaps, hints.Overlap{Path: o.Path, With: o.With})
	}
	return c
}

var (
	worktreeIDRE = regexp.MustCompile(`^task-[0-9a-f]{12}$`)
	commitRE     = regexp.MustCompile(`^([0-9a-f]{40}|[0-9a-f]{64})$`)
)

// check validates a stored worktree record: its name is one the Manager makes, its paths
// are absolute and clean, its commits are commit ids, its lists within their bounds.
func (w *Worktree) check() error {
	var errs []error
	bad := func(cond bool, format string, args ...any) {
		if cond {
			errs = append(errs, fmt.Errorf("worktree: "+format, args...))
		}
	}
	bad(!worktreeIDRE.MatchString(w.ID), "name %s", echo(w.ID))
	for _, p := range []string{w.Repo, w.Dir} {
		bad(!filepath.IsAbs(p) || filepath.Clean(p) != p || len(p) > 4096, "path %s", echo(p))
	}
	bad(!commitRE.MatchString(w.Base) || w.Head != "" && !commitRE.MatchString(w.Head), "commit %s or %s", echo(w.Base), echo(w.Head))
	bad(len(w.Branch) > 256, "branch of %d bytes", len(w.Branch))
	bad(len(w.Changed) > MaxChangedFiles || len(w.Overlaps) > MaxOverlaps, "%d files, %d overlaps", len(w.Changed), len(w.Overlaps))
	bad(utf8.RuneCountInString(w.Error) > MaxErrorChars+100, "error of %d characters", utf8.RuneCountInString(w.Error))
	return errors.Join(errs...)
}

// Summary says what the worktree's branch changes, in one line for lists:
// "3 files +10 −2 on asyncagents/task-…", then " (merged)" or " (discarded)" when it was.
func (w *Worktree) Summary() string {
	s := fmt.Sprintf("%d files +%d −%d on %s", w.Files, w.Added, w.Deleted, w.Branch)
	switch {
	case !w.Merged.IsZero():
		s += " (merged)"
	case !w.Discarded.IsZero():
		s += " (discarded)"
	}
	return s
}
