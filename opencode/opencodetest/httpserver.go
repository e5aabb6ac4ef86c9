package opencodetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/asyncagents/asyncagents/opencode"
)

// HTTPServer serves an [opencode.Client] over OpenCode 1.18.33's HTTP API on a loopback
// port, so that code can be tested through [opencode.HTTPClient] — the client hosts use —
// against a [FakeClient] or any other Client: every request is decoded, handed to the
// backing client, and its answer or error written as `opencode serve` writes it.
//
// Routes (a directory is the query parameter directory, else the header
// x-opencode-directory, else "": the backing client's default):
//
//	POST /session                              CreateSession (body CreateSessionRequest) → 200 Session
//	GET  /session/status                       SessionStatus(directory) → 200 {id: SessionStatus}
//	GET  /session/{id}                         GetSession → 200 Session
//	GET  /session/{id}/message                 Messages(id, 0) → 200 [Message]
//	GET  /session/{id}/message?limit=N         MessagesBefore(id, N, "") → 200 [Message]
//	GET  /session/{id}/message?limit=N&before=C
//	                                           MessagesBefore(id, N, C) → 200 [Message]; a next
//	                                           cursor goes in X-Next-Cursor (and Link rel="next")
//	GET  /session/{id}/message/{messageID}     Message → 200 Message
//	POST /session/{id}/message                 Prompt (body PromptRequest) → 200 Message
//	POST /session/{id}/prompt_async            PromptAsync → 204, no body
//	POST /session/{id}/abort                   Abort → 200 true
//	GET  /agent                                Agents(directory) → 200 [Agent]
//	GET  /permission                           Permissions(directory) → 200 [Permission]
//	POST /permission/{id}/reply                ReplyPermission(directory, id, body) → 200 true
//	GET  /global/event                         Events, as Server-Sent Events (below)
//	GET  /global/health                        200 {"healthy": true, "version": "1.18.33"}
//
// A request with a limit is answered by MessagesBefore even when it came from
// [opencode.HTTPClient.Messages]: the two send the same request. A limit that is not an
// integer is HTTP 400 (BadRequest), and so is before without a positive limit, as on
// OpenCode; a body that is not JSON is HTTP 500 (UnknownError). Any other route is HTTP 404
// (NotFoundError).
//
// An error of the backing client becomes the answer: an [*opencode.APIError] is written
// with its StatusCode and its Body, or, when it has no body, {"name": Name, "data":
// {"message": Message}}, so HTTPClient reads the same APIError (an unknown session matches
// [opencode.ErrNotFound]); any other error is HTTP 500 {"name": "UnknownError", "data":
// {"message": err.Error()}}.
//
// GET /global/event opens a stream of the backing client before it answers 200
// (Content-Type text/event-stream), so the subscription is live when HTTPClient.Events
// returns, and writes each event as one frame, sent at once (a burst goes out in a few large
// writes; at most 64 KB of frames wait for a slow client, the rest in the backing stream):
//
//	data: {"directory": Event.Directory, "payload": {"id", "type", "properties"}}
//
// with Properties copied as they are, not re-encoded (so they must be valid JSON, as every
// Client gives them). The first frame is the backing stream's first event (server.connected
// for a Client that keeps the contract). A server.heartbeat frame goes out every heartbeat
// interval ([WithHeartbeat]), as OpenCode sends one every 10 s. The stream ends, cleanly, when the
// backing stream ends (a [FakeClient.DropEvents], say), when the client goes away, or on
// Close; HTTPClient then reads [io.EOF].
//
// Like [httptest.Server], an HTTPServer is created running and stopped with
// [HTTPServer.Close]. It is safe for concurrent use. It owns the goroutines that serve its
// connections and, per event stream, one that reads the backing stream; Close ends them. It
// does not close the backing client.
type HTTPServer struct {
	// URL is the server's base URL, e.g. "http://127.0.0.1:41235": what
	// [opencode.NewHTTPClient] is given.
	URL string

	c         opencode.Client
	cfg       httpServerConfig
	srv       *httptest.Server
	mux       *http.ServeMux
	ctx       context.Context // cancelled by Close: ends event streams and calls in progress
	cancel    context.CancelFunc
	closeOnce sync.Once

	mu      sync.Mutex
	clients []*opencode.HTTPClient
}

// HTTPServerOption configures [NewHTTPServer].
type HTTPServerOption interface{ applyHTTPServer(*httpServerConfig) }

type httpServerOptionFunc func(*httpServerConfig)

func (f httpServerOptionFunc) applyHTTPServer(c *httpServerConfig) { f(c) }

type httpServerConfig struct {
	heartbeat time.Duration
}

// DefaultHeartbeat is how often an [HTTPServer] sends server.heartbeat on a quiet event
// stream, as OpenCode does.
const DefaultHeartbeat = 10 * time.Second

func defaultHTTPServerConfig() httpServerConfig {
	return httpServerConfig{heartbeat: DefaultHeartbeat}
}

// WithHeartbeat sets how often the server sends server.heartbeat on each event stream. Defaults to [DefaultHeartbeat]; must be positive.
func WithHeartbeat(d time.Duration) HTTPServerOption {
	return httpServerOptionFunc(func(c *httpServerConfig) { c.heartbeat = d })
}

// NewHTTPServer starts a server on a loopback port that serves c. Like
// [httptest.NewServer] it has no error to return: it panics when an option is invalid (a
// heartbeat that is not positive). Close it when done.
func NewHTTPServer(c opencode.Client, opts ...HTTPServerOption) *HTTPServer {
	cfg := defaultHTTPServerConfig()
	for _, o := range opts {
		o.applyHTTPServer(&cfg)
	}
	if cfg.heartbeat <= 0 {
		panic(fmt.Sprintf("opencodetest: NewHTTPServer: heartbeat %v must be positive", cfg.heartbeat))
	}
	s := &HTTPServer{c: c, cfg: cfg, mux: http.NewServeMux()}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.routes()
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	s.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	s.srv.Start()
	s.URL = s.srv.URL
	return s
}

// Client returns a new client for the server, built as a host builds one:
// [opencode.NewHTTPClient] with opts and nothing else. Close closes its idle connections.
func (s *HTTPServer) Client(opts ...opencode.ClientOption) *opencode.HTTPClient {
	c, err := opencode.NewHTTPClient(s.URL, opts...)
	if err != nil {
		panic(err) // the URL is the server's own; only an invalid option gets here
	}
	s.mu.Lock()
	s.clients = append(s.clients, c)
	s.mu.Unlock()
	return c
}

// Close stops the server: calls in progress see their context cancelled, event streams
// end, and Close waits for every handler, as [httptest.Server.Close] does, then closes the
// idle connections of the clients [HTTPServer.Client] returned. A backing call that ignores
// its context holds Close up until it returns. It is idempotent.
func (s *HTTPServer) Close() {
	s.closeOnce.Do(func() {
		s.cancel()
		s.srv.Close()
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, c := range s.clients {
			c.CloseIdleConnections()
		}
	})
}

func (s *HTTPServer) routes() {
	s.mux.HandleFunc("POST /session", s.createSession)
	s.mux.HandleFunc("GET /session/status", s.sessionStatus)
	s.mux.HandleFunc("GET /session/{id}", s.getSession)
	s.mux.HandleFunc("GET /session/{id}/message", s.messages)
	s.mux.HandleFunc("GET /session/{id}/message/{messageID}", s.message)
	s.mux.HandleFunc("POST /session/{id}/message", s.prompt)
	s.mux.HandleFunc("POST /session/{id}/prompt_async", s.promptAsync)
	s.mux.HandleFunc("POST /session/{id}/abort", s.abort)
	s.mux.HandleFunc("POST /session/{id}/fork", s.fork)
	s.mux.HandleFunc("PATCH /session/{id}", s.updateSession)
	s.mux.HandleFunc("GET /agent", s.agents)
	s.mux.HandleFunc("GET /permission", s.permissions)
	s.mux.HandleFunc("POST /permission/{id}/reply", s.replyPermission)
	s.mux.HandleFunc("GET /global/event", s.events)
	s.mux.HandleFunc("GET /global/health", s.health)
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeAPIError(w, http.StatusNotFound, "NotFoundError", "no route for "+r.Method+" "+r.URL.Path)
	})
}

// serve hands r to its route with a context that Close also cancels.
func (s *HTTPServer) serve(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(s.ctx, cancel)()
	s.mux.ServeHTTP(w, r.WithContext(ctx))
}

// directory is the instance a request names: ?directory=, else x-opencode-directory.
func directory(r *http.Request) string {
	if d := r.URL.Query().Get("directory"); d != "" {
		return d
	}
	return r.Header.Get("x-opencode-directory")
}

// decodeBody decodes a JSON body into v; an empty body leaves v as it is. It writes the
// error answer and returns false when the body is not JSON.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	err := json.NewDecoder(r.Body).Decode(v)
	if err == nil || errors.Is(err, io.EOF) {
		return true
	}
	writeAPIError(w, http.StatusInternalServerError, "UnknownError", "opencodetest: decode body: "+err.Error())
	return false
}

// answer writes v as JSON with status 200, or err as the server would.
func answer(w http.ResponseWriter, v any, err error) {
	if err != nil {
		writeErr(w, err)
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		writeAPIError(w, http.StatusInternalServerError, "UnknownError", "opencodetest: encode answer: "+err.Error())
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	_, _ = w.Write(b)
}

// writeErr writes an error of the backing client: an *opencode.APIError with its status and
// body, anything else as OpenCode's UnknownError.
func writeErr(w http.ResponseWriter, err error) {
	var ae *opencode.APIError
	if !errors.As(err, &ae) {
		writeAPIError(w, http.StatusInternalServerError, "UnknownError", err.Error())
		return
	}
	status := ae.StatusCode
	if status < 400 || status > 599 {
		status = http.StatusInternalServerError
	}
	if len(ae.Body) == 0 && (ae.Name != "" || ae.Message != "") {
		writeAPIError(w, status, ae.Name, ae.Message)
		return
	}
	if len(ae.Body) > 0 {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(status)
	_, _ = w.Write(ae.Body)
}

// writeAPIError answers status with a body in OpenCode's {"name", "data": {"message"}}
// shape, which [opencode.APIError] reads.
func writeAPIError(w http.ResponseWriter, status int, name, msg string) {
	b, _ := json.Marshal(map[string]any{"name": name, "data": map[string]string{"message": msg}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func (s *HTTPServer) createSession(w http.ResponseWriter, r *http.Request) {
	var req opencode.CreateSessionRequest
	if !decodeBody(w, r, &req) {
		return
	}
	req.Directory = directory(r)
	sess, err := s.c.CreateSession(r.Context(), req)
	answer(w, sess, err)
}

func (s *HTTPServer) sessionStatus(w http.ResponseWriter, r *http.Request) {
	st, err := s.c.SessionStatus(r.Context(), directory(r))
	if st == nil && err == nil {
		st = map[string]opencode.SessionStatus{}
	}
	answer(w, st, err)
}

func (s *HTTPServer) getSession(w http.ResponseWriter, r *http.Request) {
	sess, err := s.c.GetSession(r.Context(), r.PathValue("id"))
	answer(w, sess, err)
}

func (s *HTTPServer) messages(w http.ResponseWriter, r *http.Request) {
	id, q := r.PathValue("id"), r.URL.Query()
	limit := 0
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			writeAPIError(w, http.StatusBadRequest, "BadRequest", "Expected an integer, got NaN\n  at [\"limit\"]")
			return
		}
		limit = n
	}
	before := q.Get("before")
	switch {
	case before != "" && limit < 1:
		writeAPIError(w, http.StatusBadRequest, "BadRequest", "before needs a positive limit")
	case limit < 1:
		msgs, err := s.c.Messages(r.Context(), id, 0)
		answer(w, nonNil(msgs), err)
	default:
		msgs, next, err := s.c.MessagesBefore(r.Context(), id, limit, before)
		if err == nil && next != "" {
			nq := url.Values{"limit": {strconv.Itoa(limit)}, "before": {next}}
			if d := q.Get("directory"); d != "" {
				nq.Set("directory", d)
			}
			w.Header().Set("Link", "<"+s.URL+"/session/"+url.PathEscape(id)+"/message?"+nq.Encode()+`>; rel="next"`)
			w.Header().Set("X-Next-Cursor", next)
			w.Header().Set("Access-Control-Expose-Headers", "Link, X-Next-Cursor")
		}
		answer(w, nonNil(msgs), err)
	}
}

// nonNil makes an empty list [] rather than null, as OpenCode writes it.
func nonNil[T any](v []T) []T {
	if v == nil {
		return []T{}
	}
	return v
}

func (s *HTTPServer) message(w http.ResponseWriter, r *http.Request) {
	m, err := s.c.Message(r.Context(), r.PathValue("id"), r.PathValue("messageID"))
	answer(w, m, err)
}

func (s *HTTPServer) prompt(w http.ResponseWriter, r *http.Request) {
	var req opencode.PromptRequest
	if !decodeBody(w, r, &req) {
		return
	}
	m, err := s.c.Prompt(r.Context(), r.PathValue("id"), req)
	answer(w, m, err)
}

func (s *HTTPServer) promptAsync(w http.ResponseWriter, r *http.Request) {
	var req opencode.PromptRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if err := s.c.PromptAsync(r.Context(), r.PathValue("id"), req); err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *HTTPServer) abort(w http.ResponseWriter, r *http.Request) {
	answer(w, true, s.c.Abort(r.Context(), r.PathValue("id")))
}

func (s *HTTPServer) fork(w http.ResponseWriter, r *http.Request) {
	var req opencode.ForkSessionRequest
	if !decodeBody(w, r, &req) {
		return
	}
	req.Directory = directory(r)
	sess, err := s.c.ForkSession(r.Context(), r.PathValue("id"), req)
	answer(w, sess, err)
}

// updateSession serves PATCH /session/{id} with the client's UpdateSession, when it has one
// (FakeClient does).
func (s *HTTPServer) updateSession(w http.ResponseWriter, r *http.Request) {
	u, ok := s.c.(interface {
		UpdateSession(context.Context, string, opencode.UpdateSessionRequest) (*opencode.Session, error)
	})
	if !ok {
		http.NotFound(w, r)
		return
	}
	var req opencode.UpdateSessionRequest
	if !decodeBody(w, r, &req) {
		return
	}
	req.Directory = directory(r)
	sess, err := u.UpdateSession(r.Context(), r.PathValue("id"), req)
	answer(w, sess, err)
}

func (s *HTTPServer) agents(w http.ResponseWriter, r *http.Request) {
	a, err := s.c.Agents(r.Context(), directory(r))
	answer(w, nonNil(a), err)
}

func (s *HTTPServer) permissions(w http.ResponseWriter, r *http.Request) {
	p, err := s.c.Permissions(r.Context(), directory(r))
	answer(w, nonNil(p), err)
}

func (s *HTTPServer) replyPermission(w http.ResponseWriter, r *http.Request) {
	var reply opencode.PermissionReply
	if !decodeBody(w, r, &reply) {
		return
	}
	answer(w, true, s.c.ReplyPermission(r.Context(), directory(r), r.PathValue("id"), reply))
}

func (s *HTTPServer) health(w http.ResponseWriter, _ *http.Request) {
	answer(w, map[string]any{"healthy": true, "version": fakeVersion}, nil)
}
