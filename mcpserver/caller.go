package mcpserver

import (
	"bytes"
	"context"
	"crypto/hmac"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

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
	// firstLookupRetry and maxLookupRetry bound the pause between two reads of the busy
	// sessions: reads at 0.1, 0.2, 0.4, 0.8, 1.6 s and at the end of the lookup wait.
	firstLookupRetry = 100 * time.Millisecond
	maxLookupRetry   = 800 * time.Millisecond
	// firstRetry and maxRetry bound the pause between two reads of one session, when a
	// call names its session.
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
	// maxSessionID and maxCallID bound the ids a call may name: "ses_" and up to
	// maxSessionID letters and digits; up to maxCallID letters, digits and "_-.:|".
	maxSessionID = 64
	maxCallID    = 128
)

// validSessionID reports whether id has the shape of an OpenCode session id.
func validSessionID(id string) bool {
	rest, ok := strings.CutPrefix(id, "ses_")
	if !ok || len(rest) == 0 || len(rest) > maxSessionID {
		return false
	}
	for i := 0; i < len(rest); i++ {
		if c := rest[i]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

// validCallID reports whether id has the shape of a tool call id: letters, digits and
// "_-.:|", at most maxCallID.
func validCallID(id string) bool {
	if len(id) == 0 || len(id) > maxCallID {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("_-.:|", c) >= 0) {
			return false
		}
	}
	return true
}

// callArgs is a call's arguments, split for the bridge and the handler.
type callArgs struct {
	handler json.RawMessage // the arguments without _caller, for the tool's handler
	input   any             // all of them, decoded: what a tool part's input is compared with
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
	a.input, _ = decodeInput(raw)
	if c, ok := obj[callerArg]; ok {
		a.caller = c
		delete(obj, callerArg)
		if b, err := json.Marshal(obj); err == nil {
			a.handler = b
		}
	}
	return a
}

// decodeInput decodes a tool input as JavaScript would (numbers are float64); null or
// absent is {}.
func decodeInput(raw json.RawMessage) (any, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return map[string]any{}, true
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return nil, false
	}
	return v, true
}

// inputEqual reports whether a tool part's stored input is the call's arguments, _caller
// included: OpenCode stores the object it sends, after the plugin added _caller to it.
func inputEqual(partInput json.RawMessage, want any) bool {
	got, ok := decodeInput(partInput)
	return ok && want != nil && reflect.DeepEqual(got, want)
}

// hasCaller reports whether a stored input carries _caller.
func hasCaller(partInput json.RawMessage) bool {
	var obj map[string]json.RawMessage
	if json.Unmarshal(partInput, &obj) != nil {
		return false
	}
	_, ok := obj[callerArg]
	return ok
}

// candidate is a running tool part that may be the call being resolved.
type candidate struct {
	session, message, agent, callID string
}

func (c candidate) caller() asyncagents.Caller {
	return asyncagents.Caller{SessionID: c.session, MessageID: c.message, Agent: c.agent, CallID: c.callID}
}

// matching returns the candidates among parts that are calls of the tool named name with
// arguments input.
func matching(parts []runningPart, name string, input any) []candidate {
	var out []candidate
	for _, p := range parts {
		if p.tool == name && input != nil && reflect.DeepEqual(p.input, input) {
			out = append(out, p.candidate)
		}
	}
	return out
}

// pluginCaller is a well-formed _caller.
type pluginCaller struct {
	SessionID string `json:"sessionID"`
	CallID    string `json:"callID"`
	Sig       string `json:"sig"`
}

// parseCaller checks a _caller value: its shape, and with a token its signature (see
// [Plugin]). It returns why the value is not the plugin's, or "".
func (s *Server) parseCaller(raw json.RawMessage) (pluginCaller, string) {
	var pc pluginCaller
	if err := json.Unmarshal(raw, &pc); err != nil {
		return pc, `not {"sessionID", "callID", "sig"}`
	}
	switch {
	case !validSessionID(pc.SessionID):
		return pc, "sessionID is not a session id"
	case !validCallID(pc.CallID):
		return pc, "callID is not a call id"
	case !s.cfg.tokenSet:
		return pc, ""
	case pc.Sig == "":
		return pc, "not signed"
	case !hmac.Equal([]byte(pc.Sig), []byte(callerSig(s.cfg.token, pc.SessionID, pc.CallID))):
		return pc, "bad signature"
	}
	return pc, ""
}

// resolve finds the caller of a call of the tool named name (see Server). The returned
// function releases the call id it claimed; call it when the call is over.
func (s *Server) resolve(ctx context.Context, name string, args callArgs, meta mcp.Meta) (asyncagents.Caller, func(), error) {
	if !args.object { // the handler refuses such arguments before it needs a caller
		return asyncagents.Caller{}, func() {}, nil
	}
	if _, ok := meta["sessionID"]; ok && !s.cfg.modes[CallerFromMeta] {
		// Not trusted: any client with the token may set it (see CallerFromMeta).
		s.cfg.logger.Debug("mcpserver: _meta.sessionID ignored (CallerFromMeta is off)", "tool", name)
	}
	if s.cfg.modes[CallerFromMeta] {
		if sid, ok := meta["sessionID"].(string); ok && sid != "" {
			if !validSessionID(sid) {
				return asyncagents.Caller{}, nil, fmt.Errorf("%w (_meta.sessionID is not a session id)", ErrUnknownCaller)
			}
			return s.fromMeta(ctx, name, sid, args)
		}
	}
	ignored := ""
	if s.cfg.modes[CallerFromPlugin] && args.caller != nil {
		pc, why := s.parseCaller(args.caller)
		if why == "" {
			return s.fromPlugin(ctx, name, pc, args)
		}
		ignored = fmt.Sprintf(" (_caller ignored: %s)", why)
		s.cfg.logger.Debug("mcpserver: _caller ignored", "tool", name, "reason", why)
	}
	if s.cfg.modes[CallerFromLookup] {
		c, release, err := s.lookup(ctx, name, args)
		if errors.Is(err, ErrUnknownCaller) && ignored != "" {
			err = fmt.Errorf("%w%s", err, ignored)
		}
		return c, release, err
	}
	return asyncagents.Caller{}, nil, fmt.Errorf("%w (the call carries no caller that the bridge's caller modes read)%s", ErrUnknownCaller, ignored)
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
		return asyncagents.Caller{}, nil, fmt.Errorf("%w (_meta.sessionID %q names no session)", ErrUnknownCaller, sid)
	}
	if err != nil { // the session is known all the same; the handler will find out
		s.cfg.logger.Debug("mcpserver: read the caller's messages", "session", sid, "error", err)
		return s.resolved(name, CallerFromMeta, asyncagents.Caller{SessionID: sid}, "")
	}
	if c, ok := s.claims.takeOne(matching(runningTools(msgs, s.prefix+"_"), name, args.input), time.Now()); ok {
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

// fromPlugin resolves a call whose arguments carry the plugin's _caller, checking it
// against the session's running tool part: the part with that call id must be a running
// call of the same tool whose stored input is the call's arguments, _caller included.
func (s *Server) fromPlugin(ctx context.Context, name string, pc pluginCaller, args callArgs) (asyncagents.Caller, func(), error) {
	refuse := func(why string) (asyncagents.Caller, func(), error) {
		return asyncagents.Caller{}, nil, fmt.Errorf("%w (_caller names call %q of session %q, which %s)",
			ErrUnknownCaller, pc.CallID, pc.SessionID, why)
	}
	deadline := time.Now().Add(s.cfg.lookupWait)
	var lastErr error
	notFound := "is not a running call"
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
			case !hasCaller(p.State.Input):
				// stored before the plugin added _caller, or the plugin never did: read again
				notFound = "was made without _caller"
			case !inputEqual(p.State.Input, args.input):
				return refuse("has other arguments")
			case !s.claims.claim(pc.CallID, time.Now()):
				return refuse("is being answered already")
			default:
				c := asyncagents.Caller{SessionID: pc.SessionID, MessageID: m.Info.ID, Agent: m.Info.Agent, CallID: pc.CallID}
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
	return refuse(notFound)
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

// lookup resolves a call by searching the busy sessions for its running tool part. The
// reads are shared with the other lookups in progress (see scanner): each read this lookup
// uses began after the call arrived and the settle time passed, and after the read it used
// before.
func (s *Server) lookup(ctx context.Context, name string, args callArgs) (asyncagents.Caller, func(), error) {
	arrived := time.Now()
	deadline := arrived.Add(s.cfg.lookupWait)
	settle := min(lookupSettle, s.cfg.lookupWait)
	if err := sleep(ctx, settle); err != nil {
		return asyncagents.Caller{}, nil, err
	}
	after := arrived.Add(settle)
	var (
		lastErr  error
		sessions int
	)
	for delay := firstLookupRetry; ; delay = min(2*delay, maxLookupRetry) {
		sc, err := s.scans.get(ctx, after)
		if ctx.Err() != nil {
			return asyncagents.Caller{}, nil, context.Cause(ctx)
		}
		lastErr = err
		if err == nil {
			after = sc.start.Add(time.Nanosecond)
			c, n := s.claims.take(matching(sc.parts, name, args.input), time.Now())
			if n == 1 {
				return s.resolved(name, CallerFromLookup, c.caller(), c.callID)
			}
			sessions = n
		} else {
			after = time.Now()
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
