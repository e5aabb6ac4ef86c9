package mcpserver

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/opencode"
)

// Errors of a call whose caller cannot be told. The bridge returns them to OpenCode as the
// call's error result, so the model reads them; each is wrapped with the details.
var (
	// ErrUnknownCaller: no running call of the tool with the call's arguments was found
	// (within the lookup wait), or the _caller argument does not name one.
	ErrUnknownCaller = errors.New("mcpserver: unknown caller: no running call of this tool with these arguments was found; call the tool again")
	// ErrAmbiguousCaller: several sessions were making the same call, with the same
	// arguments, at the same moment, and nothing tells which one this is.
	ErrAmbiguousCaller = errors.New("mcpserver: ambiguous caller: several sessions made this same call at the same moment; call the tool again")
	// ErrClosed: the Server was closed.
	ErrClosed = errors.New("mcpserver: closed")
)

// Server serves the LLM tools of an asyncagents Manager ([asyncagents.Tools]) to OpenCode
// as an MCP server over streamable HTTP: it is an [http.Handler] a host mounts, e.g. at
// /mcp, and registers with OpenCode (see [RemoteConfig]). OpenCode names MCP tools
// "<server>_<tool>"; registered under the Manager's tool prefix ("asyncagents"), the tools
// are task, output, cancel, list and clear, so the model sees asyncagents_task …
// asyncagents_clear, the names the Manager's task sessions are denied.
//
// # Callers
//
// OpenCode 1.18.33 does not tell an MCP server which session calls. For each call the
// bridge finds the caller — session, message, agent — in this order, skipping the modes
// that are off (see [WithCallerModes]; the first is off by default):
//
//  1. With [CallerFromMeta] only: _meta.sessionID of the call, which OpenCode sends from
//     version 2 on. It must be a session id ("ses_" and 1 to 64 letters and digits), else
//     the call fails with [ErrUnknownCaller]. The message and agent come from that
//     session's running tool part with the call's tool name and arguments, when one is
//     found at once; otherwise the agent of its newest assistant message, and no message.
//     Nothing checks that the session makes the call: the bridge takes the MCP client at
//     its word, which is why the mode is off unless the host turns it on. Off, a call's
//     _meta.sessionID is ignored.
//  2. The _caller argument {"sessionID", "callID", "sig"} that the companion plugin
//     ([Plugin]) adds, when it is the plugin's: sessionID a session id, callID 1 to 128
//     letters, digits and "_-.:|", and, when the bridge has a token ([WithToken]), sig the
//     token's signature of the two ([WithTokenFile]). Any other _caller — unsigned, signed
//     with another key, malformed — is ignored, and the call is resolved by the lookup as
//     one without _caller. The plugin's _caller is checked against the session: its newest
//     messages must show a running tool part with that call id, the tool's name, and the
//     call's arguments, _caller included, as its stored input (OpenCode stores the object
//     the plugin added _caller to), else the call fails with [ErrUnknownCaller]. The part's
//     message and that message's agent complete the caller.
//  3. A lookup: GET /session/status of each directory ([WithDirectories]), then the newest
//     messages of each busy session (GET /session/{id}/message?limit=4, and older pages
//     back to the newest assistant message), for running tool parts named
//     "<prefix>_<tool>" whose stored input is the call's arguments, _caller included. It
//     first reads 100 ms after the call arrived, so that the caller's own part, which
//     OpenCode stores about when it sends the call, is there. Parts that other calls have
//     claimed are skipped. Parts of one session left: the call claims the first one's call
//     id and runs for that session (identical calls made in parallel by one session each
//     take one part). None, or parts of several sessions: the lookup reads again 0.2, 0.4,
//     0.8 and 1.6 s after the call arrived, and at the end of the lookup wait
//     ([WithLookupWait]), then fails with [ErrUnknownCaller] or [ErrAmbiguousCaller]. It
//     never guesses. Concurrent lookups share their reads: a lookup takes a read that
//     began 100 ms after its call arrived, or later, and after the read it took before, so
//     a burst of calls costs OpenCode about what one call does. A claimed call id stays
//     claimed for a minute after its call ended.
//
// A model cannot make its call run for another session. It cannot set _meta through
// OpenCode; and a program that holds the token and calls the bridge itself (a child
// session's shell that read the token file) can set it, but by default the bridge does
// not read it. With a token, a model cannot sign a _caller without reading the token; a
// _caller it writes is one of its call's arguments, stored with them, so its call matches
// its own tool part only.
// Without a token, a _caller is taken at its word once it matches the named running
// part's stored _caller: a model that knows another session's whole _caller (session id,
// call id, and sig if any) for a call that runs can borrow it.
//
// _caller is removed from the arguments before the tool's handler sees them.
//
// # Calls
//
// A call runs the tool's handler with the caller and the arguments; the handler's text is
// the result, and an error becomes a result with isError set and the error's text, which
// the model reads (the OpenCode tool part ends with status "error"). A panic in a handler
// is recovered and returned the same way. While a call runs, a progress notification goes
// to OpenCode every keepalive period ([WithKeepalive]), so that OpenCode's 60 s MCP timeout
// does not cut a blocking output. When OpenCode cancels the call (the session is aborted,
// or its own timeout) the handler's context is cancelled.
//
// # Requests and sessions
//
// The bridge refuses what a web page may send ([WithAllowedOrigins]: an Origin header,
// by default; a Host that is not a loopback name), and, with a token, requests without it.
// OpenCode opens one MCP session per instance (project directory). The bridge keeps at
// most [WithMaxSessions] sessions, closing the one idle longest to make room, and closes
// a session idle for [WithSessionTimeout]; OpenCode answers the 404 its next request then
// gets with a new session and sends the request again, so its calls work as before.
//
// A Server is safe for concurrent use. It owns the goroutines of its calls' keepalives, of
// the reads of the lookups, and those of the MCP SDK's sessions; [Server.Close] ends them.
type Server struct {
	m      *asyncagents.Manager
	client opencode.Client
	cfg    config
	prefix string
	tools  map[string]asyncagents.Tool // by the OpenCode tool name, "<prefix>_<tool>"
	mcp    *mcp.Server
	http   http.Handler
	token  [sha256.Size]byte
	claims claims
	scans  scanner
	mcpSes sessions

	mu       sync.Mutex
	closed   bool
	calls    sync.WaitGroup     // calls in progress
	workers  sync.WaitGroup     // shared scans and evicted sessions' closing
	creating sync.WaitGroup     // requests that may create an MCP session
	base     context.Context    // cancelled by Close: ends calls' contexts, keepalives and scans
	stop     context.CancelFunc // cancels base
	closeOne sync.Once
}

// New returns a Server that serves the tools of m and reads the callers' sessions through
// client, usually the one m was created with. It returns an error for a nil Manager or
// client, or an invalid option.
func New(m *asyncagents.Manager, client opencode.Client, opts ...Option) (*Server, error) {
	if m == nil {
		return nil, errors.New("mcpserver: nil Manager")
	}
	if client == nil {
		return nil, errors.New("mcpserver: nil client")
	}
	cfg := defaultConfig()
	for _, o := range opts {
		o.apply(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Server{m: m, client: client, cfg: cfg, prefix: m.ToolPrefix(), tools: map[string]asyncagents.Tool{}}
	s.base, s.stop = context.WithCancel(context.Background())
	if cfg.tokenSet {
		s.token = sha256.Sum256([]byte(cfg.token))
	}
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: s.prefix, Title: "asyncagents", Version: moduleVersion()},
		&mcp.ServerOptions{Logger: cfg.logger, Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}}})
	for _, t := range asyncagents.Tools(m) {
		s.tools[t.Name] = t
		s.mcp.AddTool(&mcp.Tool{Name: strings.TrimPrefix(t.Name, s.prefix+"_"), Description: t.Description,
			InputSchema: t.Parameters}, s.toolHandler(t.Name))
	}
	// The SDK's localhost protection (DisableLocalhostProtection false) stays on.
	s.http = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp },
		&mcp.StreamableHTTPOptions{Logger: cfg.logger, SessionTimeout: cfg.sessionTimeout})
	s.mcpSes = sessions{mcp: s.mcp, max: cfg.maxSessions, now: time.Now, known: map[string]*sessionUse{},
		closeSession: func(ss *mcp.ServerSession) {
			s.spawn(func(context.Context) { _ = ss.Close() }) // after Close, Close closes it
		}}
	s.scans = scanner{read: s.readRunning, spawn: s.spawn}
	return s, nil
}

// spawn runs f on a goroutine the Server owns, with a ctx that Close cancels, and reports
// true; after Close it runs nothing and reports false.
func (s *Server) spawn(f func(ctx context.Context)) bool {
	if !s.track(&s.workers) {
		return false
	}
	go func() {
		defer s.workers.Done()
		f(s.base)
	}()
	return true
}

// moduleVersion is the version of this module in the host's build, "(devel)" when unknown.
func moduleVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range append([]*debug.Module{&bi.Main}, bi.Deps...) {
			if d.Path == "github.com/asyncagents/asyncagents" && d.Version != "" {
				return d.Version
			}
		}
	}
	return "(devel)"
}

// ServeHTTP serves MCP's streamable HTTP transport: POST for the client's messages (the
// answers stream as server-sent events, progress notifications first), GET for the
// client's event stream, DELETE to end an MCP session. It answers, before anything runs:
// 503 after [Server.Close]; 403 Forbidden to a request a web page may have sent (an Origin
// that [WithAllowedOrigins] does not allow, a Sec-Fetch-Site of another site, or a Host
// that is not a loopback name on a loopback connection); 401 without the bearer token
// ([WithToken]); 503 with "Retry-After: 1" to a new session beyond [WithMaxSessions]
// when no session can be closed for it. An idle session is closed after
// [WithSessionTimeout]; a request naming it gets 404. Calls last as long as their
// handlers, up to the 600 s of a blocking output: mount the handler on an [http.Server]
// without a WriteTimeout, or a longer one.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		http.Error(w, ErrClosed.Error(), http.StatusServiceUnavailable)
		return
	}
	if why := s.refuseBrowser(r); why != "" {
		s.cfg.logger.Warn("mcpserver: request refused", "reason", why, "origin", cut(r.Header.Get("Origin")),
			"host", cut(r.Host), "remote", r.RemoteAddr)
		http.Error(w, "Forbidden: "+why, http.StatusForbidden)
		return
	}
	if s.cfg.tokenSet && !s.authorized(r) {
		s.cfg.logger.Warn("mcpserver: request without a valid bearer token", "method", r.Method, "remote", r.RemoteAddr)
		w.Header().Set("WWW-Authenticate", `Bearer realm="asyncagents"`)
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	if id := r.Header.Get(sessionIDHeader); id != "" {
		defer s.mcpSes.use(id)()
		s.http.ServeHTTP(w, r)
		return
	}
	if r.Method != http.MethodPost { // the SDK refuses it: no session is created
		s.http.ServeHTTP(w, r)
		return
	}
	if !s.track(&s.creating) {
		http.Error(w, ErrClosed.Error(), http.StatusServiceUnavailable)
		return
	}
	defer s.creating.Done()
	done, ok := s.mcpSes.admit()
	if !ok {
		s.cfg.logger.Warn("mcpserver: new MCP session refused: every session is in use", "max", s.cfg.maxSessions, "remote", r.RemoteAddr)
		w.Header().Set("Retry-After", "1")
		http.Error(w, "mcpserver: too many MCP sessions in use", http.StatusServiceUnavailable)
		return
	}
	defer func() { done(w.Header().Get(sessionIDHeader)) }()
	s.http.ServeHTTP(w, r)
}

// track adds one to wg unless the Server is closed: Close waits for wg after it set closed.
func (s *Server) track(wg *sync.WaitGroup) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	wg.Add(1)
	return true
}

// authorized reports whether r carries the bearer token. Both sides are hashed first, so
// that the comparison takes the same time whatever the length of the token sent.
func (s *Server) authorized(r *http.Request) bool {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	return subtle.ConstantTimeCompare(got[:], s.token[:]) == 1
}

// Close ends the calls in progress (their handlers' contexts are cancelled and their
// keepalives stop), waits for them, and closes the MCP sessions; later requests get 503.
// It does not close the Manager or the client. It is idempotent and returns nil.
func (s *Server) Close() error {
	s.closeOne.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.stop()
		s.calls.Wait()
		s.creating.Wait() // then no session is created any more
		for ss := range s.mcp.Sessions() {
			_ = ss.Close()
		}
		s.workers.Wait()
	})
	return nil
}

// toolHandler is the MCP handler of the tool named name ("<prefix>_<tool>").
func (s *Server) toolHandler(name string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var (
			args json.RawMessage
			meta mcp.Meta
			tok  any
		)
		if req.Params != nil {
			args, meta, tok = req.Params.Arguments, req.Params.Meta, req.Params.GetProgressToken()
		}
		var progress func(ctx context.Context, n int) error
		if tok != nil && req.Session != nil {
			progress = func(ctx context.Context, n int) error {
				return req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok,
					Progress: float64(n), Message: "running"})
			}
		}
		text, err := s.call(ctx, name, args, meta, progress)
		if err != nil {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}, nil
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil
	}
}

// call runs one call of the tool named name: it finds the caller, runs the handler and
// sends progress every keepalive period meanwhile (when progress is not nil). Every failure
// is an error for the model; a panic is recovered into one.
func (s *Server) call(ctx context.Context, name string, raw json.RawMessage, meta mcp.Meta,
	progress func(context.Context, int) error) (text string, err error) {
	tool, ok := s.tools[name]
	if !ok {
		return "", fmt.Errorf("mcpserver: unknown tool %q", name)
	}
	if !s.track(&s.calls) {
		return "", ErrClosed
	}
	defer s.calls.Done()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer context.AfterFunc(s.base, func() { cancel(ErrClosed) })()

	if progress != nil {
		done := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go s.keepalive(ctx, progress, done, &wg)
		defer wg.Wait()
		defer close(done)
	}
	defer func() {
		if v := recover(); v != nil {
			s.cfg.logger.Error("mcpserver: panic in a call", "tool", name, "panic", v, "stack", string(debug.Stack()))
			text, err = "", fmt.Errorf("mcpserver: internal error in %s: %v", name, v)
		}
	}()

	args := parseArgs(raw)
	caller, release, err := s.resolve(ctx, name, args, meta)
	if err != nil {
		s.cfg.logger.Warn("mcpserver: caller not found", "tool", name, "error", err)
		return "", err
	}
	defer release()
	start := time.Now()
	text, err = tool.Handler(ctx, caller, args.handler)
	s.cfg.logger.Debug("mcpserver: call done", "tool", name, "session", caller.SessionID,
		"duration", time.Since(start), "failed", err != nil, "cause", context.Cause(ctx))
	return text, err
}

// keepalive calls progress every keepalive period until done is closed or ctx ends.
func (s *Server) keepalive(ctx context.Context, progress func(context.Context, int) error, done <-chan struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	t := time.NewTicker(s.cfg.keepalive)
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-t.C:
			if err := progress(ctx, n); err != nil {
				s.cfg.logger.Debug("mcpserver: progress notification failed", "error", err)
			}
		}
	}
}
