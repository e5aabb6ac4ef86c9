package worktree

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// Sizes of a [DiffPage], in bytes.
const (
	// DefaultDiffPage is the size of a page when the limit given is 0 or less.
	DefaultDiffPage = 32 << 10
	// MaxDiffPage is the largest page; a larger limit is lowered to it.
	MaxDiffPage = 256 << 10
)

// DiffPage is one page of a task's diff.
type DiffPage struct {
	// Text is the page: up to limit bytes of git diff Base Head, from Offset, ending at a
	// line's end unless one line is longer than the page (then it ends before a UTF-8
	// sequence the limit would split).
	Text string
	// Offset is where Text starts in the whole diff, in bytes; Next is where the next page
	// starts (Offset+len(Text)).
	Offset, Next int
	// More reports whether the diff goes on after Text.
	More bool
	// Base and Head are the commits diffed; pages of one Head are pages of one diff.
	Base, Head string
}

// Diff returns a page of task id's diff — git diff of its branch's tip against its base,
// without colour, renames or external tools; a binary file is one "Binary files … differ"
// line — starting offset bytes into it, of at most limit bytes (limit ≤ 0 means
// [DefaultDiffPage]; it is lowered to [MaxDiffPage]). Pass the page's Next as the next
// offset. git makes the diff up to the end of the page and is stopped there: memory stays
// within the page, time grows with offset. A [Repo.Commit] between two pages changes the
// diff; Head says which one a page is of.
//
// Diff returns [ErrNoTask], [ErrBranchMoved] when the branch is gone, or [ErrInvalidInput]
// for a negative offset. It takes no lock.
func (r *Repo) Diff(ctx context.Context, id string, offset, limit int) (DiffPage, error) {
	if offset < 0 {
		return DiffPage{}, fmt.Errorf("%w: negative offset %d", ErrInvalidInput, offset)
	}
	if limit <= 0 {
		limit = DefaultDiffPage
	}
	limit = min(limit, MaxDiffPage)
	t, err := r.Task(ctx, id)
	if err != nil {
		return DiffPage{}, err
	}
	head, err := r.head(ctx, t)
	if err != nil {
		return DiffPage{}, err
	}
	p := DiffPage{Offset: offset, Base: t.Base, Head: head}
	buf := make([]byte, limit+1)
	n := 0
	read := func(out io.Reader) (bool, error) {
		if _, err := io.CopyN(io.Discard, out, int64(offset)); err != nil {
			return false, ignoreEOF(err)
		}
		var err error
		n, err = io.ReadFull(out, buf)
		return n > limit, ignoreEOF(err)
	}
	err = r.git.stream(ctx, r.top, read, "diff", "--no-color", "--no-renames", "--no-ext-diff", "--no-textconv", t.Base, head, "--")
	if err != nil {
		return DiffPage{}, err
	}
	page := buf[:n]
	if n > limit {
		p.More = true
		page = cut(buf[:limit])
	}
	p.Text = string(page)
	p.Next = offset + len(page)
	return p, nil
}

// cut is page up to its last line end; a page with none ends before a UTF-8 sequence its
// end splits (an invalid byte counts as whole).
func cut(page []byte) []byte {
	if i := bytes.LastIndexByte(page, '\n'); i >= 0 {
		return page[:i+1]
	}
	for back := 1; back <= utf8.UTFMax && back <= len(page); back++ {
		start := len(page) - back
		if utf8.RuneStart(page[start]) {
			if r, size := utf8.DecodeRune(page[start:]); r == utf8.RuneError && size <= 1 && !utf8.FullRune(page[start:]) {
				return page[:start] // a sequence the cut splits
			}
			return page
		}
	}
	return page
}

// ignoreEOF is err, nil for the end of the output.
func ignoreEOF(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return nil
	}
	return err
}
