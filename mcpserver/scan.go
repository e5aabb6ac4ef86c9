package mcpserver

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/asyncagents/asyncagents/opencode"
)

// scan is one read of the running tool parts of the busy sessions, shared by every lookup
// that may use it.
type scan struct {
	start time.Time // when the read began: it shows every part stored before
	parts []runningPart
	err   error
	done  chan struct{} // closed when parts and err are set
}

// runningPart is a running tool part of the bridge's tools, with its input decoded.
type runningPart struct {
	candidate
	tool  string
	input any
}

// scanner shares reads among concurrent lookups: a lookup asks for a read that began after
// a given time, and gets the newest one that did, or waits for the one in progress if it
// did, or has a new one started. At most one read is in progress. Safe for concurrent use.
type scanner struct {
	read  func(ctx context.Context) ([]runningPart, error)
	spawn func(func(ctx context.Context)) bool // runs a read on a goroutine the Server owns

	mu      sync.Mutex
	current *scan // in progress
	last    *scan // the newest that succeeded
}

// get returns a read that began at or after after.
func (s *scanner) get(ctx context.Context, after time.Time) (*scan, error) {
	for {
		s.mu.Lock()
		if l := s.last; l != nil && !l.start.Before(after) {
			s.mu.Unlock()
			return l, nil
		}
		c := s.current
		if c == nil {
			c = &scan{start: time.Now(), done: make(chan struct{})}
			if !s.spawn(func(ctx context.Context) { s.run(ctx, c) }) {
				s.mu.Unlock()
				return nil, ErrClosed
			}
			s.current = c
		}
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-c.done:
		}
		if !c.start.Before(after) {
			return c, c.err
		}
		// It began too early for this lookup: the next one will do.
	}
}

func (s *scanner) run(ctx context.Context, c *scan) {
	ctx, cancel := context.WithTimeout(ctx, scanTimeout)
	defer cancel()
	c.parts, c.err = s.read(ctx)
	s.mu.Lock()
	s.current = nil
	if c.err == nil {
		s.last = c
	}
	s.mu.Unlock()
	close(c.done)
}

// readRunning reads the busy sessions of the known directories (GET /session/status of
// each) and the newest messages of each, and returns their running tool parts named
// "<prefix>_…". A failed read fails the whole: a session left out could be the one that
// makes a match ambiguous.
func (s *Server) readRunning(ctx context.Context) ([]runningPart, error) {
	busy := map[string]bool{}
	for _, dir := range s.cfg.dirs {
		st, err := s.client.SessionStatus(ctx, dir)
		if err != nil {
			return nil, err
		}
		for id := range st {
			busy[id] = true
		}
	}
	ids := make([]string, 0, len(busy))
	for id := range busy {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	found := make([][]runningPart, len(ids))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(scanParallel)
	for i, id := range ids {
		g.Go(func() error {
			msgs, err := s.recent(gctx, id)
			if errors.Is(err, opencode.ErrNotFound) { // deleted meanwhile: not a caller
				return nil
			}
			if err != nil {
				return err
			}
			found[i] = runningTools(msgs, s.prefix+"_")
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return slices.Concat(found...), nil
}

// runningTools returns the running tool parts among msgs whose tool name begins with
// prefix, newest message first.
func runningTools(msgs []opencode.Message, prefix string) []runningPart {
	var out []runningPart
	for i := len(msgs) - 1; i >= 0; i-- {
		m := &msgs[i]
		for _, p := range m.Parts {
			if p.Type != opencode.PartTool || !strings.HasPrefix(p.Tool, prefix) || p.State == nil ||
				p.State.Status != opencode.ToolRunning || p.CallID == "" {
				continue
			}
			in, ok := decodeInput(p.State.Input)
			if !ok {
				continue
			}
			c := candidate{session: p.SessionID, message: p.MessageID, agent: m.Info.Agent, callID: p.CallID}
			if c.message == "" {
				c.message = m.Info.ID
			}
			if c.session == "" {
				c.session = m.Info.SessionID
			}
			out = append(out, runningPart{candidate: c, tool: p.Tool, input: in})
		}
	}
	return out
}
