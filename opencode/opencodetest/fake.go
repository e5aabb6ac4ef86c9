package opencodetest

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/asyncagents/asyncagents/opencode"
)

// FakeClient is an in-memory OpenCode: an [opencode.Client] whose sessions, messages, agent
// loop and events follow what the real server (opencode 1.18.33) was observed to do, with the
// model scripted exactly as [Model] scripts it for a real server — queued replies
// ([FakeClient.Enqueue]), a [ScriptFunc] ([FakeClient.SetScript]), or the directives in the
// prompt text (RUN:, TOOL:, QUOTE:, SLEEP:, FAIL:, THINK; see [Directive]). A test written for
// a real [Server] behaves the same on the fake, without a binary and in milliseconds.
//
// What the fake copies from the real server:
//
//   - Sessions get ids "ses_" + 26 characters that sort newest first; messages and parts get
//     "msg_"/"prt_" ids that sort oldest first. A session without a title is titled
//     "New session - <time>" ("Child session - <time>" with a parent) and renamed by a title
//     request to the model on its first prompt.
//   - [FakeClient.MessagesBefore] pages a session's messages newest page first with cursors
//     like OpenCode's (base64url JSON naming the oldest message of a page); the last page has
//     none.
//   - Unknown sessions fail with an [*opencode.APIError] matching [opencode.ErrNotFound]
//     (HTTP 404, NotFoundError), as HTTPClient reports them; [FakeClient.Abort] of an unknown
//     id succeeds.
//   - [FakeClient.PromptAsync] returns at once. A goroutine the fake owns then runs the agent
//     loop: session.status busy, one assistant message per model step (tool steps end with
//     finish "tool-calls", the last with "stop"), the same message.updated,
//     message.part.updated and message.part.delta events in the same order, then
//     session.status idle and session.idle. Prompts sent while busy are queued.
//   - Tools: "bash" is simulated with the real outputs and exit codes of echo, printf, pwd,
//     true, false, exit, sleep, cd, cat and ls in an empty project (cat and ls find no file);
//     any other command is "command not found", exit 127. Other tools complete with no
//     output unless a [ToolFunc] decides (see [WithToolFunc]).
//   - Permissions: a bash command whose cat, cd, rm, cp, mv, mkdir, touch, chmod or chown
//     arguments name a path outside the project directory asks the external_directory
//     permission for that path's folder ("/no/such/*" for cat /no/such/file.txt):
//     permission.asked, and the session stays busy until [FakeClient.ReplyPermission] or
//     [FakeClient.Abort]. The session's permission rules are checked first (last matching
//     rule wins): "allow" runs the command, "deny" ends the tool part with status "error".
//   - Model failures: a reply with Status ≥ 400 fails the step with an APIError
//     (session.error, then idle); a 5xx is retried up to 5 times first, each retry shown as a
//     session.status "retry".
//   - An unknown agent gives two session.error events and nothing else (PromptAsync) or an
//     HTTP 500 error (Prompt); an unknown model (other than [ProviderID]/[ModelID]) gives
//     busy, session.error, idle.
//   - Abort ends a busy run with MessageAbortedError on its assistant message and the real
//     server's event sequence; everything it reports is done when it returns.
//   - Events go to any number of streams, each starting with server.connected.
//
// Where the fake differs: it sends no server.heartbeat and no plugin or catalog events; it
// retries 5xx answers at once (the real server waits 2 s, 4 s, … between them); it cannot
// know which paths are folders, so it asks for a path's parent folder unless the path ends in
// "/" (the real server asks for "/tmp/*" for cat /tmp); every step reports the same token
// usage (100 in, 20 out); it has no file system, compaction, fork, summarize or session
// deletion.
//
// Time: timestamps come from the clock ([WithClock]) and ids from a fixed seed, so with a fixed
// clock a run is the same every time. Runs take no time except where a reply asks for it:
// SLEEP:n (Reply.Delay) and the bash command sleep wait in real time (an abort ends them). With
// [WithHeldRuns] every run waits, busy, before its first model step until
// [FakeClient.Release]; prompts queued behind it are answered by the same run.
//
// A FakeClient is safe for concurrent use. Close stops every goroutine it started; tests that
// use goleak must Close it. Scripts and tool functions run on the fake's goroutines without its
// locks held and must not block.
type FakeClient struct {
	cfg    fakeConfig
	script script
	ctx    context.Context // cancelled by Close; runs wait on it
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu          sync.Mutex
	closed      bool
	ids         *idGen
	sessions    map[string]*fakeSession
	permissions []*fakePermission // pending, oldest first
	streams     map[*fakeStream]struct{}
	faults      map[string][]error
}

var _ opencode.Client = (*FakeClient)(nil)

// FakeOption configures [NewFakeClient].
type FakeOption interface{ applyFake(*fakeConfig) }

type fakeOptionFunc func(*fakeConfig)

func (f fakeOptionFunc) applyFake(c *fakeConfig) { f(c) }

type fakeConfig struct {
	dir  string
	now  func() time.Time
	hold bool
	tool ToolFunc
}

// DefaultFakeDirectory is the project directory of a [FakeClient] without
// [WithFakeDirectory].
const DefaultFakeDirectory = "/opencodetest/project"

func defaultFakeConfig() fakeConfig {
	return fakeConfig{dir: DefaultFakeDirectory, now: time.Now}
}

// WithFakeDirectory sets the project directory: the Directory of every session created
// without one, the directory [FakeClient.SessionStatus] and [FakeClient.Permissions] answer
// for when asked for "", and the folder those sessions' bash commands run in. It must be a clean absolute slash-separated path, such
// as "/work/project". Defaults to [DefaultFakeDirectory].
func WithFakeDirectory(dir string) FakeOption {
	return fakeOptionFunc(func(c *fakeConfig) { c.dir = dir })
}

// WithClock sets where timestamps (epoch milliseconds in sessions, messages, parts and ids)
// come from. Defaults to time.Now; must not be nil. A clock that returns a fixed time makes
// runs repeatable. The fake calls it with its lock held: it must not call the fake.
func WithClock(now func() time.Time) FakeOption {
	return fakeOptionFunc(func(c *fakeConfig) { c.now = now })
}

// WithHeldRuns makes every run wait before its first model step until the test calls
// [FakeClient.Release] for its session. A held run is busy: its user message and an assistant
// message without time.completed are stored, and session.status busy was sent. Off by default.
func WithHeldRuns() FakeOption {
	return fakeOptionFunc(func(c *fakeConfig) { c.hold = true })
}

// WithToolFunc sets a function that decides tool calls before the fake's defaults. Defaults to
// none.
func WithToolFunc(f ToolFunc) FakeOption {
	return fakeOptionFunc(func(c *fakeConfig) { c.tool = f })
}

// NewFakeClient returns an in-memory OpenCode with no sessions. Close it when done. Like
// httptest.NewServer it has no error to return: it panics when an option is invalid (a
// directory that is not an absolute slash-separated path, a nil clock).
func NewFakeClient(opts ...FakeOption) *FakeClient {
	cfg := defaultFakeConfig()
	for _, o := range opts {
		o.applyFake(&cfg)
	}
	if !path.IsAbs(cfg.dir) || path.Clean(cfg.dir) != cfg.dir {
		panic(fmt.Sprintf("opencodetest: NewFakeClient: directory %q is not a clean absolute slash-separated path", cfg.dir))
	}
	if cfg.now == nil {
		panic("opencodetest: NewFakeClient: nil clock")
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &FakeClient{
		cfg:      cfg,
		ctx:      ctx,
		cancel:   cancel,
		ids:      newIDGen(),
		sessions: map[string]*fakeSession{},
		streams:  map[*fakeStream]struct{}{},
		faults:   map[string][]error{},
	}
}

// Directory returns the project directory (see [WithFakeDirectory]).
func (f *FakeClient) Directory() string { return f.cfg.dir }

// dirOf returns the directory of a session, the fake's for an unknown one. f.mu must be held.
func (f *FakeClient) dirOf(sessionID string) string {
	if s := f.sessions[sessionID]; s != nil {
		return s.info.Directory
	}
	return f.cfg.dir
}

// Close stops the fake: runs stop where they are (without further events), open event streams
// end with io.EOF after the events already sent, waiting Prompt calls return an error, and
// every later call fails with an error matching net.ErrClosed. It waits for the fake's
// goroutines and is idempotent.
func (f *FakeClient) Close() error {
	f.mu.Lock()
	if !f.closed {
		f.closed = true
		for _, s := range f.sessions {
			if s.run != nil {
				s.run.aborted = true
				s.run.cancel()
				s.run = nil
			}
			s.resolve(nil, errFakeClosed)
		}
		f.dropStreams()
	}
	f.mu.Unlock()
	f.cancel()
	f.wg.Wait()
	return nil
}

var errFakeClosed = fmt.Errorf("opencodetest: fake client closed: %w", net.ErrClosed)

func (f *FakeClient) now() time.Time { return f.cfg.now() }
func (f *FakeClient) ms() int64      { return f.cfg.now().UnixMilli() }

// Requests returns a copy of the model requests the fake made so far, oldest first: one per
// agent step (Kind chat) and one per title generation (Kind title). Their Messages are the
// session's conversation as OpenCode sends it (a system message, user texts, assistant tool
// calls, tool results); Body is empty.
func (f *FakeClient) Requests() []Request { return f.script.requestsCopy() }

// Enqueue queues replies for the next chat requests of any session. Queued replies come
// before the script and the directives.
func (f *FakeClient) Enqueue(replies ...Reply) { f.script.enqueue(replies) }

// SetScript sets a function that decides chat replies (nil removes it). It is called without
// locks held and must not block.
func (f *FakeClient) SetScript(fn ScriptFunc) { f.script.set(fn) }

// FailNext makes the next n model requests of any kind answer HTTP status, as [Model.FailNext]
// does.
func (f *FakeClient) FailNext(n, status int) { f.script.failNext(n, status) }

// Release lets one held run of the session take its first model step (see [WithHeldRuns]);
// a Release before the run reaches that point is kept for it. replies, if any, answer that
// run's next model steps before the queue, the script and the directives: Release(id,
// Fail(400)) makes the run fail with a model error, Release(id, Text("done")) makes it answer
// "done". It fails with an error matching [opencode.ErrNotFound] for an unknown session.
func (f *FakeClient) Release(sessionID string, replies ...Reply) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.sessions[sessionID]
	if s == nil {
		return notFound(http.MethodPost, "/session/"+url.PathEscape(sessionID)+"/release", sessionID)
	}
	s.permits = append(s.permits, slices.Clone(replies))
	if s.run != nil {
		s.run.notify()
	}
	return nil
}

// DropEvents ends every open event stream with io.EOF after the events already sent, as when
// the server closes its connections. Streams opened later work as usual.
func (f *FakeClient) DropEvents() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dropStreams()
}

// fakeMethods are the method names FailCalls accepts.
var fakeMethods = []string{"CreateSession", "GetSession", "Messages", "MessagesBefore", "Message", "Prompt", "PromptAsync", "Abort",
	"SessionStatus", "Agents", "Events", "Permissions", "ReplyPermission"}

// FailCalls makes the next n calls of the named method (e.g. "PromptAsync", "Messages",
// "Events") fail with err and do nothing else. A nil err fails them as the real server's
// unexpected errors do: an [*opencode.APIError] with status 500, name UnknownError. It panics
// for a name that is not a method of [opencode.Client] or a permission method of FakeClient.
func (f *FakeClient) FailCalls(method string, n int, err error) {
	if !slices.Contains(fakeMethods, method) {
		panic(fmt.Sprintf("opencodetest: FailCalls: %q is not one of %v", method, fakeMethods))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for range n {
		f.faults[method] = append(f.faults[method], err)
	}
}

// enter checks a call: an error once the fake is closed, when ctx is done, or when a failure
// was injected for method. f.mu must be held.
func (f *FakeClient) enter(ctx context.Context, method, httpMethod, path string) error {
	if f.closed {
		return errFakeClosed
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("opencodetest: %s %s: %w", httpMethod, path, err)
	}
	if q := f.faults[method]; len(q) > 0 {
		err := q[0]
		f.faults[method] = q[1:]
		if err == nil {
			err = unknownError(httpMethod, path)
		}
		return err
	}
	return nil
}

// apiError builds the error HTTPClient would return for the body OpenCode answers with.
func apiError(method, path string, status int, body any) *opencode.APIError {
	b, _ := json.Marshal(body)
	e := &opencode.APIError{Method: method, Path: path, StatusCode: status, Body: b}
	var v struct {
		Name    string `json:"name"`
		Tag     string `json:"_tag"`
		Message string `json:"message"`
		Data    struct {
			Message string `json:"message"`
		} `json:"data"`
	}
	_ = json.Unmarshal(b, &v)
	e.Name, e.Message = v.Name, v.Data.Message
	if e.Name == "" {
		e.Name, e.Message = v.Tag, v.Message
	}
	return e
}

func notFound(method, path, sessionID string) *opencode.APIError {
	return apiError(method, path, http.StatusNotFound, map[string]any{
		"name": "NotFoundError", "data": map[string]any{"message": "Session not found: " + sessionID}})
}

func unknownError(method, path string) *opencode.APIError {
	return apiError(method, path, http.StatusInternalServerError, map[string]any{
		"name": "UnknownError", "data": map[string]any{
			"message": "Unexpected server error. Check server logs for details.", "ref": "err_opencodetest"}})
}

func badRequest(method, path, message string) *opencode.APIError {
	return apiError(method, path, http.StatusBadRequest, map[string]any{
		"name": "BadRequest", "data": map[string]any{"message": message, "kind": "Payload"}})
}

func sessionPath(id, rest string) string { return "/session/" + url.PathEscape(id) + rest }

// session looks up a session for a call; like the real server, an id without the "ses"
// prefix is an unexpected server error and an unknown one is not found. f.mu must be held.
func (f *FakeClient) session(method, path, id string) (*fakeSession, error) {
	if !strings.HasPrefix(id, "ses") {
		return nil, unknownError(method, path)
	}
	s := f.sessions[id]
	if s == nil {
		return nil, notFound(method, path, id)
	}
	return s, nil
}

// CreateSession creates a session in req.Directory (the fake's directory when empty), as
// POST /session does, and emits session.created. A ParentID must start with "ses"
// (otherwise HTTP 400) but need not exist. A directory must be a clean absolute
// slash-separated path (otherwise HTTP 400; the real server accepts more).
func (f *FakeClient) CreateSession(ctx context.Context, req opencode.CreateSessionRequest) (*opencode.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter(ctx, "CreateSession", http.MethodPost, "/session"); err != nil {
		return nil, err
	}
	if req.ParentID != "" && !strings.HasPrefix(req.ParentID, "ses") {
		return nil, apiError(http.MethodPost, "/session", http.StatusBadRequest, map[string]any{"_tag": "BadRequest"})
	}
	dir := cmp.Or(req.Directory, f.cfg.dir)
	if !path.IsAbs(dir) || path.Clean(dir) != dir {
		return nil, badRequest(http.MethodPost, "/session", fmt.Sprintf("directory %q is not a clean absolute path", dir))
	}
	now := f.now()
	title := req.Title
	if title == "" {
		kind := "New session - "
		if req.ParentID != "" {
			kind = "Child session - "
		}
		title = kind + now.UTC().Format("2006-01-02T15:04:05.000Z")
	}
	s := &fakeSession{
		untitled: req.Title == "",
		info: sessionJSON{
			ID:         f.ids.next("ses", true, now),
			Slug:       f.ids.word(slugAdjectives) + "-" + f.ids.word(slugNouns),
			ProjectID:  "global",
			Directory:  dir,
			Path:       strings.TrimPrefix(dir, "/"),
			ParentID:   req.ParentID,
			Title:      title,
			Version:    fakeVersion,
			Tokens:     &tokensJSON{},
			Permission: slices.Clone(req.Permission),
			Time:       sessionTimeJSON{Created: now.UnixMilli(), Updated: now.UnixMilli()},
		},
	}
	f.sessions[s.info.ID] = s
	f.emit(opencode.EventSessionCreated, sessionEvent{SessionID: s.info.ID, Info: s.info})
	return s.session(), nil
}

// GetSession returns a session, as GET /session/{id} does.
func (f *FakeClient) GetSession(ctx context.Context, id string) (*opencode.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	path := sessionPath(id, "")
	if err := f.enter(ctx, "GetSession", http.MethodGet, path); err != nil {
		return nil, err
	}
	s, err := f.session(http.MethodGet, path, id)
	if err != nil {
		return nil, err
	}
	return s.session(), nil
}

// Messages returns the last limit messages of a session (all for limit ≤ 0), oldest first,
// as GET /session/{id}/message does. Parts carry their JSON in Part.Raw, as decoded from the
// real server.
func (f *FakeClient) Messages(ctx context.Context, sessionID string, limit int) ([]opencode.Message, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	path := sessionPath(sessionID, "/message")
	if err := f.enter(ctx, "Messages", http.MethodGet, path); err != nil {
		return nil, err
	}
	s, err := f.session(http.MethodGet, path, sessionID)
	if err != nil {
		return nil, err
	}
	msgs := s.msgs
	if limit > 0 && len(msgs) > limit {
		msgs = msgs[len(msgs)-limit:]
	}
	out := make([]opencode.Message, len(msgs))
	for i, m := range msgs {
		out[i] = m.message()
	}
	return out, nil
}

// MessagesBefore returns one page of a session's messages, oldest first, as GET
// /session/{id}/message?limit&before does: the limit newest messages older than the cursor
// before ("" for the newest), and the cursor of the next older page, "" on the last page. Like
// OpenCode's, a cursor is base64url JSON naming the oldest message of its page ({"id",
// "time"}) and the next page holds the messages older than that one, by creation time and
// then id. A limit below 1 is an error, as for [opencode.HTTPClient.MessagesBefore]; a
// cursor that does not decode fails with an [*opencode.APIError] of status 400 (BadRequest).
func (f *FakeClient) MessagesBefore(ctx context.Context, sessionID string, limit int, before string) ([]opencode.Message, string, error) {
	if limit < 1 {
		return nil, "", fmt.Errorf("opencode: MessagesBefore: limit %d must be positive", limit)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	path := sessionPath(sessionID, "/message")
	if err := f.enter(ctx, "MessagesBefore", http.MethodGet, path); err != nil {
		return nil, "", err
	}
	s, err := f.session(http.MethodGet, path, sessionID)
	if err != nil {
		return nil, "", err
	}
	msgs := s.msgs
	if before != "" {
		c, ok := decodeCursor(before)
		if !ok {
			return nil, "", apiError(http.MethodGet, path, http.StatusBadRequest, map[string]any{"_tag": "BadRequest"})
		}
		var older []*fakeMessage
		for _, m := range msgs {
			if c.older(m.info) {
				older = append(older, m)
			}
		}
		msgs = older
	}
	next := ""
	if len(msgs) > limit {
		msgs = msgs[len(msgs)-limit:]
		next = encodeCursor(msgs[0].info)
	}
	out := make([]opencode.Message, len(msgs))
	for i, m := range msgs {
		out[i] = m.message()
	}
	return out, next, nil
}

// cursor is what a page cursor names: the oldest message of the page before it.
type cursor struct {
	ID   string `json:"id"`
	Time int64  `json:"time"`
}

func encodeCursor(m infoJSON) string {
	b, _ := json.Marshal(cursor{ID: m.ID, Time: m.Time.Created})
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string) (cursor, bool) {
	var c cursor
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
	if err != nil || json.Unmarshal(b, &c) != nil || c.ID == "" {
		return cursor{}, false
	}
	return c, true
}

// older reports whether m comes before the message c names (creation time, then id).
func (c cursor) older(m infoJSON) bool {
	return m.Time.Created < c.Time || (m.Time.Created == c.Time && m.ID < c.ID)
}

// Message returns one message, as GET /session/{id}/message/{messageID} does; an unknown
// session or message fails with an error matching [opencode.ErrNotFound].
func (f *FakeClient) Message(ctx context.Context, sessionID, messageID string) (*opencode.Message, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	path := sessionPath(sessionID, "/message/"+url.PathEscape(messageID))
	if err := f.enter(ctx, "Message", http.MethodGet, path); err != nil {
		return nil, err
	}
	s, err := f.session(http.MethodGet, path, sessionID)
	if err != nil {
		return nil, err
	}
	for _, m := range s.msgs {
		if m.info.ID == messageID {
			msg := m.message()
			return &msg, nil
		}
	}
	return nil, notFound(http.MethodGet, path, messageID)
}

// Prompt sends a prompt and waits, as POST /session/{id}/message does: with NoReply it stores
// the user message and returns it; otherwise it returns the last assistant message once the
// session is idle (with Info.Error set when the model failed or the run was aborted). An
// unknown agent or model fails with an HTTP 500 [*opencode.APIError]. If ctx ends first it
// returns ctx's error and the run goes on.
func (f *FakeClient) Prompt(ctx context.Context, sessionID string, req opencode.PromptRequest) (*opencode.Message, error) {
	path := sessionPath(sessionID, "/message")
	f.mu.Lock()
	if err := f.enter(ctx, "Prompt", http.MethodPost, path); err != nil {
		f.mu.Unlock()
		return nil, err
	}
	s, user, err := f.prompt(path, sessionID, req, true)
	if err != nil || req.NoReply {
		f.mu.Unlock()
		if err != nil {
			return nil, err
		}
		m := user.message()
		return &m, nil
	}
	done := make(chan promptResult, 1)
	s.waiters = append(s.waiters, done)
	f.mu.Unlock()
	select {
	case r := <-done:
		return r.msg, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// PromptAsync starts the agent loop on a prompt and returns at once, as POST
// /session/{id}/prompt_async does; see [FakeClient] for what follows.
func (f *FakeClient) PromptAsync(ctx context.Context, sessionID string, req opencode.PromptRequest) error {
	path := sessionPath(sessionID, "/prompt_async")
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter(ctx, "PromptAsync", http.MethodPost, path); err != nil {
		return err
	}
	_, _, err := f.prompt(path, sessionID, req, false)
	return err
}

// prompt stores a prompt's user message and starts a run unless the session is busy or the
// prompt has NoReply. An unknown agent stores nothing: it emits session.error (twice for an
// async prompt) and, for a sync one, returns an HTTP 500 error. f.mu must be held.
func (f *FakeClient) prompt(path, sessionID string, req opencode.PromptRequest, sync bool) (*fakeSession, *fakeMessage, error) {
	s, err := f.session(http.MethodPost, path, sessionID)
	if err != nil {
		return nil, nil, err
	}
	if req.Parts == nil {
		return nil, nil, badRequest(http.MethodPost, path, "Missing key\n  at [\"parts\"]")
	}
	agent := req.Agent
	if agent == "" {
		agent = defaultAgent
	}
	if !knownAgent(agent) {
		f.emit(opencode.EventSessionError, errorEvent{SessionID: s.info.ID, Error: unknownErr(
			fmt.Sprintf("Agent not found: %q. Available agents: %s", agent, strings.Join(visibleAgents(), ", ")))})
		if sync {
			return nil, nil, unknownError(http.MethodPost, path)
		}
		f.emit(opencode.EventSessionError, errorEvent{SessionID: s.info.ID, Error: unknownErr(
			"UnknownError: UnknownError\n    at SessionPrompt.createUserMessage (opencodetest fake)")})
		return nil, nil, nil
	}
	model := opencode.Model{ProviderID: ProviderID, ModelID: ModelID}
	if req.Model != nil {
		model = *req.Model
	}
	if req.MessageID != "" && !strings.HasPrefix(req.MessageID, "msg") {
		return nil, nil, badRequest(http.MethodPost, path, "Invalid string: must start with \"msg\"\n  at [\"messageID\"]")
	}
	for _, m := range s.msgs {
		if req.MessageID != "" && m.info.ID == req.MessageID { // OpenCode adds the parts; no reply
			f.addParts(s, m, req.Parts)
			return s, m, nil
		}
	}
	user := f.addUserMessage(s, req, agent, model)
	if !req.NoReply && s.run == nil {
		f.startRun(s, user)
	}
	return s, user, nil
}

// Abort stops a session's run, as POST /session/{id}/abort does: the assistant message gets
// MessageAbortedError and time.completed, a running bash command ends with "User aborted the
// command", a tool waiting for a permission ends with status "error" (the request stays
// pending, as on the real server), and the events are session.error, session.status idle,
// session.idle, the final part and message updates, then idle again. An idle or unknown
// session gets session.status idle and session.idle; the call always succeeds.
func (f *FakeClient) Abort(ctx context.Context, sessionID string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter(ctx, "Abort", http.MethodPost, sessionPath(sessionID, "/abort")); err != nil {
		return err
	}
	if s := f.sessions[sessionID]; s != nil && s.run != nil {
		f.abortRun(s.run)
		return nil
	}
	f.emitIdle(sessionID)
	return nil
}

// SessionStatus returns the busy and retrying sessions of a directory (the fake's for ""),
// as GET /session/status does.
func (f *FakeClient) SessionStatus(ctx context.Context, directory string) (map[string]opencode.SessionStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter(ctx, "SessionStatus", http.MethodGet, "/session/status"); err != nil {
		return nil, err
	}
	st := map[string]opencode.SessionStatus{}
	directory = cmp.Or(directory, f.cfg.dir)
	for id, s := range f.sessions {
		if s.run != nil && s.info.Directory == directory {
			st[id] = s.run.status
		}
	}
	return st, nil
}

// Agents returns the agents of the real server's default configuration, as GET /agent does,
// for every directory: build and plan (primary), explore and general (subagent), and the
// hidden compaction, summary and title.
func (f *FakeClient) Agents(ctx context.Context, _ string) ([]opencode.Agent, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter(ctx, "Agents", http.MethodGet, "/agent"); err != nil {
		return nil, err
	}
	return slices.Clone(fakeAgents), nil
}

// Events opens an event stream, as GET /global/event does: it starts with server.connected
// and carries every later event of the fake, each with Directory set to the directory of the
// session it concerns (the fake's directory for events of no session).
// It follows the [opencode.EventStream] contract; it never stalls (the fake sends no
// heartbeats). [FakeClient.DropEvents] and Close end it with io.EOF.
func (f *FakeClient) Events(ctx context.Context) (opencode.EventStream, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter(ctx, "Events", http.MethodGet, "/global/event"); err != nil {
		return nil, err
	}
	s := &fakeStream{f: f, ctx: ctx, wake: make(chan struct{}, 1)}
	f.streams[s] = struct{}{}
	s.push(opencode.Event{ID: f.ids.next("evt", false, f.now()), Type: opencode.EventServerConnected, Properties: json.RawMessage(`{}`)})
	return s, nil
}

// Permissions lists the pending permission requests of a directory's sessions (the fake's
// directory for ""), oldest first, as GET /permission does.
func (f *FakeClient) Permissions(ctx context.Context, directory string) ([]opencode.Permission, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter(ctx, "Permissions", http.MethodGet, "/permission"); err != nil {
		return nil, err
	}
	out := []opencode.Permission{}
	for _, p := range f.permissions {
		if f.dirOf(p.SessionID) == cmp.Or(directory, f.cfg.dir) {
			out = append(out, p.permission())
		}
	}
	return out, nil
}

// ReplyPermission answers a pending permission request, as POST /permission/{id}/reply does,
// and emits permission.replied: "once" or "always" runs the tool call ("always" also allows
// the request's patterns for the rest of the session), "reject" ends it with status "error"
// and, without a Message, stops the run. A request that is not pending, or a directory other
// than its session's (the fake's directory for ""), fails with an error matching
// [opencode.ErrNotFound]; a reply other than once, always or reject fails with HTTP 400.
func (f *FakeClient) ReplyPermission(ctx context.Context, directory, requestID string, reply opencode.PermissionReply) error {
	path := "/permission/" + url.PathEscape(requestID) + "/reply"
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter(ctx, "ReplyPermission", http.MethodPost, path); err != nil {
		return err
	}
	switch reply.Reply {
	case opencode.ReplyOnce, opencode.ReplyAlways, opencode.ReplyReject:
	default:
		return badRequest(http.MethodPost, path, fmt.Sprintf("Expected \"once\" | \"always\" | \"reject\", got %q\n  at [\"reply\"]", reply.Reply))
	}
	i := slices.IndexFunc(f.permissions, func(p *fakePermission) bool { return p.ID == requestID })
	if i < 0 || f.dirOf(f.permissions[i].SessionID) != cmp.Or(directory, f.cfg.dir) {
		return apiError(http.MethodPost, path, http.StatusNotFound, map[string]any{
			"_tag": "PermissionNotFoundError", "requestID": requestID,
			"message": "Permission request not found: " + requestID})
	}
	p := f.permissions[i]
	f.permissions = slices.Delete(f.permissions, i, i+1)
	f.emit(opencode.EventPermissionReplied, map[string]any{"sessionID": p.SessionID, "requestID": p.ID, "reply": reply.Reply})
	if r := p.run; r != nil && !r.aborted && r.perm == p {
		r.permReply = &reply
		r.notify()
	}
	return nil
}
