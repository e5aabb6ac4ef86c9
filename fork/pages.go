package fork

import (
	"context"
	"fmt"

	"github.com/asyncagents/asyncagents/opencode"
)

// PageFunc returns the next page of a parent session's messages for [Pipeline.RunPages]:
// the newest page on the first call, then each time the page before the last one, every
// page oldest first (as GET /session/{id}/message returns it), and whether older pages
// remain. [SessionPages] reads them from an OpenCode server.
type PageFunc func(ctx context.Context) (page []opencode.Message, more bool, err error)

// MessageReader reads a session's messages a page at a time, newest page first; it is the
// method of [opencode.Client] that [SessionPages] uses (see [opencode.HTTPClient.MessagesBefore]).
type MessageReader interface {
	MessagesBefore(ctx context.Context, sessionID string, limit int, before string) (msgs []opencode.Message, next string, err error)
}

// Page sizes of SessionPages: the n-th page holds n·PageStep messages, up to MaxPageSize.
const (
	PageStep    = 100
	MaxPageSize = 1000
)

// SessionPages returns a [PageFunc] that reads the messages of sessionID with c
// (MessagesBefore), newest page first, in pages of [PageStep], 2·PageStep, 3·PageStep …
// messages, up to [MaxPageSize]. On opencode 1.18.33 a request costs about as much as 30
// messages (some 12 ms, and 0.35 ms a message, decoding included): the first pages are small,
// so little is read past where [Pipeline.RunPages] stops, and they grow, so a long read takes
// few requests. The PageFunc remembers where it is: use it for one RunPages, from one
// goroutine.
func SessionPages(c MessageReader, sessionID string) PageFunc {
	before, n := "", 0
	return func(ctx context.Context) ([]opencode.Message, bool, error) {
		n++
		msgs, next, err := c.MessagesBefore(ctx, sessionID, min(n*PageStep, MaxPageSize), before)
		if err != nil {
			return nil, false, err
		}
		before = next
		return msgs, next != "", nil
	}
}

// RunPages is [Pipeline.Run] on a parent read page by page from next, newest page first,
// every message once. It stops reading as soon as older messages can no longer change the
// context: once it has read the latest compaction boundary (the summary and then its marker,
// and with tail-aware slicing the tail back to the message named tail_start_id), or once a
// block did not fit the budget, since every older block is then dropped too. How a tool
// result is cut depends only on the results newer than it, so Context, Preamble and the
// Stats of the context — FinalMessages, Tier1, Tier2, Tier3, TruncatedResults,
// HeadTailApplied, TotalChars and BudgetClipped — are those Run returns on the whole parent,
// however the pages are split.
//
// The other Stats need the whole parent; RunPages reports those of Run on the messages it
// read (the newest ones, down to the one at which it stopped): OriginalMessages counts them
// and CompactionIndex is the summary's index among them. When the budget stopped the reading
// (RemovedMessages > 0), RemovedMessages counts only the dropped blocks among them (at least
// one, where Run on the whole parent may count more), and CompactionDetected is false unless
// the boundary was among them. Read to its start, a parent gives exactly Run's Stats.
//
// RunPages returns ctx's error when ctx is done before it is finished, and the error of
// next, wrapped, when reading a page fails.
func (p *Pipeline) RunPages(ctx context.Context, next PageFunc) (Result, error) {
	st := Stats{CompactionIndex: -1}
	s := backSlicer{tailAware: p.cfg.tailAware, f: newFormatter(&p.cfg, &st)}
	for !s.done {
		if err := ctx.Err(); err != nil {
			return Result{}, err
		}
		page, more, err := next(ctx)
		if err != nil {
			return Result{}, fmt.Errorf("fork: read messages: %w", err)
		}
		for i := len(page) - 1; i >= 0 && !s.done; i-- {
			s.next(&page[i])
		}
		if !more {
			s.end()
		}
	}
	st.OriginalMessages = s.read
	if s.boundary {
		st.CompactionDetected, st.CompactionIndex = true, s.read-1-s.summaryPos
	}
	text := s.f.finish()
	return Result{Context: text, Preamble: p.Preamble(st), Stats: st}, nil
}

// backSlicer is Slice read backwards: given a parent's messages newest first, it hands the
// formatter the messages Slice returns, in reverse order, as soon as it knows them, and says
// when older messages can no longer change them.
//
// Why the boundary it finds is LatestBoundary's (SPEC F-1, F-2): a summary read is a
// candidate, and a later candidate (an older summary, read before any marker) replaces it.
// The first marker read while a candidate waits is the latest boundary's marker, and the
// candidate its summary: no marker lies between them and no other summary, so the candidate
// is the first summary after that marker. No boundary is newer: every marker read before it
// was read before any summary was, so no summary follows such a marker. Until that marker
// comes, the candidate and the messages read after it wait; a new candidate turns the old one
// into an ordinary message (it is the first summary after no marker), and they go to the
// formatter. At the marker the messages between it and the summary are dropped, as Slice
// drops them. With tail-aware slicing the messages before the marker wait, down to the one
// named tail_start_id (the nearest, as in LatestBoundary), then go to the formatter, and the
// summary last: Slice puts it first.
//
// Why a full formatter ends the reading (SPEC F-13): the budget keeps the newest blocks in
// Slice's order while they fit (at least one); the formatter gets them newest first, so once
// a block did not fit, every block it gets later would be dropped too, and the ones it kept
// are final, since a result's rank counts only newer results (SPEC F-6).
type backSlicer struct {
	tailAware bool
	f         *formatter

	read       int                 // messages read
	summary    *opencode.Message   // the candidate, or the boundary's summary
	summaryPos int                 // its position, counted from the newest message (0)
	waiting    []*opencode.Message // read after the candidate, or after the marker; newest first
	boundary   bool                // the latest boundary was read
	tailID     string              // its tail_start_id, while looking for that message
	done       bool
}

func (s *backSlicer) next(m *opencode.Message) {
	pos := s.read
	s.read++
	switch {
	case s.boundary: // tail-aware, looking for the tail's first message
		s.waiting = append(s.waiting, m)
		if m.Info.ID == s.tailID {
			s.add(s.waiting...)
			s.add(s.summary)
			s.done = true
		}
	case isMarker(m) && s.summary != nil:
		s.boundary, s.waiting = true, nil
		if tail := compactionPart(m).TailStartID; s.tailAware && tail != "" {
			s.tailID = tail
			return
		}
		s.add(s.summary)
		s.done = true
	case m.Info.IsSummary():
		if s.summary != nil {
			s.add(s.summary)
			s.add(s.waiting...)
			s.waiting = nil
		}
		s.summary, s.summaryPos = m, pos
	case s.summary != nil:
		s.waiting = append(s.waiting, m)
	default:
		s.add(m)
	}
	if s.f.full && !s.done {
		// Every older block is dropped. Messages still waiting are ordinary ones here (no
		// boundary was read): count them as Run on the messages read would.
		if s.summary != nil && !s.boundary {
			s.add(s.summary)
			s.add(s.waiting...)
		}
		s.done = true
	}
}

// end is called when no older message remains.
func (s *backSlicer) end() {
	switch {
	case s.done:
	case s.boundary: // the tail's first message is not there: no tail
		s.add(s.summary)
	case s.summary != nil: // a summary without a marker is an ordinary message
		s.add(s.summary)
		s.add(s.waiting...)
	}
	s.done = true
}

func (s *backSlicer) add(msgs ...*opencode.Message) {
	for _, m := range msgs {
		s.f.add(m)
	}
}
