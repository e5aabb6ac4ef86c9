package worktree

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Bounds of what a [ConflictError] holds.
const (
	// MaxConflictFiles is how many conflicting files get their hunks read; every
	// conflicting file is listed.
	MaxConflictFiles = 100
	// MaxHunks is how many hunks a [Conflict] lists; MoreHunks counts the rest.
	MaxHunks = 20
	// MaxHunkBytes is the most bytes of each side of a [Hunk]; a longer side is cut (at a
	// line's end when it has one within the bound) and the hunk marked Cut.
	MaxHunkBytes = 4 << 10
	// maxMergedLine is the longest line the hunk reader takes; a file with a longer one
	// lists the hunks before it.
	maxMergedLine = 1 << 20
)

// Merge is what [Repo.Merge] applied to the parent's working tree.
type Merge struct {
	// Task is the task's id; Head the tip of its branch that was merged.
	Task, Head string
	// Files are the files the merge changed in the parent's working tree, sorted by path:
	// the task's changes, as they combined with the parent's. Empty when there was nothing
	// to apply.
	Files []FileStat
}

// Conflict is one file where the task's changes and the parent's conflict.
type Conflict struct {
	// Path is the file's path, slash-separated, relative to the repository's top.
	Path string
	// Kinds are git's kinds of conflict for the file: "contents", "modify/delete",
	// "add/add", "rename/delete", "binary", "file/directory", …
	Kinds []string
	// Messages are git's CONFLICT messages about the file ("CONFLICT (modify/delete): a.txt
	// deleted in … and modified in …"). The parent's side is named by a commit of its
	// working tree, the task's by the branch's tip.
	Messages []string
	// Hunks are the file's conflicting regions, first to last, up to [MaxHunks]; a conflict
	// without text regions (binary, modify/delete) has none.
	Hunks []Hunk
	// MoreHunks counts the hunks after MaxHunks.
	MoreHunks int
}

// Hunk is a region of a file that the parent and the task changed differently. Each side
// is its lines, newlines included.
type Hunk struct {
	// Line is the region's first line in the file as merged with conflict markers (1-based).
	Line int
	// Parent is the parent's lines (its working tree when Merge ran), Base the lines at the
	// task's base, Task the task's lines.
	Parent, Base, Task string
	// Cut is set when a side was longer than [MaxHunkBytes] and was cut.
	Cut bool
}

// Merge applies task id's branch to the parent's working tree with a three-way merge: the
// base is the task's base commit, the task's side the branch's tip, the parent's side its
// working tree now, uncommitted changes included. Call [Repo.Commit] first: changes left in
// the worktree are not merged.
//
// On success the task's changes are in the parent's working tree as uncommitted changes,
// next to the parent's own uncommitted edits, which are kept: Merge commits nothing in the
// parent's branch, and leaves its index and HEAD as they were (new files are untracked,
// deleted files are deleted in the working tree only). On a conflict it returns a
// [*ConflictError] (it matches [ErrConflict]) listing the conflicting files and their
// hunks, and the parent's working tree and index are byte for byte as they were. The merge
// is computed in the object database (git merge-tree --write-tree), and only a clean result
// is checked out, by git read-tree -m -u on a temporary index, which refuses before writing
// anything if a file changed meanwhile or an untracked file would be overwritten; a file
// the parent ignores where the task adds one is refused before that.
//
// Merge returns [ErrNoTask], [ErrBranchMoved] (the branch is gone, or no longer descends
// from the base), [ErrInProgress] or [ErrUnmerged] (the parent's own conflicts are not
// resolved), [ErrWouldOverwrite], [ErrLocked], or a [*ConflictError]; then the parent's
// checkout is unchanged.
// The task's worktree and branch are left as they were: [Repo.Discard] them after.
func (r *Repo) Merge(ctx context.Context, id string) (Merge, error) {
	t, err := r.Task(ctx, id)
	if err != nil {
		return Merge{}, err
	}
	unlock, err := r.lock(ctx)
	if err != nil {
		return Merge{}, err
	}
	defer unlock()
	if err := r.checkState(ctx, r.top, r.gitDir); err != nil {
		return Merge{}, err
	}
	head, err := r.head(ctx, t)
	if err != nil {
		return Merge{}, err
	}
	_, err = r.git.run(ctx, r.top, nil, "merge-base", "--is-ancestor", t.Base, head)
	if exitCode(err) == 1 {
		return Merge{}, fmt.Errorf("%w: branch %s of task %s no longer descends from its base %s", ErrBranchMoved, t.Branch, id, t.Base)
	}
	if err != nil {
		return Merge{}, err
	}
	m := Merge{Task: id, Head: head}
	snap, err := r.take(ctx, r.top, r.gitDir)
	if err != nil {
		return Merge{}, err
	}
	defer snap.close()
	// The parent's side is a commit of its working tree whose parent is the task's base:
	// merge-tree (which takes no base before git 2.40) then finds that base.
	ours, err := r.git.line(ctx, r.top, "commit-tree", snap.tree, "-p", t.Base, "-m", "asyncagents: the parent's working tree")
	if err != nil {
		return Merge{}, err
	}
	out, err := r.git.run(ctx, r.top, nil, "merge-tree", "--write-tree", "-z", ours, head)
	if exitCode(err) == 1 {
		conflicts, err := r.conflicts(ctx, out)
		if err != nil {
			return Merge{}, err
		}
		return Merge{}, &ConflictError{Task: id, Conflicts: conflicts}
	}
	if err != nil {
		return Merge{}, err
	}
	merged, _, _ := strings.Cut(out, "\x00")
	merged = strings.TrimSpace(merged)
	if merged == snap.tree {
		return m, nil
	}
	if m.Files, err = r.numstat(ctx, snap.tree, merged); err != nil {
		return Merge{}, err
	}
	if err := r.inTheWay(ctx, snap, merged); err != nil {
		return Merge{}, err
	}
	if _, err := r.git.run(ctx, r.top, snap.env(), "read-tree", "-m", "-u", snap.tree, merged); err != nil {
		return Merge{}, fmt.Errorf("worktree: merge of task %s not applied, the parent's checkout is unchanged: %w", id, err)
	}
	return m, nil
}

// conflicts reads the output of git merge-tree --write-tree -z for a merge with conflicts:
// the merged tree, the conflicted entries ("<mode> <oid> <stage>\t<path>"), an empty field,
// then messages (<count>, count paths, type, text).
func (r *Repo) conflicts(ctx context.Context, out string) ([]Conflict, error) {
	fields := strings.Split(out, "\x00")
	tree := fields[0]
	byPath := map[string]*Conflict{}
	stages := map[string]string{} // path → the stages it has, "123"
	add := func(path string) *Conflict {
		if c := byPath[path]; c != nil {
			return c
		}
		c := &Conflict{Path: path}
		byPath[path] = c
		return c
	}
	i := 1
	for ; i < len(fields) && fields[i] != ""; i++ {
		info, path, ok := strings.Cut(fields[i], "\t")
		if parts := strings.Fields(info); ok && len(parts) == 3 {
			add(path)
			stages[path] += parts[2]
		}
	}
	for i++; i < len(fields); {
		n, err := strconv.Atoi(fields[i])
		if err != nil || i+2+n >= len(fields) {
			break
		}
		paths, kind, text := fields[i+1:i+1+n], fields[i+1+n], strings.TrimSpace(fields[i+2+n])
		i += 3 + n
		name, ok := strings.CutPrefix(kind, "CONFLICT (")
		if !ok {
			continue
		}
		name = strings.TrimSuffix(name, ")")
		for _, p := range paths {
			c := add(p)
			if !slices.Contains(c.Kinds, name) {
				c.Kinds = append(c.Kinds, name)
			}
			c.Messages = append(c.Messages, text)
		}
	}
	list := make([]Conflict, 0, len(byPath))
	for _, p := range slices.Sorted(maps.Keys(byPath)) {
		list = append(list, *byPath[p])
	}
	read := 0
	for k := range list {
		c := &list[k]
		if !strings.Contains(stages[c.Path], "2") || !strings.Contains(stages[c.Path], "3") || read == MaxConflictFiles {
			continue
		}
		read++
		if err := r.hunks(ctx, tree, c); err != nil {
			return nil, err
		}
	}
	return list, nil
}

// hunks reads c's hunks from its file in the merged tree (written with diff3 conflict
// markers).
func (r *Repo) hunks(ctx context.Context, tree string, c *Conflict) error {
	read := func(out io.Reader) (bool, error) {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 0, 64<<10), maxMergedLine)
		sc.Split(scanLines)
		var h *Hunk
		var side *[]byte
		var parent, base, task []byte
		for line := 1; sc.Scan(); line++ {
			text := sc.Bytes()
			switch {
			case isMarker(text, '<'):
				h = &Hunk{Line: line}
				parent, base, task = parent[:0], base[:0], task[:0]
				side = &parent
			case h != nil && isMarker(text, '|'):
				side = &base
			case h != nil && isMarker(text, '='):
				side = &task
			case h != nil && isMarker(text, '>'):
				if len(c.Hunks) < MaxHunks {
					var cut [3]bool
					h.Parent, cut[0] = clip(parent)
					h.Base, cut[1] = clip(base)
					h.Task, cut[2] = clip(task)
					h.Cut = cut[0] || cut[1] || cut[2]
					c.Hunks = append(c.Hunks, *h)
				} else {
					c.MoreHunks++
				}
				h = nil
			case h != nil && len(*side) <= MaxHunkBytes:
				*side = append(*side, text...)
			}
		}
		return false, nil // a line too long ends the reading; the hunks before it stand
	}
	return r.git.stream(ctx, r.top, read, "cat-file", "blob", tree+":"+c.Path)
}

// isMarker reports whether line is a conflict marker of seven c's, alone or followed by a
// space and a label.
func isMarker(line []byte, c byte) bool {
	line = bytes.TrimRight(line, "\r\n")
	if len(line) < 7 || bytes.Count(line[:7], []byte{c}) != 7 {
		return false
	}
	return len(line) == 7 || line[7] == ' '
}

// clip is side as a string, cut to MaxHunkBytes (see cut), and whether it was cut.
func clip(side []byte) (string, bool) {
	if len(side) <= MaxHunkBytes {
		return string(side), false
	}
	return string(cut(side[:MaxHunkBytes])), true
}

// scanLines is bufio.ScanLines that keeps the line's end.
func scanLines(data []byte, atEOF bool) (advance int, token []byte, err error) {
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		return i + 1, data[:i+1], nil
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}

// maxPathspecs is how many paths one git command is given.
const maxPathspecs = 500

// inTheWay returns ErrWouldOverwrite when a file the merge adds — or a folder it needs —
// is in the parent's working tree as a file git ignores (which the snapshot does not hold,
// and git read-tree would overwrite): the merged tree's new paths, and their folders, that
// exist are looked up among the ignored files.
func (r *Repo) inTheWay(ctx context.Context, snap *snapshot, merged string) error {
	out, err := r.git.run(ctx, r.top, nil, "diff-tree", "-r", "-z", "--name-only", "--no-renames", "--diff-filter=A", snap.tree, merged)
	if err != nil || out == "" {
		return err
	}
	seen := map[string]bool{}
	var suspects []string
	for p := range strings.SplitSeq(strings.TrimSuffix(out, "\x00"), "\x00") {
		for c := p; c != "." && c != "/" && !seen[c]; c = path.Dir(c) {
			seen[c] = true
			fi, err := os.Lstat(filepath.Join(r.top, filepath.FromSlash(c)))
			if err != nil || fi.IsDir() && c != p {
				continue // nothing there (or a file above, which its own turn checks), or a folder where one is needed
			}
			suspects = append(suspects, c)
		}
	}
	var ignored []string
	env := append(snap.env(), "GIT_LITERAL_PATHSPECS=1")
	for chunk := range slices.Chunk(suspects, maxPathspecs) {
		args := append([]string{"ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory", "--"}, chunk...)
		out, err := r.git.run(ctx, r.top, env, args...)
		if err != nil {
			return err
		}
		if out != "" {
			ignored = append(ignored, strings.Split(strings.TrimSuffix(out, "\x00"), "\x00")...)
		}
	}
	if len(ignored) == 0 {
		return nil
	}
	named := strings.Join(ignored[:min(len(ignored), maxNamed)], ", ")
	if len(ignored) > maxNamed {
		named += fmt.Sprintf(" and %d more", len(ignored)-maxNamed)
	}
	return fmt.Errorf("%w: the task adds %s, which the parent's working tree has as files git ignores", ErrWouldOverwrite, named)
}
