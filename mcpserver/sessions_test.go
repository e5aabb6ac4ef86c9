package mcpserver_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/mcpserver"
)

// initialize opens an MCP session as a client that never comes back would, and returns
// its id.
func (b *bridge) initialize(t *testing.T) string {
	t.Helper()
	resp := b.send(t, http.MethodPost, initializeBody, testToken, nil)
	id := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || id == "" {
		t.Fatalf("initialize: HTTP %d, session %q", resp.StatusCode, id)
	}
	return id
}

// ping sends a ping in session id and returns the HTTP status.
func (b *bridge) ping(t *testing.T, id string) int {
	t.Helper()
	return b.send(t, http.MethodPost, `{"jsonrpc":"2.0","id":2,"method":"ping"}`, testToken,
		map[string]string{"Mcp-Session-Id": id, "Mcp-Protocol-Version": "2025-11-25"}).StatusCode
}

// stream opens session id's event stream (GET) and returns a channel closed when the
// bridge ends it, and a function that closes it from the client's side.
func (b *bridge) stream(t *testing.T, id string) (ended <-chan struct{}, closeIt func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.http.URL, nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Mcp-Session-Id", id)
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		cancel()
		t.Fatalf("GET: %v %v", resp, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(io.Discard, bufio.NewReader(resp.Body))
		resp.Body.Close()
	}()
	closeIt = func() {
		cancel()
		<-done
	}
	t.Cleanup(closeIt)
	return done, closeIt
}

// B (issue 12): at most WithMaxSessions sessions: a new one closes the session idle
// longest; sessions with a request in progress (an open event stream) are kept, and when
// every one has, the new session is refused with 503 and Retry-After.
func TestMaxSessions(t *testing.T) {
	t.Parallel()
	b := newBridge(t, mcpserver.WithMaxSessions(3))
	ids := []string{b.initialize(t), b.initialize(t), b.initialize(t)}
	if code := b.ping(t, ids[0]); code != http.StatusOK {
		t.Fatalf("ping: HTTP %d", code)
	}
	ids = append(ids, b.initialize(t)) // closes ids[1], idle longest since ids[0] was used
	if !testmain.Eventually(5*time.Second, func() bool { return b.ping(t, ids[1]) == http.StatusNotFound }) {
		t.Fatal("the session idle longest was not closed")
	}
	for _, i := range []int{0, 2, 3} {
		if code := b.ping(t, ids[i]); code != http.StatusOK {
			t.Fatalf("session %d: HTTP %d", i, code)
		}
	}
	closers := map[int]func(){}
	for _, i := range []int{0, 2, 3} {
		_, closers[i] = b.stream(t, ids[i])
	}
	resp := b.send(t, http.MethodPost, initializeBody, testToken, nil)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" || resp.Header.Get("Mcp-Session-Id") != "" {
		t.Fatalf("a new session while every one is in use: HTTP %d %v", resp.StatusCode, resp.Header)
	}
	closers[2]()
	if !testmain.Eventually(5*time.Second, func() bool {
		return b.send(t, http.MethodPost, initializeBody, testToken, nil).StatusCode == http.StatusOK
	}) {
		t.Fatal("no new session after a stream closed")
	}
	if !testmain.Eventually(5*time.Second, func() bool { return b.ping(t, ids[2]) == http.StatusNotFound }) {
		t.Fatal("the idle session was not closed")
	}
	if code := b.ping(t, ids[0]); code != http.StatusOK {
		t.Fatalf("a session with a stream: HTTP %d", code)
	}
	if got := b.logs.find("mcpserver: new MCP session refused: every session is in use"); len(got) == 0 {
		t.Fatal("the refusal was not logged")
	}
}

// B (issue 12): a session idle for WithSessionTimeout is closed, its event stream too, and
// its id is answered 404; a call that runs longer than the timeout keeps its session.
func TestSessionTimeout(t *testing.T) {
	t.Parallel()
	b := newBridge(t, mcpserver.WithSessionTimeout(time.Second))
	start := time.Now()
	id := b.initialize(t)
	ended, _ := b.stream(t, id) // an open stream does not keep the session
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the idle session's stream was not closed")
	}
	if d := time.Since(start); d < time.Second {
		t.Fatalf("closed after %v", d)
	}
	// The stream ends as the session begins to close; then its id is unknown.
	if !testmain.Eventually(5*time.Second, func() bool { return b.ping(t, id) == http.StatusNotFound }) {
		t.Fatal("the closed session is still served")
	}

	_, args := slowTask(t, b, `{"task_id":"%s","block":true,"timeout":1.5}`)
	cs := b.connect(t, nil)
	res, err := cs.CallTool(ctxT(t, 10*time.Second), &mcp.CallToolParams{Name: "output", Arguments: raw(args)})
	if err != nil || res.IsError || !strings.Contains(textOf(res), "Timed out waiting") {
		t.Fatalf("a call of 1.5 s: %v %v", res, err)
	}
	if _, err := cs.ListTools(ctxT(t, 10*time.Second), nil); err != nil {
		t.Fatalf("the session after the call: %v", err)
	}
}

// B (issue 12): clients that open sessions and never come back hold at most
// WithMaxSessions sessions' goroutines, and none after WithSessionTimeout. Not parallel:
// it counts the process's goroutines.
func TestAbandonedSessionsBounded(t *testing.T) {
	const max = 8
	b := newBridge(t, mcpserver.WithMaxSessions(max), mcpserver.WithSessionTimeout(time.Second))
	before := goleak.IgnoreCurrent()
	n0 := runtime.NumGoroutine()
	for range max {
		b.initialize(t)
	}
	n1 := runtime.NumGoroutine()
	for range 50 * max {
		b.initialize(t)
	}
	var n2 int
	if !testmain.Eventually(5*time.Second, func() bool { n2 = runtime.NumGoroutine(); return n2 <= n1+2 }) {
		t.Fatalf("%d goroutines with %d sessions, %d after %d more abandoned ones", n1, max, n2, 50*max)
	}
	t.Logf("goroutines: %d, %d with %d sessions (%.1f per session), %d after %d more", n0, n1, max, float64(n1-n0)/max, n2, 50*max)
	var err error
	if !testmain.Eventually(10*time.Second, func() bool { err = goleak.Find(before); return err == nil }) {
		t.Fatalf("after the session timeout: %v", err)
	}
}
