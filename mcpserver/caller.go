package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sync/errgroup"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/truncate"
)

const (
	// callerArg is the argument the companion plugin adds.
	callerArg = "_caller"
	// recentMessages is the page size of the reads of a session's newest messages, and
	// maxPages how many pages are read at most, until the newest assistant message: the one
	// the running step writes its tool parts to. Prompts sent while the session is busy
	// (the Manager's notifications among them) are stored after it.
	recentMessages = 4
	maxPages       = 8
	// lookupSettle is how long after a call arrives the lookup first reads the sessions, so
	// that the caller's own tool part, written about when the call is sent, is there too.
	lookupSettle = 100 * time.Millisecond
	// firstRetry and maxRetry bound the pause between two reads of the sessions.
	firstRetry = 25 * time.Millisecond
	maxRetry   = 250 * time.Millisecond
	// scanTimeout bounds one read of the sessions.
	scanTimeout = 10 * time.Second
	// scanParallel is how many sessions' messages one read requests at once.
	scanParallel = 8
	// claimGrace is how long a call id stays claimed after its call ended: its part may
	// show running for a moment after the answer.
	claimGrace = time.Minute
	// maxDetail is how many characters of a value an error repeats.
	maxDetail = 80
)

// callArgs is a call's arguments, split for the bridge and the handler.
type callArgs struct {
	handler json.RawMessage // the arguments without _caller, for the tool's handler
	input   any             // the same, decoded: what a tool part's input is compared with
	caller  json.RawMessage // the _caller value; nil when absent
	object  bool            // the arguments are a JSON object, null or absent
}

// parseArgs splits raw arguments. Arguments that are not a JSON object are passed on as
// they are, for the handler to refuse.
func parseArgs(raw json.RawMessage) callArgs {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || string(trimmed) == "null" {
		return callArgs{handler: raw, input: map[string]any{}, object: true}
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &obj); err != nil || obj == nil {
		return callArgs{handler: raw}
	}
	a := callArgs{handler: raw, object: true}
	if c, ok := obj[callerArg]; ok {
		a.caller = c
		delete(obj, callerArg)
		if b, err := json.Marshal(obj); err == nil {
			a.handler = b
		}
	}
	a.input, _ = decodeInput(a.handler)
	return a
}

// decodeInput decodes a tool input as JavaScript would (numbers are float64), without
// _caller; null or absent is {}.
func decodeInput(raw json.RawMessage) (any, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return map[string]any{}, true
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return nil, false
	}
	if m, ok := v.(map[string]any); ok {
		delete(m, callerArg)
	}
	return v, true
}

func inputEqual(partInput json.RawMessage, want any) bool {
	got, ok := decodeInput(partInput)
	return ok && reflect.DeepEqual(got, want)
}

// candidate is a running tool part that may be the call being resolved.
type candidate struct {
	session, message, agent, callID string
}

func (c candidate) caller() asyncagents.Caller {
	return asyncagents.Caller{SessionID: c.session, MessageID: c.message, Agent: c.agent}
}

// runningParts returns the running tool parts named name whose input equals input, newest
// message first.
func runningParts(msgs []opencode.Message, name string, input any) []candidate {
	var out []candidate
	for i := len(msgs) - 1; i >= 0; i-- {
		m := &msgs[i]
		for _, p := range m.Parts {
			if p.Type != opencode.PartTool || p.Tool != name || p.State == nil || p.State.Status != opencode.ToolRunning ||
				p.CallID == "" || !inputEqual(p.State.Input, input) {
				continue
			}
			msgID := p.MessageID
			if msgID == "" {
				msgID = m.Info.ID
			}
			sid := p.SessionID
			if sid == "" {
				sid = m.Info.SessionID
			}
			out = append(out, candidate{session: sid, message: msgID, agent: m.Info.Agent, callID: p.CallID})
		}
	}
	return out
}

// resolve finds the caller of a call of the tool named name (see Server). The returned
// function releases the call id it claimed; call it when the call is over.
func (s *Server) resolve(ctx context.Context, name string, args callArgs, meta mcp.Meta) (asyncagents.Caller, func(), error) {
	if !args.object { // the handler refuses such arguments before it needs a caller
		return asyncagents.Caller{}, func() {}, nil
	}
	if s.cfg.modes[CallerFromMeta] {
		if sid, ok := meta["sessionID"].(string); ok && sid != "" {
			return s.fromMeta(ctx, name, sid, args)
		}
	}
	if s.cfg.modes[CallerFromPlugin] && args.caller != nil {
		return s.fromPlugin(ctx, name, args)
	}
	if s.cfg.modes[CallerFromLookup] {
		return s.lookup(ctx, name, args)
	}
	return asyncagents.Caller{}, nil, fmt.Errorf("%w (the call carries neither _meta.sessionID nor _caller)", ErrUnknownCaller)
}

func (s *Server) resolved(name string, mode CallerMode, c asyncagents.Caller, callID string) (asyncagents.Caller, func(), error) {
	s.cfg.logger.Debug("mcpserver: caller", "tool", name, "mode", mode.String(), "session", c.SessionID,
		"message", c.MessageID, "agent", c.Agent, "callID", callID)
	if callID == "" {
		return c, func() {}, nil
	}
	return c, func() { s.claims.release(callID, time.Now()) }, nil
}

// fromMeta resolves a call that names its session in _meta.sessionID.
func (s *Server) fromMeta(ctx context.Context, name, sid string, args callArgs) (asyncagents.Caller, func(), error) {
	msgs, err := s.readMessages(ctx, sid)
	if errors.Is(err, opencode.ErrNotFound) {
		return asyncagents.Caller{}, nil, fmt.Errorf("%w (_meta.sessionID %q names no session)", ErrUnknownCaller, cut(sid))
	}
	if err != nil { // the session is known all the same; the handler will find out
		s.cfg.logger.Debug("mcpserver: read the caller's messages", "session", sid, "error", err)
		return s.resolved(name, CallerFromMeta, asyncagents.Caller{SessionID: sid}, "")
	}
	if c, ok := s.claims.takeOne(runningParts(msgs, name, args.input), time.Now()); ok {
		c.session = sid
		return s.resolved(name, CallerFromMeta, c.caller(), c.callID)
	}
	caller := asyncagents.Caller{SessionID: sid}
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Info.Role == opencode.RoleAssistant {
			caller.Agent = msgs[i].Info.Agent
			break
		}
	}
	return s.resolved(name, CallerFromMeta, caller, "")
}

// fromPlugin resolves a call whose arguments carry _caller, checking it against the
// session's running tool part.
func (s *Server) fromPlugin(ctx context.Context, name string, args callArgs) (asyncagents.Caller, func(), error) {
	var pc struct {
		SessionID string `json:"sessionID"`
		CallID    string `json:"callID"`
	}
	if err := json.Unmarshal(args.caller, &pc); err != nil || pc.SessionID == "" || pc.CallID == "" {
		return asyncagents.Caller{}, nil, fmt.Errorf("%w (_caller must be {\"sessionID\", \"callID\"})", ErrUnknownCaller)
	}
	refuse := func(why string) (asyncagents.Caller, func(), error) {
		return asyncagents.Caller{}, nil, fmt.Errorf("%w (_caller names call %q of session %q, which %s)",
			ErrUnknownCaller, cut(pc.CallID), cut(pc.SessionID), why)
	}
	deadline := time.Now().Add(s.cfg.lookupWait)
	var lastErr error
	for delay := firstRetry; ; delay = min(2*delay, maxRetry) {
		msgs, err := s.readMessages(ctx, pc.SessionID)
		lastErr = err
		switch {
		case errors.Is(err, opencode.ErrNotFound):
			return refuse("does not exist")
		case err == nil:
			m, p := findCall(msgs, pc.CallID)
			switch {
			case p == nil, p.State == nil, p.State.Status == opencode.ToolPending:
				// not stored yet: read again
			case p.Tool != name:
				return refuse("is a call of another tool")
			case p.State.Status != opencode.ToolRunning:
				return refuse("is not running")
			case !inputEqual(p.State.Input, args.input):
				return refuse("has other arguments")
			case !s.claims.claim(pc.CallID, time.Now()):
				return refuse("is being answered already")
			default:
				c := asyncagents.Caller{SessionID: pc.SessionID, MessageID: m.Info.ID, Agent: m.Info.Agent}
				if p.MessageID != "" {
					c.MessageID = p.MessageID
				}
				return s.resolved(name, CallerFromPlugin, c, pc.CallID)
			}
		}
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		if err := sleep(ctx, min(delay, left)); err != nil {
			return asyncagents.Caller{}, nil, err
		}
	}
	if lastErr != nil {
		return asyncagents.Caller{}, nil, fmt.Errorf("mcpserver: check _caller: %w", lastErr)
	}
	return refuse("is not a running call")
}

// findCall returns the tool part with callID among msgs, and its message.
func findCall(msgs []opencode.Message, callID string) (*opencode.Message, *opencode.Part) {
	for i := len(msgs) - 1; i >= 0; i-- {
		for j := range msgs[i].Parts {
			if p := &msgs[i].Parts[j]; p.Type == opencode.PartTool && p.CallID == callID {
				return &msgs[i], p
			}
		}
	}
	return nil, nil
}

func (s *Server) readMessages(ctx context.Context, sid string) ([]opencode.Message, error) {
	ctx, cancel := context.WithTimeout(ctx, scanTimeout)
	defer cancel()
	return s.recent(ctx, sid)
}

// recent returns a session's newest messages, oldest first, back to its newest assistant
// message (GET /session/{id}/message?limit=4, then older pages; at most maxPages).
func (s *Server) recent(ctx context.Context, sid string) ([]opencode.Message, error) {
	var out []opencode.Message
	before := ""
	for range maxPages {
		msgs, next, err := s.client.MessagesBefore(ctx, sid, recentMessages, before)
		if err != nil {
			return nil, err
		}
		out = append(msgs, out...)
		if next == "" || slices.ContainsFunc(msgs, func(m opencode.Message) bool { return m.Info.Role == opencode.RoleAssistant }) {
			break
		}
		before = next
	}
	return out, nil
}

// lookup resolves a call by searching the busy sessions for its running tool part.
func (s *Server) lookup(ctx context.Context, name string, args callArgs) (asyncagents.Caller, func(), error) {
	start := time.Now()
	deadline := start.Add(s.cfg.lookupWait)
	if err := sleep(ctx, min(lookupSettle, s.cfg.lookupWait)); err != nil {
		return asyncagents.Caller{}, nil, err
	}
	var (
		lastErr  error
		sessions int
	)
	for delay := firstRetry; ; delay = min(2*delay, maxRetry) {
		cands, err := s.scan(ctx, name, args.input)
		lastErr = err
		if err == nil {
			c, n := s.claims.take(cands, time.Now())
			if n == 1 {
				return s.resolved(name, CallerFromLookup, c.caller(), c.callID)
			}
			sessions = n
		}
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		if err := sleep(ctx, min(delay, left)); err != nil {
			return asyncagents.Caller{}, nil, err
		}
	}
	switch {
	case lastErr != nil:
		return asyncagents.Caller{}, nil, fmt.Errorf("mcpserver: find the caller: %w", lastErr)
	case sessions > 1:
		return asyncagents.Caller{}, nil, fmt.Errorf("%w (%d sessions are running this %s call)", ErrAmbiguousCaller, sessions, name)
	}
	return asyncagents.Caller{}, nil, ErrUnknownCaller
}

// scan reads the busy sessions of the known directories and returns their running tool
// parts named name with input input. A failed read fails the scan: a session left out
// could be the one that makes a match ambiguous.
func (s *Server) scan(ctx context.Context, name string, input any) ([]candidate, error) {
	ctx, cancel := context.WithTimeout(ctx, scanTimeout)
	defer cancel()
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
	found := make([][]candidate, len(ids))
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
			found[i] = runningParts(msgs, name, input)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return slices.Concat(found...), nil
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

func cut(s string) string {
	if p, ok := truncate.Prefix(s, maxDetail); ok {
		return p + "…"
	}
	return s
}

// claims are the call ids of running tool parts that calls resolved to: a call id belongs
// to one call. Safe for concurrent use.
type claims struct {
	mu  sync.Mutex
	ids map[string]time.Time // call id → zero while its call runs, else when it ended
}

// pruneLocked forgets the call ids of calls that ended more than claimGrace before now.
func (c *claims) pruneLocked(now time.Time) {
	if c.ids == nil {
		c.ids = map[string]time.Time{}
	}
	for id, ended := range c.ids {
		if !ended.IsZero() && now.Sub(ended) > claimGrace {
			delete(c.ids, id)
		}
	}
}

// take looks at the candidates no call has claimed. When they are all in one session it
// claims the first and returns it with 1; otherwise it claims nothing and returns the
// number of sessions they are in (0, or more than 1).
func (c *claims) take(cands []candidate, now time.Time) (candidate, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pruneLocked(now)
	sessions := map[string]bool{}
	var first *candidate
	for i := range cands {
		if _, taken := c.ids[cands[i].callID]; taken {
			continue
		}
		sessions[cands[i].session] = true
		if first == nil {
			first = &cands[i]
		}
	}
	if len(sessions) != 1 {
		return candidate{}, len(sessions)
	}
	c.ids[first.callID] = time.Time{}
	return *first, 1
}

// takeOne claims the first candidate no call has claimed, if any.
func (c *claims) takeOne(cands []candidate, now time.Time) (candidate, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pruneLocked(now)
	for _, cand := range cands {
		if _, taken := c.ids[cand.callID]; !taken {
			c.ids[cand.callID] = time.Time{}
			return cand, true
		}
	}
	return candidate{}, false
}

// claim claims callID; it fails when it is claimed already.
func (c *claims) claim(callID string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pruneLocked(now)
	if _, taken := c.ids[callID]; taken {
		return false
	}
	c.ids[callID] = time.Time{}
	return true
}

// release marks callID's call as ended at now; the id stays claimed for claimGrace.
func (c *claims) release(callID string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.ids[callID]; ok {
		c.ids[callID] = now
	}
}
