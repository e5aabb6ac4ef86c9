package mcpserver_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/mcpserver"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

func TestMain(m *testing.M) { testmain.Run(m, closeFixtures) }

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// records is a slog.Handler that keeps every record, for tests to read what the bridge
// logged. Safe for concurrent use.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec.Clone())
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

// find returns the attributes of the records with message msg, as strings.
func (r *records) find(msg string) []map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []map[string]string
	for _, rec := range r.recs {
		if rec.Message != msg {
			continue
		}
		m := map[string]string{}
		rec.Attrs(func(a slog.Attr) bool {
			m[a.Key] = a.Value.String()
			return true
		})
		out = append(out, m)
	}
	return out
}

// text returns every record, messages and attributes, as one string.
func (r *records) text() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, rec := range r.recs {
		b.WriteString(rec.Time.Format("15:04:05.000 ") + rec.Message)
		rec.Attrs(func(a slog.Attr) bool {
			b.WriteString(" " + a.Key + "=" + a.Value.String())
			return true
		})
		b.WriteByte('\n')
	}
	return b.String()
}

// bearer is an http.RoundTripper that adds a bearer token.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

const testToken = "s3cret-token-for-tests"

// bridge is a Manager on a FakeClient whose asyncagents_* tool calls stay running until
// their session is aborted, served by a Server on an httptest server.
type bridge struct {
	fake   *opencodetest.FakeClient
	m      *asyncagents.Manager
	srv    *mcpserver.Server
	http   *httptest.Server
	logs   *records
	token  string // the bridge's token, "" for none
	closed bool
}

// hold is how long the fake runs a call of an asyncagents_* tool: the tests abort first.
const hold = time.Minute

func newBridge(t *testing.T, opts ...mcpserver.Option) *bridge {
	t.Helper()
	return newBridgeWith(t, testToken, opts...)
}

// newBridgeWith is newBridge with token as the bridge's token ("": none).
func newBridgeWith(t *testing.T, token string, opts ...mcpserver.Option) *bridge {
	t.Helper()
	b := &bridge{logs: &records{}, token: token}
	b.fake = opencodetest.NewFakeClient(opencodetest.WithToolFunc(func(call opencodetest.ToolCall) (opencodetest.ToolResult, bool) {
		if strings.HasPrefix(call.Name, "asyncagents_") {
			return opencodetest.ToolResult{Sleep: hold}, true
		}
		return opencodetest.ToolResult{}, false
	}))
	b.fake.SetScript(callScript)
	m, err := asyncagents.New(b.fake, asyncagents.WithPollInterval(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	b.m = m
	base := []mcpserver.Option{mcpserver.WithLogger(slog.New(b.logs)), mcpserver.WithLookupWait(300 * time.Millisecond)}
	if token != "" {
		base = append(base, mcpserver.WithToken(token))
	}
	b.srv, err = mcpserver.New(m, b.fake, append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	b.http = httptest.NewServer(b.srv)
	t.Cleanup(b.close)
	return b
}

func (b *bridge) close() {
	if b.closed {
		return
	}
	b.closed = true
	_ = b.srv.Close()
	b.http.Close()
	_ = b.m.Close(context.Background())
	_ = b.fake.Close()
}

// connect opens an MCP session to the bridge with the token; progress, when not nil, gets
// the progress notifications.
func (b *bridge) connect(t *testing.T, progress func(*mcp.ProgressNotificationParams)) *mcp.ClientSession {
	t.Helper()
	opts := &mcp.ClientOptions{}
	if progress != nil {
		opts.ProgressNotificationHandler = func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			progress(r.Params)
		}
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, opts)
	hc := &http.Client{}
	if b.token != "" {
		hc.Transport = bearer{b.token, http.DefaultTransport}
	}
	cs, err := c.Connect(ctxT(t, 10*time.Second), &mcp.StreamableClientTransport{Endpoint: b.http.URL, HTTPClient: hc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// running starts a session whose model calls tool with args, and waits until the call's tool
// part is running. It returns the session and the part.
func (b *bridge) running(t *testing.T, tool, args string) (string, opencode.Part) {
	t.Helper()
	sid := b.session(t)
	return sid, b.call(t, sid, tool, args)
}

// session creates an idle session.
func (b *bridge) session(t *testing.T) string {
	t.Helper()
	s, err := b.fake.CreateSession(ctxT(t, 10*time.Second), opencode.CreateSessionRequest{Title: "parent"})
	if err != nil {
		t.Fatal(err)
	}
	return s.ID
}

// call makes session sid's model call tool with args, and waits until the call's tool part
// is running.
func (b *bridge) call(t *testing.T, sid, tool, args string) opencode.Part {
	t.Helper()
	b.start(t, sid, "TOOL:"+tool+" "+args)
	return b.waitRunning(t, sid, tool, 1)[0]
}

func (b *bridge) start(t *testing.T, sid, prompt string) {
	t.Helper()
	if err := b.fake.PromptAsync(ctxT(t, 10*time.Second), sid, opencode.PromptRequest{
		Parts: []opencode.TextPartInput{opencode.NewText(prompt)}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.fake.Abort(context.Background(), sid) })
}

// waitRunning waits until session sid has n running parts of tool and returns them.
func (b *bridge) waitRunning(t *testing.T, sid, tool string, n int) []opencode.Part {
	t.Helper()
	var parts []opencode.Part
	ok := testmain.Eventually(10*time.Second, func() bool {
		msgs, err := b.fake.Messages(context.Background(), sid, 0)
		if err != nil {
			return false
		}
		parts = parts[:0]
		for _, m := range msgs {
			for _, p := range m.Parts {
				if p.Type == opencode.PartTool && p.Tool == tool && p.State != nil && p.State.Status == opencode.ToolRunning {
					parts = append(parts, p)
				}
			}
		}
		return len(parts) == n
	})
	if !ok {
		t.Fatalf("session %s: %d running %s parts, want %d", sid, len(parts), tool, n)
	}
	return parts
}

// result calls a tool and returns its text and whether it is an error result.
func result(t *testing.T, cs *mcp.ClientSession, params *mcp.CallToolParams) (string, bool) {
	t.Helper()
	res, err := cs.CallTool(ctxT(t, 30*time.Second), params)
	if err != nil {
		t.Fatalf("CallTool %s: %v", params.Name, err)
	}
	return textOf(res), res.IsError
}

func textOf(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func raw(s string) json.RawMessage { return json.RawMessage(s) }

// callScript makes the model of a prompt "CALL <tool call as JSON>" make that call (with its
// call id), as many times as it is prompted so.
func callScript(r *opencodetest.Request) (opencodetest.Reply, bool) {
	_, last := r.LastUser()
	spec, ok := strings.CutPrefix(last, "CALL ")
	if !ok || len(r.ToolResultsSinceUser()) > 0 {
		return opencodetest.Reply{}, false
	}
	var call opencodetest.ToolCall
	if err := json.Unmarshal([]byte(spec), &call); err != nil {
		return opencodetest.Text("bad CALL: " + err.Error()), true
	}
	return opencodetest.Reply{ToolCalls: []opencodetest.ToolCall{call}}, true
}

var callIDs atomic.Int64

// callAs makes session sid's model call tool with args as they are (a _caller the model
// wrote included), under a call id of its own, and waits until the call's part is running.
func (b *bridge) callAs(t *testing.T, sid, tool, args string) opencode.Part {
	t.Helper()
	spec, _ := json.Marshal(opencodetest.ToolCall{ID: fmt.Sprintf("call_test-%d_0", callIDs.Add(1)), Name: tool, Arguments: args})
	b.start(t, sid, "CALL "+string(spec))
	return b.waitRunning(t, sid, tool, 1)[0]
}

// pluginCall makes session sid's model call tool with args, with the _caller the companion
// plugin adds for a bridge with token testToken, and waits until the call's part is
// running. It returns the part and the arguments OpenCode sends the bridge.
func (b *bridge) pluginCall(t *testing.T, sid, tool, args string) (opencode.Part, string) {
	t.Helper()
	callID := fmt.Sprintf("call_test-%d_0", callIDs.Add(1))
	full := withCaller(args, sid, callID, testToken)
	spec, _ := json.Marshal(opencodetest.ToolCall{ID: callID, Name: tool, Arguments: full})
	b.start(t, sid, "CALL "+string(spec))
	return b.waitRunning(t, sid, tool, 1)[0], full
}

// withCaller returns the arguments args (a JSON object) with the _caller the plugin adds
// for call callID of session sid, signed with token ("": no sig).
func withCaller(args, sid, callID, token string) string {
	var obj map[string]any
	if err := json.Unmarshal([]byte(args), &obj); err != nil || obj == nil {
		panic("withCaller: " + args)
	}
	c := map[string]any{"sessionID": sid, "callID": callID}
	if token != "" {
		c["sig"] = sign(token, sid, callID)
	}
	obj["_caller"] = c
	b, _ := json.Marshal(obj)
	return string(b)
}

// sign is the plugin's signature of a _caller, as Plugin documents it: HMAC-SHA256 of
// "asyncagents _caller v1\n<sessionID>\n<callID>" keyed by the token, in hex.
func sign(token, sid, callID string) string {
	h := hmac.New(sha256.New, []byte(token))
	h.Write([]byte("asyncagents _caller v1\n" + sid + "\n" + callID))
	return hex.EncodeToString(h.Sum(nil))
}
