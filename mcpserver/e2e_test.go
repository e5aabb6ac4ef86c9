package mcpserver_test

// End-to-end tests: a real `opencode serve` is the MCP client. A parent session's scripted
// model calls the asyncagents tools through OpenCode → MCP → the bridge → the Manager.
// Two fixtures, each a server with its own Manager and bridge: "plugin" (plugins on, the
// companion plugin installed, signing with the token file, the bridge registered in
// opencode.json) and "lookup" (--pure, so no plugin; the bridge, with its default caller
// modes, registered at run time with POST /mcp: it finds callers by the lookup, and
// receives a _caller only when a model writes one).

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/mcpserver"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

const (
	modePlugin = "plugin"
	modeLookup = "lookup"
)

// The fixtures' OpenCode servers give the bridge an MCP timeout of e2eMCPTimeout (the entry's
// "timeout"; OpenCode's own default is 60 s), and the bridge keeps calls alive every
// e2eKeepalive: a call that lasts longer than the timeout completes only through the
// keepalive's progress notifications, which TestBlockingOutputOutlivesTimeout shows in
// seconds rather than minutes. The margin of ten keepalives per timeout holds on a loaded
// machine.
const (
	e2eMCPTimeout = 10 * time.Second
	e2eKeepalive  = time.Second
)

// fixture is an OpenCode server whose project has the bridge as MCP server "asyncagents".
type fixture struct {
	mode    string
	state   string // the token file's folder
	srv     *opencodetest.Server
	client  *opencode.HTTPClient
	m       *asyncagents.Manager
	bridge  *mcpserver.Server
	http    *httptest.Server
	logs    *records
	scripts sync.Map // test key → opencodetest.ScriptFunc for the parent sessions of that test
}

var fixtures = struct {
	mu   sync.Mutex
	once map[string]*sync.Once
	f    map[string]*fixture
	err  map[string]error
}{once: map[string]*sync.Once{}, f: map[string]*fixture{}, err: map[string]error{}}

func closeFixtures() {
	fixtures.mu.Lock()
	defer fixtures.mu.Unlock()
	for _, f := range fixtures.f {
		f.close()
	}
}

// getFixture returns the fixture of mode, starting it on first use. It skips the test
// without an OpenCode binary, except under CI=true.
func getFixture(t *testing.T, mode string) *fixture {
	t.Helper()
	fixtures.mu.Lock()
	once := fixtures.once[mode]
	if once == nil {
		once = &sync.Once{}
		fixtures.once[mode] = once
	}
	fixtures.mu.Unlock()
	once.Do(func() {
		f, err := startFixture(mode)
		fixtures.mu.Lock()
		defer fixtures.mu.Unlock()
		if f != nil {
			fixtures.f[mode] = f
		}
		fixtures.err[mode] = err
	})
	fixtures.mu.Lock()
	f, err := fixtures.f[mode], fixtures.err[mode]
	fixtures.mu.Unlock()
	if err != nil {
		if strings.Contains(err.Error(), "binary not found") && !isCI() {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	return f
}

// lateHandler serves the bridge once it is set, 503 before.
type lateHandler struct {
	h atomic.Pointer[mcpserver.Server]
}

func (l *lateHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h := l.h.Load(); h != nil {
		h.ServeHTTP(w, r)
		return
	}
	http.Error(w, "not yet", http.StatusServiceUnavailable)
}

func startFixture(mode string) (f *fixture, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	f = &fixture{mode: mode, logs: &records{}}
	defer func() {
		if err != nil {
			f.close()
			f = nil
		}
	}()
	late := &lateHandler{}
	f.http = httptest.NewServer(late)
	token := randomHex(16)
	if f.state, err = os.MkdirTemp("", "mcpserver-e2e-"); err != nil {
		return f, err
	}
	tokenFile := filepath.Join(f.state, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		return f, err
	}
	remote := mcpserver.RemoteConfig(f.http.URL, token)
	remote.Timeout = int(e2eMCPTimeout.Milliseconds())
	var opts []opencodetest.ServerOption
	bridgeOpts := []mcpserver.Option{mcpserver.WithToken(token), mcpserver.WithLogger(slog.New(f.logs)),
		mcpserver.WithKeepalive(e2eKeepalive)}
	if mode == modePlugin {
		// B-3: the generated plugin, signing with the token file, loaded by a server with
		// plugins on; the bridge in the project's opencode.json.
		opts = append(opts, opencodetest.WithPlugins(map[string]string{
			"asyncagents.js": mcpserver.Plugin(asyncagents.DefaultToolPrefix, mcpserver.WithTokenFile(tokenFile))}),
			opencodetest.WithMCP(asyncagents.DefaultToolPrefix, remote))
	} else {
		bridgeOpts = append(bridgeOpts, mcpserver.WithLookupWait(time.Second))
	}
	if f.srv, err = opencodetest.NewServer(ctx, opts...); err != nil {
		return f, err
	}
	f.srv.Model.SetScript(f.script)
	f.client = f.srv.Client()
	if f.m, err = asyncagents.New(f.client, asyncagents.WithPollInterval(500*time.Millisecond)); err != nil {
		return f, err
	}
	if f.bridge, err = mcpserver.New(f.m, f.client, append(bridgeOpts, mcpserver.WithDirectories(f.srv.Directory))...); err != nil {
		return f, err
	}
	late.h.Store(f.bridge)
	if mode == modePlugin {
		// The instance may have tried the bridge before it was served: connect it again.
		st, err := f.client.MCPStatus(ctx, "")
		if err != nil {
			return f, err
		}
		if st[asyncagents.DefaultToolPrefix].Status != opencode.MCPConnected {
			if err := f.client.ConnectMCP(ctx, "", asyncagents.DefaultToolPrefix); err != nil {
				return f, err
			}
		}
	} else if _, err := f.client.AddMCP(ctx, "", asyncagents.DefaultToolPrefix, remote); err != nil {
		return f, err
	}
	st, err := f.client.MCPStatus(ctx, "")
	if err != nil {
		return f, err
	}
	if s := st[asyncagents.DefaultToolPrefix]; s.Status != opencode.MCPConnected {
		return f, fmt.Errorf("MCP server %s: %+v\n%s", asyncagents.DefaultToolPrefix, s, f.srv.Logs())
	}
	return f, nil
}

func (f *fixture) close() {
	if f.bridge != nil {
		_ = f.bridge.Close()
	}
	if f.m != nil {
		_ = f.m.Close(context.Background())
	}
	if f.srv != nil {
		f.srv.Close()
	}
	f.http.Close()
	if f.state != "" {
		_ = os.RemoveAll(f.state)
	}
}

func isCI() bool { return os.Getenv("CI") == "true" }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

var keys atomic.Int64

// newKey returns a marker unique to a test: "[[e2e-N-hex]]".
func newKey() string { return fmt.Sprintf("[[e2e-%d-%s]]", keys.Add(1), randomHex(3)) }

var keyRe = regexp.MustCompile(`\[\[e2e-[0-9]+-[0-9a-f]+\]\]`)

// script routes the model's chat requests of parent sessions — those offered the bridge's
// tools — by the key in their first user message; everything else follows the directives.
func (f *fixture) script(r *opencodetest.Request) (opencodetest.Reply, bool) {
	if !offered(r, "asyncagents_task") {
		return opencodetest.Reply{}, false
	}
	for _, m := range r.Messages {
		if m.Role != "user" {
			continue
		}
		if fn, ok := f.scripts.Load(keyRe.FindString(m.Content)); ok {
			return fn.(opencodetest.ScriptFunc)(r)
		}
		break
	}
	return opencodetest.Reply{}, false
}

// notified reports whether a parent's last user message is a notification, or the prompt
// asking for a turn after notifications (the Manager's default policy posts one after them).
func notified(last string) bool {
	return strings.Contains(last, "finished in") || strings.Contains(last, "reported since your last turn")
}

func offered(r *opencodetest.Request, tool string) bool {
	for _, name := range r.Tools {
		if name == tool {
			return true
		}
	}
	return false
}

func (f *fixture) setScript(t *testing.T, key string, fn opencodetest.ScriptFunc) {
	f.scripts.Store(key, fn)
	t.Cleanup(func() { f.scripts.Delete(key) })
}

func (f *fixture) newParent(t *testing.T) string {
	t.Helper()
	s, err := f.client.CreateSession(ctxT(t, 30*time.Second), opencode.CreateSessionRequest{Title: "parent"})
	if err != nil {
		t.Fatal(err)
	}
	return s.ID
}

func (f *fixture) prompt(t *testing.T, sid, text string) {
	t.Helper()
	if err := f.client.PromptAsync(ctxT(t, 30*time.Second), sid, opencode.PromptRequest{
		Parts: []opencode.TextPartInput{opencode.NewText(text)}}); err != nil {
		t.Fatal(err)
	}
}

// waitReply waits until an assistant message of sid finished with text containing want,
// and returns the session's messages.
func (f *fixture) waitReply(t *testing.T, sid, want string, d time.Duration) []opencode.Message {
	t.Helper()
	var msgs []opencode.Message
	ok := testmain.Eventually(d, func() bool {
		var err error
		if msgs, err = f.client.Messages(context.Background(), sid, 0); err != nil || len(msgs) == 0 {
			return false
		}
		for _, m := range msgs {
			if m.Info.Role == opencode.RoleAssistant && m.Info.Finish == "stop" && strings.Contains(partsText(m), want) {
				return true
			}
		}
		return false
	})
	if !ok {
		t.Fatalf("session %s: no reply %q within %v; messages:\n%s\nserver log tail:\n%s", sid, want, d, dump(msgs), tail(f.srv.Logs(), 3000))
	}
	return msgs
}

func partsText(m opencode.Message) string {
	var b strings.Builder
	for _, p := range m.Parts {
		if p.Type == opencode.PartText {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

func dump(msgs []opencode.Message) string {
	var b strings.Builder
	for _, m := range msgs {
		fmt.Fprintf(&b, "%s %s %s finish=%q: %q", m.Info.ID, m.Info.Role, m.Info.Agent, m.Info.Finish, partsText(m))
		for _, p := range m.Parts {
			if p.Type == opencode.PartTool && p.State != nil {
				fmt.Fprintf(&b, " [%s %s %s out=%q err=%q]", p.Tool, p.State.Status, p.State.Input, tail(p.State.Output, 200), p.State.Error)
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// toolParts returns the tool parts of msgs named tool, oldest first, with their messages.
func toolParts(msgs []opencode.Message, tool string) ([]opencode.Part, []opencode.MessageInfo) {
	var parts []opencode.Part
	var infos []opencode.MessageInfo
	for _, m := range msgs {
		for _, p := range m.Parts {
			if p.Type == opencode.PartTool && p.Tool == tool {
				parts = append(parts, p)
				infos = append(infos, m.Info)
			}
		}
	}
	return parts, infos
}

// callers returns the callers the bridge resolved for session sid, as logged.
func (f *fixture) callers(sid string) []map[string]string {
	var out []map[string]string
	for _, c := range f.logs.find("mcpserver: caller") {
		if c["session"] == sid {
			out = append(out, c)
		}
	}
	return out
}

var launchedRe = regexp.MustCompile(`Background task launched: (tsk_[0-9A-Za-z]+)`)

// launchedID returns the task id of the launch reply among the request's tool results.
func launchedID(r *opencodetest.Request) string {
	for _, m := range r.Messages {
		if m.Role == "tool" {
			if sm := launchedRe.FindStringSubmatch(m.Content); sm != nil {
				return sm[1]
			}
		}
	}
	return ""
}

// B-1, B-3, T-4, T-9, T-13, T-17, N-1, L: the parent's model launches a task through
// OpenCode and the bridge; the child runs without the bridge's tools; the notification
// arrives; the model reads the output and the list. The Manager records the parent's real
// session, message and agent, found by the plugin (plugin fixture) or the lookup. A fork
// is tried in each mode (F-18: the native one is OpenCode's copy of the parent, which is
// offered the bridge's tools, having no permission rules; the Manager refuses its launches).
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{modePlugin, modeLookup} {
		for _, forkMode := range []string{"", "digest", "native"} {
			name := map[string]string{"": "fork=false", "digest": "fork=true", "native": "fork=native"}[forkMode]
			t.Run(mode+"/"+name, func(t *testing.T) {
				t.Parallel()
				testEndToEnd(t, getFixture(t, mode), forkMode)
			})
		}
	}
}

func testEndToEnd(t *testing.T, f *fixture, forkMode string) {
	fork := forkMode != ""
	key := newKey()
	secret := "PARENT_SECRET=" + randomHex(6)
	childPrompt := "child of " + key + " says hello"
	if fork {
		childPrompt = "forked child of " + key + "\nQUOTE:PARENT_SECRET="
	}
	args := map[string]any{"description": "e2e " + key, "prompt": childPrompt, "agent": "general", "fork": fork}
	if forkMode == "native" {
		args["fork_mode"], args["agent"] = "native", "build" // the parent's agent keeps the prefix
	}
	taskArgs, _ := json.Marshal(args)
	f.setScript(t, key, func(r *opencodetest.Request) (opencodetest.Reply, bool) {
		_, last := r.LastUser()
		results := r.ToolResultsSinceUser()
		switch {
		case strings.Contains(last, "launch it"):
			if len(results) == 0 {
				return opencodetest.CallTool("asyncagents_task", string(taskArgs)), true
			}
			return opencodetest.Text("launched"), true
		case notified(last): // the notification (N-1), or the prompt for the turn after it
			switch {
			case len(results) == 0:
				return opencodetest.CallTool("asyncagents_output", fmt.Sprintf(`{"task_id":%q}`, launchedID(r))), true
			case len(results) == 1,
				// Refused because another test's parent made the same call at the same
				// moment (lookup): call again, as the error asks.
				len(results) < 6 && strings.Contains(results[len(results)-1], mcpserver.ErrAmbiguousCaller.Error()):
				return opencodetest.CallTool("asyncagents_list", `{"status":"completed"}`), true
			}
			return opencodetest.Text("seen both"), true
		}
		return opencodetest.Reply{}, false // RUN:
	})
	parent := f.newParent(t)
	f.prompt(t, parent, key+" RUN:echo "+secret)
	f.waitReply(t, parent, secret, 60*time.Second)
	f.prompt(t, parent, key+" launch it")
	msgs := f.waitReply(t, parent, "seen both", 90*time.Second)

	// The Manager's record of the caller is the parent's real one: the message holding the
	// asyncagents_task part, and that message's agent.
	taskParts, infos := toolParts(msgs, "asyncagents_task")
	if len(taskParts) != 1 || taskParts[0].State.Status != opencode.ToolCompleted {
		t.Fatalf("task parts:\n%s", dump(msgs))
	}
	tasks, err := f.m.List(asyncagents.Caller{SessionID: parent}, "")
	if err != nil || len(tasks) != 1 {
		t.Fatalf("List = %v, %v", tasks, err)
	}
	tk := tasks[0]
	if tk.ParentSessionID != parent || tk.ParentMessageID != taskParts[0].MessageID || tk.ParentAgent != infos[0].Agent ||
		infos[0].Agent != "build" || tk.Forked != fork || tk.Status != asyncagents.StatusCompleted {
		t.Fatalf("task %+v; the call was in message %s of agent %s", tk, taskParts[0].MessageID, infos[0].Agent)
	}
	// How the caller was found: every call of this parent by the fixture's mode.
	got := f.callers(parent)
	if len(got) != 3 {
		t.Fatalf("callers of %s: %v", parent, got)
	}
	for _, c := range got {
		if c["mode"] != f.mode || c["message"] == "" || c["agent"] != "build" {
			t.Fatalf("caller %v, want mode %s", c, f.mode)
		}
	}
	if f.mode == modePlugin { // the plugin wrote _caller into the stored input
		var in struct {
			Caller struct{ SessionID, CallID string } `json:"_caller"`
		}
		_ = json.Unmarshal(taskParts[0].State.Input, &in)
		if in.Caller.SessionID != parent || in.Caller.CallID != taskParts[0].CallID {
			t.Fatalf("task input %s", taskParts[0].State.Input)
		}
	}

	// The model saw the output (the child's reply) and the list (the task, completed).
	wantResult := "reply to " + childPrompt
	if fork {
		wantResult = secret // quoted from the inherited context
	}
	var final *opencodetest.Request
	var child []opencodetest.Request
	for _, r := range f.srv.Model.Requests() {
		_, last := r.LastUser()
		switch {
		case r.Kind != opencodetest.KindChat:
		case strings.Contains(last, childPrompt):
			child = append(child, r)
		case r.Contains(key) && notified(last):
			if final == nil || len(r.ToolResultsSinceUser()) > len(final.ToolResultsSinceUser()) {
				final = &r
			}
		}
	}
	if final == nil || len(final.ToolResultsSinceUser()) < 2 || len(child) == 0 {
		t.Fatalf("model requests: final %v, child %d", final, len(child))
	}
	res := final.ToolResultsSinceUser()
	if !strings.Contains(res[0], wantResult) || !strings.Contains(res[0], "completed") {
		t.Fatalf("output seen by the model:\n%s\nwant %q", res[0], wantResult)
	}
	if list := res[len(res)-1]; !strings.Contains(list, tk.DisplayID) || !strings.Contains(list, "e2e "+key) {
		t.Fatalf("list seen by the model:\n%s\nwant %s", list, tk.DisplayID)
	}
	if len(res) > 2 {
		t.Logf("the list call was refused as ambiguous %d time(s), then answered", len(res)-2)
	}
	if got := tk.ForkMode; fork && got != asyncagents.ForkMode(forkMode) {
		t.Fatalf("fork mode %q, want %q", got, forkMode)
	}
	// T-17: the child was not offered the bridge's tools (but a native fork, which takes no
	// permission rules); the parent was offered all five.
	for _, r := range child {
		if forkMode == "native" {
			break
		}
		for _, name := range r.Tools {
			if strings.HasPrefix(name, "asyncagents_") {
				t.Fatalf("the child was offered %s: %v", name, r.Tools)
			}
		}
	}
	for _, name := range []string{"asyncagents_task", "asyncagents_output", "asyncagents_cancel", "asyncagents_list", "asyncagents_clear", "asyncagents_merge"} {
		if !offered(final, name) {
			t.Fatalf("the parent was not offered %s: %v", name, final.Tools)
		}
	}
}

// B-1: two parents call asyncagents_list {} at the same moment, round after round. With
// the plugin every call gets its own caller; the lookup answers the right caller or
// refuses (ErrAmbiguousCaller), and is never wrong.
func TestConcurrentIdenticalCalls(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{modePlugin, modeLookup} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			testConcurrentIdenticalCalls(t, getFixture(t, mode))
		})
	}
}

const rounds = 8

func testConcurrentIdenticalCalls(t *testing.T, f *fixture) {
	key := newKey()
	// Each parent owns a task whose description names it, so a list shows whose it is.
	parents := [2]string{f.newParent(t), f.newParent(t)}
	for i, p := range parents {
		caller := asyncagents.Caller{SessionID: p, Agent: "build"}
		if _, err := f.m.Launch(ctxT(t, 30*time.Second), asyncagents.LaunchInput{Caller: caller, Agent: "general",
			Description: fmt.Sprintf("owned by parent %d %s", i, key), Prompt: "SLEEP:600"}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = f.m.Clear(context.Background(), caller) })
	}
	// The model holds both parents' requests of a round until both are there, then both
	// call the tool at once.
	var mu sync.Mutex
	arrived := map[string]chan struct{}{}
	counts := map[string]int{}
	f.setScript(t, key, func(r *opencodetest.Request) (opencodetest.Reply, bool) {
		_, last := r.LastUser()
		i := strings.LastIndex(last, "round ")
		if i < 0 {
			return opencodetest.Text("ok"), true // a notification
		}
		round := strings.TrimSpace(last[i:])
		if len(r.ToolResultsSinceUser()) > 0 {
			return opencodetest.Text("done " + round), true
		}
		mu.Lock()
		ch := arrived[round]
		if ch == nil {
			ch = make(chan struct{})
			arrived[round] = ch
		}
		if counts[round]++; counts[round] == 2 {
			close(ch)
		}
		mu.Unlock()
		select {
		case <-ch:
		case <-time.After(20 * time.Second):
		}
		return opencodetest.CallTool("asyncagents_list", `{}`), true
	})
	right, refused := 0, 0
	for n := range rounds {
		round := fmt.Sprintf("round %d", n)
		for _, p := range parents {
			f.prompt(t, p, key+" "+round)
		}
		for i, p := range parents {
			msgs := f.waitReply(t, p, "done "+round, 60*time.Second)
			parts, _ := toolParts(msgs, "asyncagents_list")
			part := parts[len(parts)-1]
			own, other := fmt.Sprintf("owned by parent %d %s", i, key), fmt.Sprintf("owned by parent %d %s", 1-i, key)
			switch st := part.State; {
			case st.Status == opencode.ToolCompleted && strings.Contains(st.Output, own) && !strings.Contains(st.Output, other):
				right++
			case st.Status == opencode.ToolError && strings.Contains(st.Error, mcpserver.ErrAmbiguousCaller.Error()):
				refused++
			default:
				t.Fatalf("%s, parent %d: WRONG or unexpected answer: %s %q %q", round, i, st.Status, st.Output, st.Error)
			}
		}
	}
	t.Logf("%s: %d calls (%d rounds × 2 parents at once): %d right, %d refused as ambiguous, 0 wrong",
		f.mode, 2*rounds, rounds, right, refused)
	if f.mode == modePlugin && right != 2*rounds {
		t.Fatalf("plugin: %d of %d right", right, 2*rounds)
	}
}

// B-1: identical calls made in parallel within one step of one session (two tool calls
// in one model reply) share the caller.
func TestParallelCallsOfOneSession(t *testing.T) {
	t.Parallel()
	f := getFixture(t, modeLookup)
	key := newKey()
	f.setScript(t, key, func(r *opencodetest.Request) (opencodetest.Reply, bool) {
		if len(r.ToolResultsSinceUser()) == 0 {
			return opencodetest.Reply{ToolCalls: []opencodetest.ToolCall{
				{Name: "asyncagents_list", Arguments: `{"status":"running"}`},
				{Name: "asyncagents_list", Arguments: `{"status":"running"}`}}}, true
		}
		return opencodetest.Text("both listed"), true
	})
	parent := f.newParent(t)
	f.prompt(t, parent, key+" list twice")
	msgs := f.waitReply(t, parent, "both listed", 60*time.Second)
	parts, _ := toolParts(msgs, "asyncagents_list")
	if len(parts) != 2 {
		t.Fatalf("list parts:\n%s", dump(msgs))
	}
	for _, p := range parts {
		if p.State.Status != opencode.ToolCompleted || !strings.Contains(p.State.Output, "No background tasks found") {
			t.Fatalf("list part: %s %q %q", p.State.Status, p.State.Output, p.State.Error)
		}
	}
	got := f.callers(parent)
	if len(got) != 2 || got[0]["callID"] == got[1]["callID"] {
		t.Fatalf("callers: %v", got)
	}
	for i, c := range got {
		if c["message"] != parts[0].MessageID || (c["callID"] != parts[0].CallID && c["callID"] != parts[1].CallID) {
			t.Fatalf("caller %d: %v; parts %s/%s in %s", i, c, parts[0].CallID, parts[1].CallID, parts[0].MessageID)
		}
	}
}

// B-2: a blocking asyncagents_output that waits longer than OpenCode's MCP timeout (here
// e2eMCPTimeout, 60 s by default) completes, because the bridge's progress notifications
// restart the timeout.
func TestBlockingOutputOutlivesTimeout(t *testing.T) {
	t.Parallel()
	f := getFixture(t, modePlugin)
	const sleep = 5 * e2eMCPTimeout / 2
	key := newKey()
	f.setScript(t, key, func(r *opencodetest.Request) (opencodetest.Reply, bool) {
		_, last := r.LastUser()
		results := r.ToolResultsSinceUser()
		switch {
		case !strings.Contains(last, "wait long"):
			return opencodetest.Text("noted"), true // the notification
		case len(results) == 0:
			return opencodetest.CallTool("asyncagents_task", fmt.Sprintf(`{"description":"slow %s","prompt":"SLEEP:%g","agent":"general"}`, key, sleep.Seconds())), true
		case len(results) == 1:
			return opencodetest.CallTool("asyncagents_output", fmt.Sprintf(`{"task_id":%q,"block":true,"timeout":200}`, launchedID(r))), true
		}
		return opencodetest.Text("waited"), true
	})
	parent := f.newParent(t)
	f.prompt(t, parent, key+" wait long")
	msgs := f.waitReply(t, parent, "waited", sleep+90*time.Second)
	parts, _ := toolParts(msgs, "asyncagents_output")
	if len(parts) != 1 {
		t.Fatalf("output parts:\n%s", dump(msgs))
	}
	st := parts[0].State
	took := time.Duration(st.Time.End-st.Time.Start) * time.Millisecond
	// The call starts a model step after the launch: up to 10 s later on a loaded machine.
	if st.Status != opencode.ToolCompleted || !strings.Contains(st.Output, fmt.Sprintf("slept %g", sleep.Seconds())) || took < 3*e2eMCPTimeout/2 {
		t.Fatalf("output after %v: %s %q %q", took, st.Status, st.Output, st.Error)
	}
	t.Logf("blocking output completed after %v (MCP timeout %v)", took, e2eMCPTimeout)
}

// B-1 (issue 16a): parents A and B make the same blocking output call at the same moment,
// and B's model adds a _caller naming A's call (A's session and the call id A's model
// chose). Without the plugin ("lookup") B's _caller is not signed, so the bridge finds the
// caller by the call's stored arguments, which are B's own; with the plugin the hook
// overwrites it with B's own, signed. Either way B's call runs for B (A's task is not
// B's: "task not found") and never shows A's task; A's call runs for A.
func TestForgedCallerRealServer(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{modePlugin, modeLookup} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			testForgedCaller(t, getFixture(t, mode))
		})
	}
}

func testForgedCaller(t *testing.T, f *fixture) {
	key := newKey()
	a, b := f.newParent(t), f.newParent(t)
	owner := asyncagents.Caller{SessionID: a, Agent: "build"}
	tk, err := f.m.Launch(ctxT(t, 30*time.Second), asyncagents.LaunchInput{Caller: owner, Agent: "general",
		Description: "A's task " + key, Prompt: "SLEEP:600"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = f.m.Clear(context.Background(), owner) })
	args := fmt.Sprintf(`{"task_id":%q,"block":true,"timeout":3}`, tk.ID)
	callA := "call_forge_" + randomHex(4)
	forged := fmt.Sprintf(`{"task_id":%q,"block":true,"timeout":3,"_caller":{"sessionID":%q,"callID":%q}}`, tk.ID, a, callA)
	var mu sync.Mutex
	both, arrived := make(chan struct{}), 0
	f.setScript(t, key, func(r *opencodetest.Request) (opencodetest.Reply, bool) {
		_, last := r.LastUser()
		if len(r.ToolResultsSinceUser()) > 0 {
			return opencodetest.Text("done"), true
		}
		if !strings.Contains(last, " as ") {
			return opencodetest.Text("ok"), true // a notification
		}
		mu.Lock()
		if arrived++; arrived == 2 {
			close(both)
		}
		mu.Unlock()
		select { // both calls at once
		case <-both:
		case <-time.After(20 * time.Second):
		}
		if strings.Contains(last, " as A") {
			return opencodetest.Reply{ToolCalls: []opencodetest.ToolCall{{ID: callA, Name: "asyncagents_output", Arguments: args}}}, true
		}
		return opencodetest.CallTool("asyncagents_output", forged), true
	})
	f.prompt(t, a, key+" as A")
	f.prompt(t, b, key+" as B")
	partOf := func(sid string) opencode.Part {
		msgs := f.waitReply(t, sid, "done", 60*time.Second)
		parts, _ := toolParts(msgs, "asyncagents_output")
		if len(parts) != 1 {
			t.Fatalf("session %s: output parts:\n%s", sid, dump(msgs))
		}
		return parts[0]
	}
	pa, pb := partOf(a), partOf(b)
	if pa.CallID != callA || pa.State.Status != opencode.ToolCompleted || !strings.Contains(pa.State.Output, "A's task "+key) {
		t.Fatalf("A's call %s: %s %q %q", pa.CallID, pa.State.Status, pa.State.Output, pa.State.Error)
	}
	if pb.State.Status != opencode.ToolError || strings.Contains(pb.State.Output+pb.State.Error, key) ||
		!strings.Contains(pb.State.Error, asyncagents.ErrTaskNotFound.Error()) {
		t.Fatalf("B's call: %s %q %q, want B's own answer: task not found", pb.State.Status, pb.State.Output, pb.State.Error)
	}
	for _, c := range f.callers(b) {
		if c["callID"] != pb.CallID || c["mode"] != f.mode {
			t.Fatalf("B's call resolved as %v", c)
		}
	}
	if got := f.callers(a); len(got) != 1 || got[0]["callID"] != callA {
		t.Fatalf("callers of A: %v", got)
	}
	if f.mode == modePlugin { // the hook replaced B's _caller with its own, signed
		var in struct {
			Caller struct{ SessionID, CallID, Sig string } `json:"_caller"`
		}
		_ = json.Unmarshal(pb.State.Input, &in)
		if in.Caller.SessionID != b || in.Caller.CallID != pb.CallID || len(in.Caller.Sig) != 64 {
			t.Fatalf("B's stored input %s", pb.State.Input)
		}
	}
}

// sessionLog is an http.Handler in front of a bridge that records each request: its
// method, its Mcp-Session-Id, the JSON-RPC method of a POST, and the answer's status.
type sessionLog struct {
	next http.Handler
	mu   sync.Mutex
	reqs []loggedRequest
}

type loggedRequest struct {
	method, session, rpc string
	status               int
	start, end           time.Time
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (l *sessionLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rpc := ""
	if r.Method == http.MethodPost {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var msg struct {
			Method string `json:"method"`
		}
		_ = json.Unmarshal(body, &msg)
		rpc = msg.Method
	}
	sw := &statusWriter{ResponseWriter: w}
	l.next.ServeHTTP(sw, r)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reqs = append(l.reqs, loggedRequest{method: r.Method, session: r.Header.Get("Mcp-Session-Id"), rpc: rpc, status: sw.status,
		start: start, end: time.Now()})
}

func (l *sessionLog) all() []loggedRequest {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.reqs)
}

// B (issue 12), real server: what OpenCode 1.18.33 does when the bridge closed its idle MCP
// session (observed here): its event stream (GET) ends, and its two or three attempts to
// open it again are answered 404, which does not mark the server failed (it stays
// "connected"). The next request that names the old session — the model's tool call, or
// the notifications/cancelled OpenCode sends after each call — is answered 404; OpenCode's
// MCP client (the TypeScript SDK's streamable HTTP transport: onsessionexpired) then sends
// initialize without a session id, and the request again in the new session. The model's
// call works and the model sees nothing of it. So an idle timeout costs OpenCode one more
// round trip, never a failed call. But a session that closes while OpenCode opens it
// (between initialize and the initialized notification: seen with a timeout of 150 ms)
// makes its client give up, and the server shows "failed, Connection closed": hence
// WithSessionTimeout's minimum. A bridge on the lookup fixture's server, under the prefix
// "expiry", with a session timeout of 10 s: on a machine loaded six times over, OpenCode's
// steps of one exchange were seen more than 3 s apart.
func TestReconnectAfterSessionExpired(t *testing.T) {
	t.Parallel()
	f := getFixture(t, modeLookup)
	ctx := ctxT(t, 120*time.Second)
	m, err := asyncagents.New(f.client, asyncagents.WithToolPrefix("expiry"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	logs := &records{}
	token := randomHex(16)
	bridge, err := mcpserver.New(m, f.client, mcpserver.WithToken(token), mcpserver.WithDirectories(f.srv.Directory),
		mcpserver.WithSessionTimeout(10*time.Second), mcpserver.WithLogger(slog.New(logs)))
	if err != nil {
		t.Fatal(err)
	}
	rec := &sessionLog{next: bridge}
	hs := httptest.NewServer(rec)
	defer hs.Close()
	defer bridge.Close()
	if st, err := f.client.AddMCP(ctx, "", "expiry", mcpserver.RemoteConfig(hs.URL, token)); err != nil || st.Status != opencode.MCPConnected {
		t.Fatalf("AddMCP: %+v %v\nrequests: %+v\nbridge log:\n%s", st, err, rec.all(), logs.text())
	}
	defer func() { _ = f.client.DisconnectMCP(context.Background(), "", "expiry") }()

	key := newKey()
	f.setScript(t, key, func(r *opencodetest.Request) (opencodetest.Reply, bool) {
		_, last := r.LastUser()
		if len(r.ToolResultsSinceUser()) > 0 {
			return opencodetest.Text("listed " + last[strings.LastIndex(last, " ")+1:]), true
		}
		return opencodetest.CallTool("expiry_list", `{}`), true
	})
	parent := f.newParent(t)
	call := func(n string) opencode.Part {
		f.prompt(t, parent, key+" call "+n)
		msgs := f.waitReply(t, parent, "listed "+n, 60*time.Second)
		parts, _ := toolParts(msgs, "expiry_list")
		return parts[len(parts)-1]
	}
	if p := call("1"); p.State.Status != opencode.ToolCompleted {
		t.Fatalf("first call: %s %q\nrequests: %+v\nbridge log:\n%s", p.State.Status, p.State.Error, rec.all(), logs.text())
	}
	// Wait until OpenCode's newest session has expired: its event stream ends, and
	// OpenCode's attempts to open it again are answered 404.
	var expired string
	if !testmain.Eventually(30*time.Second, func() bool {
		reqs := rec.all()
		newest := ""
		for _, r := range reqs {
			if r.session != "" {
				newest = r.session
			}
		}
		for _, r := range reqs {
			if r.session == newest && r.status == http.StatusNotFound {
				expired = newest
				return true
			}
		}
		return false
	}) {
		t.Fatalf("OpenCode's session did not expire, or OpenCode never named it again: %+v", rec.all())
	}
	st, err := f.client.MCPStatus(ctx, "")
	if err != nil || st["expiry"].Status != opencode.MCPConnected {
		t.Fatalf("MCP status after the expiry: %+v %v", st["expiry"], err)
	}
	if p := call("2"); p.State.Status != opencode.ToolCompleted || !strings.Contains(p.State.Output, "No background tasks") {
		t.Fatalf("the call after the expiry: %s %q %q\nrequests: %+v", p.State.Status, p.State.Output, p.State.Error, rec.all())
	}
	// The call went to the expired session (404), then initialize, then the call again in
	// the new session.
	reqs := rec.all()
	t.Logf("requests: %+v", reqs)
	step := 0
	for _, r := range reqs {
		switch {
		case step == 0 && r.rpc == "tools/call" && r.session == expired && r.status == http.StatusNotFound,
			step == 1 && r.rpc == "initialize" && r.session == "" && r.status == http.StatusOK,
			step == 2 && r.rpc == "tools/call" && r.session != expired && r.status == http.StatusOK:
			step++
		}
	}
	if step != 3 {
		t.Fatalf("the call after the expiry: not 404, initialize, call again (step %d)", step)
	}
	if got := logs.find("mcpserver: caller"); len(got) != 2 || got[1]["session"] != parent {
		t.Fatalf("callers: %v", got)
	}
}
