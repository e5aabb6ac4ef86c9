// Package leanserver is an in-memory OpenCode for the root package's scale benchmarks: an
// [opencode.Client] with sessions, messages, prompts and the events of a run answered with
// one text step, as [opencodetest.FakeClient] sends them, built by hand and without
// goroutines, so that at thousands of tasks its own work is small beside the Manager's.
//
// It is not a general fake: a prompt to a session without a parent starts no run, a run
// ends only when [Server.End] is called, and there is no model, tool, permission request,
// fork or compaction. [opencodetest.FakeClient] is the fake for tests; this server's own
// test runs [opencodetest.TestClient] and says which of its checks apply.
//
// A Server is safe for concurrent use and starts no goroutines; an event stream is read by
// the goroutine that ranges over it.
package leanserver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asyncagents/asyncagents/opencode"
)

// Directory is the project directory of every session: their Directory, their events'
// Directory and the one directory whose SessionStatus lists them.
const Directory = "/bench/project"

// Server is an in-memory OpenCode for the scale benchmarks: sessions with ids of OpenCode's
// shape (newest first), messages, prompts and the events of the real server for a run
// answered with one text step, as [opencodetest.FakeClient] sends them (types, order, shapes
// and about their sizes), built by hand. A run of a child session starts busy with its
// assistant message in progress and ends when [Server.End] is called; a prompt to a session
// without a parent (a parent's notification) is stored and starts no run. Each session has
// its own lock, so calls for different sessions do not wait for each other, and a session's
// events are sent in order. It starts no goroutines and is safe for concurrent use.
type Server struct {
	closed atomic.Bool
	// served: the streams are an HTTP server's, not the Manager's (see [Served]). The
	// Manager's reads are marked by its side ([Server.MarkRead]), and sent counts the
	// events sent, for [Server.Sent].
	served bool
	sent   atomic.Int64

	idMu    sync.Mutex
	ms, ctr int64 // OpenCode's id clock: milliseconds and a counter within one
	seq     uint64

	mu       sync.RWMutex
	sessions map[string]*session
	busy     map[string]struct{}
	streams  []*stream // a slice, not a map: emit ranges over it for every event
}

// session is a Server's session: its info, its messages and its run.
type session struct {
	mu   sync.Mutex
	info opencode.Session
	msgs []opencode.Message
	run  int // index of the running assistant message, or -1

	// Of the last run's end: when the idle was sent, read from the stream (nanoseconds
	// since epoch), and when the messages were first read after it (by Messages, or by
	// the first page of MessagesBefore, which HTTP does not tell apart from Messages).
	idleAt time.Time
	readAt atomic.Int64
	msgsAt time.Time

	props [2][]byte // the session's event properties before and after the updated time
}

var _ opencode.Client = (*Server)(nil)

// epoch is the origin of session.readAt.
var epoch = time.Now()

// Option is an option of [New].
type Option interface{ apply(*Server) }

type optionFunc func(*Server)

func (f optionFunc) apply(s *Server) { f(s) }

// Served says that the server's event streams are read by an HTTP server
// ([opencodetest.HTTPServer]) that relays them to the Manager, not by the Manager itself:
// the streams then record no read time (the Manager's side calls [Server.MarkRead] when it
// reads a run's idle), and [Server.Sent] counts the events sent. Off by default.
func Served() Option { return optionFunc(func(s *Server) { s.served = true }) }

// New returns an empty Server.
func New(opts ...Option) *Server {
	s := &Server{sessions: map[string]*session{}, busy: map[string]struct{}{}}
	for _, o := range opts {
		o.apply(s)
	}
	return s
}

// errClosed is the error of every call after Close.
var errClosed = fmt.Errorf("leanserver: closed: %w", net.ErrClosed)

// Close ends every event stream; every call after it fails with an error matching
// net.ErrClosed. It is idempotent.
func (s *Server) Close() error {
	s.closed.Store(true)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.streams {
		st.close()
	}
	return nil
}

// Settled reports whether every event sent so far was read from every open stream.
func (s *Server) Settled() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, st := range s.streams {
		if st.unread.Load() > 0 {
			return false
		}
	}
	return true
}

// id returns an OpenCode id: prefix, "_", 12 hex digits of milliseconds·4096 plus a counter
// (inverted for sessions, which sort newest first) and 14 base62 characters.
func (s *Server) id(prefix string, descending bool) string {
	s.idMu.Lock()
	now := time.Now().UnixMilli()
	if now > s.ms {
		s.ms, s.ctr = now, 0
	} else {
		s.ctr++
	}
	v := uint64(s.ms*4096 + s.ctr)
	s.seq++
	x := s.seq * 0x9e3779b97f4a7c15
	s.idMu.Unlock()
	if descending {
		v = ^v
	}
	const hex, b62 = "0123456789abcdef", "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	buf := make([]byte, 0, len(prefix)+27)
	buf = append(buf, prefix...)
	buf = append(buf, '_')
	for sh := 44; sh >= 0; sh -= 4 {
		buf = append(buf, hex[v>>uint(sh)&15])
	}
	for i := range 14 {
		if i == 7 {
			x = (x ^ x>>31) * 0xbf58476d1ce4e5b9
		}
		buf = append(buf, b62[x%62])
		x /= 62
	}
	return string(buf)
}

func notFoundErr(id string) error {
	return &opencode.APIError{StatusCode: 404, Name: "NotFoundError", Message: "Session not found: " + id}
}

// lookup returns a session, locked.
func (s *Server) lookup(id string) (*session, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	s.mu.RLock()
	ss := s.sessions[id]
	s.mu.RUnlock()
	if ss == nil {
		return nil, notFoundErr(id)
	}
	ss.mu.Lock()
	return ss, nil
}

// CreateSession creates a session in [Directory], whatever req.Directory says, and emits
// session.created. A ParentID must start with "ses" (otherwise HTTP 400) but need not exist.
func (s *Server) CreateSession(_ context.Context, req opencode.CreateSessionRequest) (*opencode.Session, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	if req.ParentID != "" && !strings.HasPrefix(req.ParentID, "ses") {
		return nil, &opencode.APIError{StatusCode: 400, Name: "BadRequest"}
	}
	now := time.Now().UnixMilli()
	title := req.Title
	if title == "" {
		kind := "New session - "
		if req.ParentID != "" {
			kind = "Child session - "
		}
		title = kind + time.UnixMilli(now).UTC().Format("2006-01-02T15:04:05.000Z")
	}
	ss := &session{run: -1, info: opencode.Session{
		ID: s.id("ses", true), Slug: "calm-river", ProjectID: "global", Directory: Directory, ParentID: req.ParentID,
		Title: title, Version: "1.18.33", Time: opencode.SessionTime{Created: now, Updated: now},
		Permission: slices.Clone(req.Permission),
	}}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s.mu.Lock()
	s.sessions[ss.info.ID] = ss
	s.mu.Unlock()
	s.emit(opencode.EventSessionCreated, sessionProps(ss))
	info := ss.info
	return &info, nil
}

// GetSession returns a session; an unknown id is a 404 NotFoundError, as on OpenCode.
func (s *Server) GetSession(_ context.Context, id string) (*opencode.Session, error) {
	ss, err := s.lookup(id)
	if err != nil {
		return nil, err
	}
	defer ss.mu.Unlock()
	info := ss.info
	return &info, nil
}

// Messages returns a session's messages, oldest first, the newest limit of them when limit
// is positive.
func (s *Server) Messages(_ context.Context, id string, limit int) ([]opencode.Message, error) {
	ss, err := s.lookup(id)
	if err != nil {
		return nil, err
	}
	defer ss.mu.Unlock()
	if !ss.idleAt.IsZero() && ss.msgsAt.IsZero() {
		ss.msgsAt = time.Now()
	}
	msgs := ss.msgs
	if limit > 0 && len(msgs) > limit {
		msgs = msgs[len(msgs)-limit:]
	}
	return slices.Clone(msgs), nil
}

// MessagesBefore pages a session's messages as OpenCode does, newest page first, but its
// cursor is the id of the oldest message of the page before (OpenCode's is base64url JSON);
// an unknown cursor is HTTP 400 (BadRequest), as a cursor that does not decode is on
// OpenCode. A limit below 1 is an error.
func (s *Server) MessagesBefore(_ context.Context, id string, limit int, before string) ([]opencode.Message, string, error) {
	if limit < 1 {
		return nil, "", fmt.Errorf("leanserver: MessagesBefore: limit %d must be positive", limit)
	}
	ss, err := s.lookup(id)
	if err != nil {
		return nil, "", err
	}
	defer ss.mu.Unlock()
	if before == "" && !ss.idleAt.IsZero() && ss.msgsAt.IsZero() {
		ss.msgsAt = time.Now()
	}
	end := len(ss.msgs)
	if before != "" {
		end = slices.IndexFunc(ss.msgs, func(m opencode.Message) bool { return m.Info.ID == before })
		if end < 0 {
			return nil, "", &opencode.APIError{StatusCode: 400, Name: "BadRequest"}
		}
	}
	start := max(end-limit, 0)
	next := ""
	if start > 0 {
		next = ss.msgs[start].Info.ID
	}
	return slices.Clone(ss.msgs[start:end]), next, nil
}

// Message returns one message of a session, or a 404 NotFoundError.
func (s *Server) Message(_ context.Context, id, msgID string) (*opencode.Message, error) {
	ss, err := s.lookup(id)
	if err != nil {
		return nil, err
	}
	defer ss.mu.Unlock()
	for i := len(ss.msgs) - 1; i >= 0; i-- {
		if ss.msgs[i].Info.ID == msgID {
			m := ss.msgs[i]
			return &m, nil
		}
	}
	return nil, notFoundErr(msgID)
}

// Prompt stores a prompt with NoReply (a notification) and returns its user message; there
// is no model to answer any other.
func (s *Server) Prompt(_ context.Context, id string, req opencode.PromptRequest) (*opencode.Message, error) {
	ss, err := s.lookup(id)
	if err != nil {
		return nil, err
	}
	defer ss.mu.Unlock()
	if !req.NoReply {
		return nil, errors.New("leanserver: only Prompt with NoReply")
	}
	u, _ := s.userMessage(ss, req)
	return &u, nil
}

// PromptAsync stores the prompt's user message. In a child session without a run, the run
// starts: the session is busy, with its assistant message in progress, until [Server.End]
// (or Abort). A prompt to a session without a parent (a parent's notification) starts no
// run, and one to a session with a run is stored while the run goes on.
func (s *Server) PromptAsync(_ context.Context, id string, req opencode.PromptRequest) error {
	ss, err := s.lookup(id)
	if err != nil {
		return err
	}
	defer ss.mu.Unlock()
	u, added := s.userMessage(ss, req)
	if !added || ss.info.ParentID == "" || ss.run >= 0 {
		return nil
	}
	// The run starts: busy, an assistant message in progress.
	s.mu.Lock()
	s.busy[id] = struct{}{}
	s.mu.Unlock()
	s.emit(opencode.EventSessionStatus, statusProps(id, "busy"))
	a := opencode.Message{Info: opencode.MessageInfo{
		ID: s.id("msg", false), SessionID: id, Role: opencode.RoleAssistant, ParentID: u.Info.ID,
		Time: opencode.MessageTime{Created: time.Now().UnixMilli()}, Agent: req.Agent, Mode: req.Agent,
		ModelID: "m1", Provider: "scripted",
	}}
	ss.msgs = append(ss.msgs, a)
	ss.run = len(ss.msgs) - 1
	s.emit(opencode.EventMessageUpdated, messageProps(a.Info))
	s.emit(opencode.EventSessionUpdated, sessionProps(ss))
	s.emit("session.diff", []byte(`{"sessionID":"`+id+`","diff":[]}`))
	s.emit(opencode.EventMessageUpdated, messageProps(u.Info))
	s.emit(opencode.EventSessionStatus, statusProps(id, "busy"))
	return nil
}

// userMessage stores a prompt's user message and emits its events, and reports whether it
// added one: a prompt under the id of a message the session has adds its parts to that one
// instead (a part under the id of one it has replaces it; parts are kept in id order), as
// OpenCode does. ss.mu is held.
func (s *Server) userMessage(ss *session, req opencode.PromptRequest) (opencode.Message, bool) {
	id := req.MessageID
	if id == "" {
		id = s.id("msg", false)
	}
	s.emit(opencode.EventSessionUpdated, sessionProps(ss))
	i := slices.IndexFunc(ss.msgs, func(m opencode.Message) bool { return m.Info.ID == id })
	added := i < 0
	if added {
		ss.msgs = append(ss.msgs, opencode.Message{Info: opencode.MessageInfo{ID: id, SessionID: ss.info.ID, Role: opencode.RoleUser,
			Time: opencode.MessageTime{Created: time.Now().UnixMilli()}, Agent: req.Agent}})
		i = len(ss.msgs) - 1
	}
	u := &ss.msgs[i]
	s.emit(opencode.EventMessageUpdated, messageProps(u.Info))
	for _, p := range req.Parts {
		part := opencode.Part{ID: cmp.Or(p.ID, s.id("prt", false)), SessionID: ss.info.ID, MessageID: id, Type: opencode.PartText,
			Text: p.Text, Synthetic: p.Synthetic}
		if j := slices.IndexFunc(u.Parts, func(q opencode.Part) bool { return q.ID == part.ID }); j >= 0 {
			u.Parts[j] = part
		} else {
			u.Parts = append(u.Parts, part)
		}
		s.emit(opencode.EventMessagePartUpdate, partProps(part))
	}
	slices.SortStableFunc(u.Parts, func(a, b opencode.Part) int { return strings.Compare(a.ID, b.ID) })
	s.emit(opencode.EventSessionUpdated, sessionProps(ss))
	return *u, added
}

// End ends the run of session id with a one-step text reply ("Found 3 warnings in <id>."),
// with the events the fake sends for it, and returns when its session.status idle was
// emitted. It panics when the session has no run: the caller is wrong.
func (s *Server) End(id string) time.Time {
	ss, err := s.lookup(id)
	if err != nil || ss.run < 0 {
		panic(fmt.Sprintf("leanserver: no run to end in %s: %v", id, err))
	}
	defer ss.mu.Unlock()
	ri := ss.run
	a := &ss.msgs[ri]
	step := opencode.Part{ID: s.id("prt", false), SessionID: id, MessageID: a.Info.ID, Type: opencode.PartStepStart}
	text := opencode.Part{ID: s.id("prt", false), SessionID: id, MessageID: a.Info.ID, Type: opencode.PartText}
	s.emit(opencode.EventMessagePartUpdate, partProps(step))
	start := time.Now().UnixMilli()
	s.emit(opencode.EventMessagePartUpdate, partProps(text, start))
	text.Text = "Found 3 warnings in " + id + "."
	s.emit(opencode.EventMessagePartDelta, []byte(`{"sessionID":"`+id+`","messageID":"`+a.Info.ID+`","partID":"`+text.ID+`","field":"text","delta":`+strconv.Quote(text.Text)+`}`))
	s.emit(opencode.EventMessagePartUpdate, partProps(text, start, time.Now().UnixMilli()))
	finish := opencode.Part{ID: s.id("prt", false), SessionID: id, MessageID: a.Info.ID, Type: opencode.PartStepFinish}
	s.emit(opencode.EventMessagePartUpdate, partProps(finish))
	a.Info.Finish, a.Info.Time.Completed = "stop", time.Now().UnixMilli()
	a.Parts = []opencode.Part{step, text, finish}
	done := messageProps(a.Info) // sent twice, as the fake does; the stream's reader only reads it
	s.emit(opencode.EventMessageUpdated, done)
	s.emit(opencode.EventMessageUpdated, done)
	s.emit(opencode.EventSessionStatus, statusProps(id, "busy"))
	ss.run = -1
	s.mu.Lock()
	delete(s.busy, id)
	s.mu.Unlock()
	idle := time.Now()
	ss.idleAt, ss.msgsAt = idle, time.Time{}
	ss.readAt.Store(0)
	s.emitMarked(opencode.EventSessionStatus, statusProps(id, "idle"), ss)
	s.emit(opencode.EventSessionIdle, []byte(`{"sessionID":"`+id+`"}`))
	s.emit(opencode.EventSessionUpdated, sessionProps(ss))
	s.emit("session.diff", []byte(`{"sessionID":"`+id+`","diff":[]}`))
	s.emit(opencode.EventMessageUpdated, messageProps(ss.msgs[ri-1].Info))
	return idle
}

// Permissions returns none: there are no tools to ask for one.
func (s *Server) Permissions(context.Context, string) ([]opencode.Permission, error) {
	return nil, nil
}

// ForkSession fails: the lean server has no fork.
func (s *Server) ForkSession(context.Context, string, opencode.ForkSessionRequest) (*opencode.Session, error) {
	return nil, errors.New("leanserver: no fork")
}

// UpdateSession is not implemented: the benchmarks' tasks are not forks, and need no rules
// added.
func (s *Server) UpdateSession(context.Context, string, opencode.UpdateSessionRequest) (*opencode.Session, error) {
	return nil, errors.New("leanserver: no session update")
}

// DeleteSession is not implemented: the benchmarks delete no session.
func (s *Server) DeleteSession(context.Context, string) error {
	return errors.New("leanserver: no session delete")
}

// ReplyPermission fails: there is no permission request to answer.
func (s *Server) ReplyPermission(context.Context, string, string, opencode.PermissionReply) error {
	return errors.New("leanserver: no permission requests")
}

// Abort ends a session's run, if it has one, with MessageAbortedError on its assistant
// message, and emits session.status idle and session.idle, also for an idle or unknown
// session, as OpenCode does (OpenCode's session.error and message updates of an abort are not
// sent).
func (s *Server) Abort(_ context.Context, id string) error {
	if s.closed.Load() {
		return errClosed
	}
	if ss, err := s.lookup(id); err == nil {
		if ss.run >= 0 {
			ss.msgs[ss.run].Info.Error = &opencode.Error{Name: "MessageAbortedError", Data: []byte(`{"message":"Aborted"}`)}
			ss.msgs[ss.run].Info.Time.Completed = time.Now().UnixMilli()
			ss.run = -1
			s.mu.Lock()
			delete(s.busy, id)
			s.mu.Unlock()
		}
		defer ss.mu.Unlock()
	}
	s.emit(opencode.EventSessionStatus, statusProps(id, "idle"))
	s.emit(opencode.EventSessionIdle, []byte(`{"sessionID":"`+id+`"}`))
	return nil
}

// SessionStatus lists the sessions with a run, all busy, for the directory "" or
// [Directory]; any other directory has none.
func (s *Server) SessionStatus(_ context.Context, dir string) (map[string]opencode.SessionStatus, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(map[string]opencode.SessionStatus, len(s.busy))
	if dir != "" && dir != Directory {
		return out, nil
	}
	for id := range s.busy {
		out[id] = opencode.SessionStatus{Type: "busy"}
	}
	return out, nil
}

// Agents returns the agents of OpenCode's default configuration, as the fake does; a
// project has no agents of its own here.
func (s *Server) Agents(context.Context, string) ([]opencode.Agent, error) {
	return slices.Clone(agents), nil
}

// agents is GET /agent of OpenCode's default configuration (explore's description cut).
var agents = []opencode.Agent{
	{Name: "build", Description: "The default agent. Executes tools based on configured permissions.", Mode: "primary"},
	{Name: "compaction", Mode: "primary", Hidden: true},
	{Name: "explore", Description: "Fast agent specialized for exploring codebases.", Mode: "subagent"},
	{Name: "general", Description: "General-purpose agent for researching complex questions and executing multi-step tasks. Use this agent to execute multiple units of work in parallel.", Mode: "subagent"},
	{Name: "plan", Description: "Plan mode. Disallows all edit tools.", Mode: "primary"},
	{Name: "summary", Mode: "primary", Hidden: true},
	{Name: "title", Mode: "primary", Hidden: true},
}

// Events opens an event stream, which starts with server.connected and gets every event
// sent after it, in order; it ends when ctx ends, when it is closed and when the server is.
// The server sends no server.heartbeat.
func (s *Server) Events(ctx context.Context) (opencode.EventStream, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	st := &stream{srv: s, ctx: ctx, wake: make(chan struct{}, 1)}
	s.mu.Lock()
	s.streams = append(s.streams, st)
	s.mu.Unlock()
	st.push(event{Event: opencode.Event{Type: opencode.EventServerConnected, Properties: []byte(`{}`)}})
	return st, nil
}

// Sent returns how many events a [Served] server has sent, one per event and open stream;
// 0 when it is not served.
func (s *Server) Sent() int64 { return s.sent.Load() }
