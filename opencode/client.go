package opencode

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/asyncagents/asyncagents/internal/scan"
)

// Client is what the asyncagents Manager needs from an OpenCode server. [HTTPClient]
// implements it for `opencode serve`; opencodetest.FakeClient is an in-memory implementation
// for tests. Implementations are safe for concurrent use.
//
// Errors the server answers with are [*APIError] values; an unknown session matches
// [ErrNotFound]. Methods that take a directory use it to pick the server instance (empty: the
// client's default directory).
type Client interface {
	// CreateSession creates a session (POST /session) in req.Directory, or the client's
	// default directory when it is empty.
	CreateSession(ctx context.Context, req CreateSessionRequest) (*Session, error)
	// GetSession returns a session (GET /session/{id}).
	GetSession(ctx context.Context, id string) (*Session, error)
	// ForkSession copies a session's messages, those before req.MessageID ("" for all), into
	// a new session in req.Directory that is not its child (POST /session/{id}/fork).
	ForkSession(ctx context.Context, id string, req ForkSessionRequest) (*Session, error)
	// UpdateSession adds req.Permission to a session's rules (PATCH /session/{id}).
	UpdateSession(ctx context.Context, id string, req UpdateSessionRequest) (*Session, error)
	// DeleteSession deletes a session and its children (DELETE /session/{id}).
	DeleteSession(ctx context.Context, id string) error
	// Messages returns the last limit messages of a session, oldest first; 0 means all
	// (GET /session/{id}/message).
	Messages(ctx context.Context, sessionID string, limit int) ([]Message, error)
	// MessagesBefore returns one page of a session's messages, oldest first: the limit
	// newest messages older than the cursor before ("" for the newest), and the cursor of
	// the next older page, "" when there is none (GET /session/{id}/message?limit&before).
	MessagesBefore(ctx context.Context, sessionID string, limit int, before string) (msgs []Message, next string, err error)
	// Message returns one message of a session (GET /session/{id}/message/{messageID}).
	Message(ctx context.Context, sessionID, messageID string) (*Message, error)
	// Prompt sends a prompt and waits for the agent loop (POST /session/{id}/message).
	Prompt(ctx context.Context, sessionID string, req PromptRequest) (*Message, error)
	// PromptAsync starts the agent loop and returns at once (POST /session/{id}/prompt_async).
	PromptAsync(ctx context.Context, sessionID string, req PromptRequest) error
	// Abort stops a session's agent loop (POST /session/{id}/abort).
	Abort(ctx context.Context, sessionID string) error
	// SessionStatus returns the sessions of a directory that are not idle (GET /session/status).
	SessionStatus(ctx context.Context, directory string) (map[string]SessionStatus, error)
	// Agents lists the agents of a directory's instance (GET /agent): a project may define
	// its own.
	Agents(ctx context.Context, directory string) ([]Agent, error)
	// Permissions lists the pending permission requests of a directory's instance
	// (GET /permission).
	Permissions(ctx context.Context, directory string) ([]Permission, error)
	// ReplyPermission answers a pending permission request of a directory's instance
	// (POST /permission/{id}/reply).
	ReplyPermission(ctx context.Context, directory, requestID string, reply PermissionReply) error
	// Events subscribes to the server's events (GET /global/event).
	Events(ctx context.Context) (EventStream, error)
}

var _ Client = (*HTTPClient)(nil)

// HTTPClient talks to `opencode serve` over HTTP. It is safe for concurrent use.
type HTTPClient struct {
	base      *url.URL
	hc        *http.Client
	username  string
	password  string
	directory string
	stall     time.Duration
}

// ClientOption configures an HTTPClient.
type ClientOption interface{ applyClient(*HTTPClient) }

type clientOptionFunc func(*HTTPClient)

func (f clientOptionFunc) applyClient(c *HTTPClient) { f(c) }

// WithHTTPClient sets the *http.Client used for every request. Defaults to a client with no
// overall timeout (the event stream is long-lived; pass deadlines through ctx) whose
// transport, a clone of [http.DefaultTransport], keeps up to [DefaultIdleConns] idle
// connections to the server instead of net/http's 2, so a busy Manager reuses its
// connections rather than opening new ones.
func WithHTTPClient(hc *http.Client) ClientOption {
	return clientOptionFunc(func(c *HTTPClient) { c.hc = hc })
}

// DefaultIdleConns is how many idle connections the default transport keeps per host.
const DefaultIdleConns = 64

func defaultHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns, t.MaxIdleConnsPerHost = DefaultIdleConns, DefaultIdleConns
	return &http.Client{Transport: t}
}

// WithBasicAuth sets the credentials of a server started with OPENCODE_SERVER_PASSWORD.
// The username is "opencode" unless the server set OPENCODE_SERVER_USERNAME.
func WithBasicAuth(username, password string) ClientOption {
	return clientOptionFunc(func(c *HTTPClient) { c.username, c.password = username, password })
}

// WithDirectory scopes every request to the server instance of dir (header
// x-opencode-directory): sessions are created there and /session/status, /agent and
// /permission answer for it. Defaults to the server's working directory.
func WithDirectory(dir string) ClientOption {
	return clientOptionFunc(func(c *HTTPClient) { c.directory = dir })
}

// DefaultStallTimeout is how long an event stream of [HTTPClient] may be silent before it
// ends with [ErrStreamStalled]. OpenCode sends server.heartbeat every 10 s.
const DefaultStallTimeout = 25 * time.Second

// WithStallTimeout sets how long an event stream may stay silent before it is treated as
// dead. Defaults to [DefaultStallTimeout]; must be positive.
func WithStallTimeout(d time.Duration) ClientOption {
	return clientOptionFunc(func(c *HTTPClient) { c.stall = d })
}

// NewHTTPClient returns a client for the server at baseURL (e.g. "http://127.0.0.1:4096").
// It returns an error for a URL that is not absolute http(s) or a non-positive stall timeout.
func NewHTTPClient(baseURL string, opts ...ClientOption) (*HTTPClient, error) {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("opencode: base URL %q must be an absolute http(s) URL", baseURL)
	}
	c := &HTTPClient{base: u, hc: defaultHTTPClient(), stall: DefaultStallTimeout}
	for _, o := range opts {
		o.applyClient(c)
	}
	if c.stall <= 0 {
		return nil, fmt.Errorf("opencode: stall timeout %v must be positive", c.stall)
	}
	if c.hc == nil {
		return nil, errors.New("opencode: nil *http.Client")
	}
	return c, nil
}

// CloseIdleConnections closes the connections to the server that are kept for reuse, as
// [http.Client.CloseIdleConnections] does; call it when done with the client.
func (c *HTTPClient) CloseIdleConnections() { c.hc.CloseIdleConnections() }

// BaseURL returns the server's base URL.
func (c *HTTPClient) BaseURL() string { return c.base.String() }

func (c *HTTPClient) newRequest(ctx context.Context, method, path string, query url.Values, body any) (*http.Request, error) {
	u := *c.base
	u.Path = c.base.Path + path
	u.RawQuery = query.Encode()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("opencode: encode %s %s: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, fmt.Errorf("opencode: %s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.directory != "" && query.Get("directory") == "" {
		req.Header.Set("x-opencode-directory", c.directory)
	}
	if c.password != "" {
		user := c.username
		if user == "" {
			user = "opencode"
		}
		req.SetBasicAuth(user, c.password)
	}
	return req, nil
}

// do sends a request and decodes a 2xx JSON answer into out (nil: discard).
func (c *HTTPClient) do(ctx context.Context, method, path string, query url.Values, body, out any) error {
	_, err := c.doHeader(ctx, method, path, query, body, out)
	return err
}

// doHeader is do that also returns the header of a 2xx answer.
func (c *HTTPClient) doHeader(ctx context.Context, method, path string, query url.Values, body, out any) (http.Header, error) {
	req, err := c.newRequest(ctx, method, path, query, body)
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("opencode: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return nil, newAPIError(method, path, resp.StatusCode, b)
	}
	if out == nil || resp.StatusCode == http.StatusNoContent {
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.Header, nil
	}
	if raw, ok := out.(*rawAnswer); ok {
		if *raw, err = io.ReadAll(resp.Body); err != nil {
			return nil, fmt.Errorf("opencode: %s %s: read response: %w", method, path, err)
		}
		return resp.Header, nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return nil, fmt.Errorf("opencode: %s %s: decode response: %w", method, path, err)
	}
	return resp.Header, nil
}

func sessionPath(id string, rest string) string { return "/session/" + url.PathEscape(id) + rest }

// CreateSession creates a session (POST /session?directory=) and returns it. The session
// belongs to the instance of req.Directory (the client's directory when empty; OpenCode
// accepts a directory that does not exist): it runs there whatever directory later requests
// name, its tools work there and its model's system prompt names it. A ParentID makes it a
// child session (OpenCode accepts a parent that does not exist, and does not require it to
// be in the same directory); a Title avoids OpenCode's extra title-generation model call on
// the first prompt; Permission rules are stored on the session and apply to every prompt.
func (c *HTTPClient) CreateSession(ctx context.Context, req CreateSessionRequest) (*Session, error) {
	var s Session
	if err := c.do(ctx, http.MethodPost, "/session", dirQuery(req.Directory), req, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// GetSession returns a session (GET /session/{id}). An unknown id fails with an [*APIError]
// matching [ErrNotFound].
func (c *HTTPClient) GetSession(ctx context.Context, id string) (*Session, error) {
	var s Session
	if err := c.do(ctx, http.MethodGet, sessionPath(id, ""), nil, nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// DeleteSession deletes a session and its children (DELETE /session/{id}); OpenCode emits
// session.deleted for each. An unknown id matches [ErrNotFound]. OpenCode does not stop a
// busy session it deletes: Abort first.
func (c *HTTPClient) DeleteSession(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, sessionPath(id, ""), nil, nil, nil)
}

// Children returns the child sessions of id, oldest first (GET /session/{id}/children).
// Forks are not children.
func (c *HTTPClient) Children(ctx context.Context, id string) ([]Session, error) {
	var s []Session
	if err := c.do(ctx, http.MethodGet, sessionPath(id, "/children"), nil, nil, &s); err != nil {
		return nil, err
	}
	return s, nil
}

// ForkSessionRequest is what [HTTPClient.ForkSession] sends.
type ForkSessionRequest struct {
	// MessageID cuts the copy: only the messages created strictly before it are copied (an
	// id the session does not have copies them all); "" copies all of them.
	MessageID string `json:"messageID,omitempty"`
	// Directory is the instance the request goes to (?directory=); "" uses the client's
	// default. It does not move the fork: OpenCode 1.18.33 puts a fork in the original
	// session's directory, whatever the request names.
	Directory string `json:"-"`
}

// ForkSession copies session id into a new session (POST /session/{id}/fork?directory=) and
// returns it. OpenCode 1.18.33 gives the copies new message and part ids and keeps their
// content, tool states, tokens and finish; the new session has no ParentID (it is not a
// child of id), the title "<title> (fork #n)", and no usage yet. An unknown id matches
// [ErrNotFound].
func (c *HTTPClient) ForkSession(ctx context.Context, id string, req ForkSessionRequest) (*Session, error) {
	var s Session
	if err := c.do(ctx, http.MethodPost, sessionPath(id, "/fork"), dirQuery(req.Directory), req, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// UpdateSessionRequest is what [HTTPClient.UpdateSession] sends.
type UpdateSessionRequest struct {
	// Permission rules are appended to the session's own: OpenCode 1.18.33 keeps the rules a
	// session has and adds these after them (the last matching rule wins), so rules can be
	// added and never taken away.
	Permission []PermissionRule `json:"permission,omitempty"`
	// Directory is the session's project directory (?directory=); "" uses the client's
	// default.
	Directory string `json:"-"`
}

// UpdateSession changes a session (PATCH /session/{id}?directory=) and returns it as it is
// now. An unknown id matches [ErrNotFound]. The Manager adds a native fork's permission rules
// with it: OpenCode's fork copies none of the original's and takes none in its request.
func (c *HTTPClient) UpdateSession(ctx context.Context, id string, req UpdateSessionRequest) (*Session, error) {
	var s Session
	if err := c.do(ctx, http.MethodPatch, sessionPath(id, ""), dirQuery(req.Directory), req, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// Messages returns a session's messages, oldest first (GET /session/{id}/message). A limit
// above 0 returns only the last limit messages, still oldest first; 0 returns all of them.
// An unknown session matches [ErrNotFound].
func (c *HTTPClient) Messages(ctx context.Context, sessionID string, limit int) ([]Message, error) {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var m []Message
	if err := c.do(ctx, http.MethodGet, sessionPath(sessionID, "/message"), q, nil, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// MessagesBefore returns one page of a session's messages, oldest first (GET
// /session/{id}/message?limit=N&before=CURSOR): the limit newest messages older than the
// cursor before, or the newest limit messages for before "", and next, the cursor of the
// page before this one (OpenCode's X-Next-Cursor header), "" on the last page. Reading pages
// from "" until next is "" returns every message once, newest page first. A cursor is opaque
// (OpenCode's is base64url JSON naming the oldest message of its page) and stays valid when
// newer messages arrive. limit must be positive (OpenCode ignores before without a limit);
// a cursor the server cannot read fails with an [*APIError] of status 400 (BadRequest), an
// unknown session matches [ErrNotFound].
func (c *HTTPClient) MessagesBefore(ctx context.Context, sessionID string, limit int, before string) ([]Message, string, error) {
	if limit < 1 {
		return nil, "", fmt.Errorf("opencode: MessagesBefore: limit %d must be positive", limit)
	}
	q := url.Values{"limit": {strconv.Itoa(limit)}}
	if before != "" {
		q.Set("before", before)
	}
	var m []Message
	h, err := c.doHeader(ctx, http.MethodGet, sessionPath(sessionID, "/message"), q, nil, &m)
	if err != nil {
		return nil, "", err
	}
	return m, h.Get("X-Next-Cursor"), nil
}

// Message returns one message of a session (GET /session/{id}/message/{messageID}). An
// unknown session or message matches [ErrNotFound].
func (c *HTTPClient) Message(ctx context.Context, sessionID, messageID string) (*Message, error) {
	var m Message
	if err := c.do(ctx, http.MethodGet, sessionPath(sessionID, "/message/"+url.PathEscape(messageID)), nil, nil, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// Prompt sends a prompt and waits (POST /session/{id}/message). OpenCode answers when the
// whole agent loop is idle, with only the last assistant message (a failed model call is
// still a success here, with Info.Error set). With NoReply it stores the user message, answers
// at once with it, and the model is not called. A busy session queues the prompt. An unknown
// agent or model fails with an [*APIError] of status 500 (UnknownError); an unknown session
// matches [ErrNotFound]. Cancelling ctx does not stop the run on the server.
func (c *HTTPClient) Prompt(ctx context.Context, sessionID string, req PromptRequest) (*Message, error) {
	var m Message
	if err := c.do(ctx, http.MethodPost, sessionPath(sessionID, "/message"), nil, req, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// PostMessage posts a message to a session as Prompt does (POST /session/{id}/message) and
// returns the id of the message the server answered with, without decoding the rest of the
// answer: for a post without reply (req.NoReply), whose answer is the posted message itself,
// parts and all, that saves decoding them again. An error status is an [*APIError] (an
// unknown session matches [ErrNotFound]); an answer that is not a message with an id (as
// OpenCode 1.14 gives for an unknown session: 200 and no body) is an error too.
func (c *HTTPClient) PostMessage(ctx context.Context, sessionID string, req PromptRequest) (id string, err error) {
	var body []byte
	path := sessionPath(sessionID, "/message")
	if err := c.do(ctx, http.MethodPost, path, nil, req, (*rawAnswer)(&body)); err != nil {
		return "", err
	}
	f, ok := scan.MessageInfo(body)
	if id = f.ID; !ok || id == "" {
		var m struct{ Info MessageInfo } // another shape: decoded (an escape in the id, say)
		if err := json.Unmarshal(body, &m); err != nil || m.Info.ID == "" {
			return "", fmt.Errorf("opencode: POST %s: the answer is not a message: %s", path, clip(body))
		}
		id = m.Info.ID
	}
	return id, nil
}

// rawAnswer is an answer's body, kept as it came (doHeader reads it whole).
type rawAnswer []byte

// clip returns the start of a body for an error message.
func clip(b []byte) string {
	const most = 200
	if len(b) > most {
		return strconv.Quote(string(b[:most])) + "…"
	}
	return strconv.Quote(string(b))
}

// PromptAsync starts the agent loop on a prompt and returns when the server accepted it
// (POST /session/{id}/prompt_async, HTTP 204, within milliseconds). Failures after that are
// reported only on the event stream and in the messages: an unknown agent gives two
// session.error events and nothing else (no message, no busy status); an unknown model or a
// failed model call gives session.error and an idle session. An unknown session matches
// [ErrNotFound].
func (c *HTTPClient) PromptAsync(ctx context.Context, sessionID string, req PromptRequest) error {
	return c.do(ctx, http.MethodPost, sessionPath(sessionID, "/prompt_async"), nil, req, nil)
}

// Abort stops a session's agent loop (POST /session/{id}/abort). OpenCode answers true for
// any id, busy, idle or unknown, and emits session.status idle and session.idle for it. The
// running assistant message ends with the error MessageAbortedError.
func (c *HTTPClient) Abort(ctx context.Context, sessionID string) error {
	return c.do(ctx, http.MethodPost, sessionPath(sessionID, "/abort"), nil, nil, nil)
}

// Summarize compacts a session (POST /session/{id}/summarize) and waits for it. OpenCode
// answers true even when the summary model call failed: check the last message.
func (c *HTTPClient) Summarize(ctx context.Context, sessionID string, model Model) error {
	return c.do(ctx, http.MethodPost, sessionPath(sessionID, "/summarize"), nil, model, nil)
}

// dirQuery is the query that names directory's instance; nil for "" (the client's).
func dirQuery(directory string) url.Values {
	if directory == "" {
		return nil
	}
	return url.Values{"directory": {directory}}
}

// SessionStatus returns the busy and retrying sessions of a directory's instance, by session
// id (GET /session/status); idle sessions are absent. An empty directory means the client's.
func (c *HTTPClient) SessionStatus(ctx context.Context, directory string) (map[string]SessionStatus, error) {
	st := map[string]SessionStatus{}
	if err := c.do(ctx, http.MethodGet, "/session/status", dirQuery(directory), nil, &st); err != nil {
		return nil, err
	}
	return st, nil
}

// Agents lists the agents of a directory's instance (GET /agent?directory=; the client's
// for ""), hidden ones included. The default set is build and plan (primary), general and
// explore (subagent), and the hidden compaction, summary and title; a project adds its own
// (.opencode/agent/, or "agent" in its opencode.json).
func (c *HTTPClient) Agents(ctx context.Context, directory string) ([]Agent, error) {
	var a []Agent
	if err := c.do(ctx, http.MethodGet, "/agent", dirQuery(directory), nil, &a); err != nil {
		return nil, err
	}
	return a, nil
}

// Permissions lists the pending permission requests of a directory's instance (GET
// /permission). An empty directory means the client's. A session waiting for one stays busy
// until it is answered with [HTTPClient.ReplyPermission] or the session is aborted (OpenCode
// keeps listing a request whose session was aborted).
func (c *HTTPClient) Permissions(ctx context.Context, directory string) ([]Permission, error) {
	var p []Permission
	if err := c.do(ctx, http.MethodGet, "/permission", dirQuery(directory), nil, &p); err != nil {
		return nil, err
	}
	return p, nil
}

// ReplyPermission answers a pending permission request (POST /permission/{id}/reply) of a
// directory's instance (empty: the client's); OpenCode emits permission.replied. A request
// that is not pending in that instance (answered already, or asked in another directory)
// fails with an [*APIError] matching [ErrNotFound] (PermissionNotFoundError).
func (c *HTTPClient) ReplyPermission(ctx context.Context, directory, requestID string, reply PermissionReply) error {
	return c.do(ctx, http.MethodPost, "/permission/"+url.PathEscape(requestID)+"/reply", dirQuery(directory), reply, nil)
}

// Health checks GET /global/health and returns the server version.
func (c *HTTPClient) Health(ctx context.Context) (version string, err error) {
	var h struct {
		Healthy bool   `json:"healthy"`
		Version string `json:"version"`
	}
	if err := c.do(ctx, http.MethodGet, "/global/health", nil, nil, &h); err != nil {
		return "", err
	}
	if !h.Healthy {
		return h.Version, errors.New("opencode: server reports unhealthy")
	}
	return h.Version, nil
}
