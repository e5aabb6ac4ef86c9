package opencodetest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"path"
	"slices"
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

func (f *FakeClient) ms() int64 { return f.cfg.now().UnixMilli() }

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
