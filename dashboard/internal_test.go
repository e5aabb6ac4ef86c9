package dashboard

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/asyncagentstest"
	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// Tests that reach into the handler: a hub that falls behind the Manager, a client that
// stops reading. The TestMain of package dashboard_test runs these too.

func internalEnv(t *testing.T, set func(*config), opts ...Option) (*opencodetest.FakeClient, *asyncagents.Manager, *Handler, *httptest.Server, asyncagents.Caller) {
	t.Helper()
	f := opencodetest.NewFakeClient(opencodetest.WithHeldRuns())
	t.Cleanup(func() { _ = f.Close() })
	m, err := asyncagents.New(f, asyncagents.WithPollInterval(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	h, err := New(m, append(opts, optionFunc(set))...)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { _ = h.Close() })
	s, err := f.CreateSession(context.Background(), opencode.CreateSessionRequest{Title: "parent"})
	if err != nil {
		t.Fatal(err)
	}
	return f, m, h, srv, asyncagents.Caller{SessionID: s.ID, Agent: "build"}
}

type sse struct{ id, name, data string }

// events reads the events of GET /api/events until the body ends.
func events(t *testing.T, srv *httptest.Server) <-chan sse {
	t.Helper()
	resp, err := srv.Client().Get(srv.URL + "/api/events")
	if err != nil {
		t.Fatal(err)
	}
	c := make(chan sse, 100000)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(c)
		ReadSSE(resp.Body, func(ev SSEEvent) bool {
			if ev.Name != "comment" {
				c <- sse{id: ev.ID, name: ev.Name, data: ev.Data}
			}
			return true
		})
	}()
	t.Cleanup(func() { resp.Body.Close(); <-done })
	return c
}

func nextEvent(t *testing.T, c <-chan sse) sse {
	t.Helper()
	select {
	case ev, ok := <-c:
		if !ok {
			t.Fatal("stream ended")
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event in 10 s")
	}
	return sse{}
}

func launch(t *testing.T, m *asyncagents.Manager, caller asyncagents.Caller, prompt string) asyncagents.Task {
	t.Helper()
	task, err := m.Launch(context.Background(), asyncagents.LaunchInput{Caller: caller, Description: "d", Agent: "general", Prompt: prompt})
	if err != nil {
		t.Fatal(err)
	}
	return asyncagentstest.Started(t, m, task)
}

// When the handler's own subscription falls behind, it subscribes again and every stream
// gets a snapshot of a new epoch.
func TestHubResubscribesWhenBehind(t *testing.T) {
	var held atomic.Bool
	gate := make(chan struct{})
	_, m, _, srv, caller := internalEnv(t, func(c *config) {
		c.subBuffer = 1
		c.beforeChange = func() {
			if held.Load() {
				<-gate
			}
		}
	})
	c := events(t, srv)
	first := nextEvent(t, c)
	if first.name != "snapshot" {
		t.Fatalf("first event %+v", first)
	}
	held.Store(true)
	var launched []string
	for range 4 { // the hub holds one change, the buffer one, the third drops it
		launched = append(launched, launch(t, m, caller, "x").ID)
	}
	held.Store(false)
	close(gate)
	epoch, _, _ := strings.Cut(first.id, "-")
	for {
		ev := nextEvent(t, c)
		if ev.name != "snapshot" {
			continue
		}
		ep, n, _ := strings.Cut(ev.id, "-")
		if ep == epoch || n != "0" {
			t.Fatalf("snapshot after falling behind has id %s (first %s)", ev.id, first.id)
		}
		for _, id := range launched {
			if !strings.Contains(ev.data, id) {
				t.Errorf("snapshot lacks task %s", id)
			}
		}
		break
	}
	// The new subscription works.
	late := launch(t, m, caller, "y")
	for ev := nextEvent(t, c); !strings.Contains(ev.data, late.ID); ev = nextEvent(t, c) {
	}
}

// logs records log records' messages and errors.
type logs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// A client that stops reading holds up neither the Manager, nor the handler, nor other
// clients, and is cut off when a write times out.
func TestSlowClientNeverBlocks(t *testing.T) {
	var log logs
	_, m, h, srv, caller := internalEnv(t, func(c *config) { c.writeTimeout = 1500 * time.Millisecond },
		WithLogger(slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	stuck, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Close()
	_ = stuck.(*net.TCPConn).SetReadBuffer(4096)
	if _, err := fmt.Fprintf(stuck, "GET /api/events HTTP/1.1\r\nHost: %s\r\n\r\n", srv.Listener.Addr()); err != nil {
		t.Fatal(err)
	}
	reader := events(t, srv)
	if ev := nextEvent(t, reader); ev.name != "snapshot" {
		t.Fatalf("first event %+v", ev)
	}

	// 12 MB of changes: far more than the stuck connection's buffers hold.
	const n = 200
	big := strings.Repeat("p", 64<<10)
	start := time.Now()
	var ids []string
	for range n {
		ids = append(ids, launch(t, m, caller, big).ID)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("%d launches took %v", n, d)
	}
	seq := 0 // each launch is a change, and its start one or two more
	for i := range n {
		for started := false; !started; {
			seq++
			ev := nextEvent(t, reader)
			if ev.name != "change" || !strings.HasSuffix(ev.id, fmt.Sprintf("-%d", seq)) || !strings.Contains(ev.data, ids[i]) {
				t.Fatalf("event %d = %s %s, want a change of %s", seq, ev.name, ev.id, ids[i])
			}
			started = !strings.Contains(ev.data, `"starting":true`)
		}
	}
	if !testmain.Eventually(10*time.Second, func() bool { return strings.Contains(log.String(), "i/o timeout") }) {
		t.Errorf("the stuck stream was not cut off; log:\n%s", log.String())
	}
	start = time.Now()
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close took %v", d)
	}
}
