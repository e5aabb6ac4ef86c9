package worktree

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// snapshot is a working tree's tree as git add -A would stage it — tracked and untracked
// files, not ignored ones — written on a temporary copy of the checkout's index, so that the
// checkout's own index is neither changed nor locked.
type snapshot struct {
	tree  string // the tree id
	index string // the temporary index, which holds tree with fresh stat data
	tmp   string // the folder of index
}

// close removes the temporary index.
func (s *snapshot) close() {
	if s.tmp != "" {
		_ = os.RemoveAll(s.tmp)
	}
}

// env points git at the temporary index.
func (s *snapshot) env() []string { return []string{"GIT_INDEX_FILE=" + s.index} }

// take snapshots the working tree dir, whose git directory is gitDir: it copies gitDir's
// index (so that unchanged files are not hashed again; a checkout without an index starts
// from HEAD's tree), runs git add -A on the copy and writes its tree. The caller closes the
// snapshot.
func (r *Repo) take(ctx context.Context, dir, gitDir string) (s *snapshot, err error) {
	tmp, err := os.MkdirTemp("", "asyncagents-index-")
	if err != nil {
		return nil, fmt.Errorf("worktree: snapshot %s: %w", dir, err)
	}
	s = &snapshot{index: filepath.Join(tmp, "index"), tmp: tmp}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	switch err := copyFile(s.index, filepath.Join(gitDir, "index")); {
	case errors.Is(err, fs.ErrNotExist):
		from := []string{"read-tree", "HEAD"}
		if _, err := r.git.run(ctx, dir, nil, "rev-parse", "--verify", "--quiet", "HEAD^{commit}"); err != nil {
			from = []string{"read-tree", "--empty"}
		}
		if _, err := r.git.run(ctx, dir, s.env(), from...); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, fmt.Errorf("worktree: snapshot %s: %w", dir, err)
	}
	if err := r.addAll(ctx, dir, s.env()); err != nil {
		return nil, err
	}
	tree, err := r.git.run(ctx, dir, s.env(), "write-tree")
	if err != nil {
		return nil, err
	}
	s.tree = strings.TrimSpace(tree)
	return s, nil
}

// copyFile copies the file from to a new file to, with from's modification time: git takes
// an entry whose file is not older than the index for "racily clean" and compares its
// content, and a copy with a newer time would hide a file changed in the same instant as the
// index was written.
func copyFile(to, from string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	fi, err := src.Stat()
	if err != nil {
		return err
	}
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(dst, src)
	if err = errors.Join(err, dst.Close()); err != nil {
		return err
	}
	return os.Chtimes(to, fi.ModTime(), fi.ModTime())
}

// addAll stages every file of the working tree dir — tracked and untracked, not ignored —
// in its index (or the one env names). New contents go into one pack file, not a file per
// object (bulk check-in: every file is "big"), which on a slow file system is the most of
// what staging a thousand files costs; git's own gc later packs them with the rest.
func (r *Repo) addAll(ctx context.Context, dir string, env []string) error {
	_, err := r.git.run(ctx, dir, env, "-c", "core.bigFileThreshold=1", "add", "--all", "--", ".")
	return err
}
