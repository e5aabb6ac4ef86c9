package opencodetest_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// A fault for one request: the first status read fails with 503, the next passes.
func ExampleProxy() {
	// A stand-in for `opencode serve`; with a Server, give NewProxy its URL.
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{}`)
	}))
	defer server.Close()
	proxy := opencodetest.NewProxy(server.URL)
	defer proxy.Close()
	client, err := opencode.NewHTTPClient(proxy.URL)
	if err != nil {
		panic(err)
	}

	fault := proxy.Inject(opencodetest.Fault{Pattern: "GET /session/status", Status: 503, Times: 1})
	_, err = client.SessionStatus(context.Background(), "")
	fmt.Println(err)
	_, err = client.SessionStatus(context.Background(), "")
	fmt.Println(err, fault.Hits())
	// Output:
	// opencode: GET /session/status: HTTP 503: opencodetest: injected HTTP 503 for GET /session/status
	// <nil> 1
}

// upstream is a stand-in for OpenCode: it counts requests, answers "ok <path>", and serves
// GET /global/event from frames the test sends on its channel.
type upstream struct {
	*httptest.Server
	hits   atomic.Int64
	body   atomic.Value // string: the body of the last request
	frames chan string
}

func (u *upstream) lastBody() string {
	s, _ := u.body.Load().(string)
	return s
}

func newUpstream(t *testing.T) *upstream {
	t.Helper()
	u := &upstream{frames: make(chan string)}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		u.body.Store(string(b))
		u.hits.Add(1)
		if r.URL.Path != "/global/event" {
			fmt.Fprintf(w, "ok %s %s", r.Method, r.URL.Path)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		fmt.Fprint(w, "data: {\"payload\":{\"type\":\"server.connected\",\"properties\":{}}}\n\n")
		_ = rc.Flush()
		for {
			select {
			case f, ok := <-u.frames:
				if !ok {
					return
				}
				fmt.Fprint(w, f)
				_ = rc.Flush()
			case <-r.Context().Done():
				return
			}
		}
	}))
	t.Cleanup(u.Close)
	return u
}

func newProxy(t *testing.T, upstream string) *opencodetest.Proxy {
	t.Helper()
	p := opencodetest.NewProxy(upstream)
	t.Cleanup(p.Close)
	return p
}

func get(t *testing.T, c *http.Client, url string) (string, error) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return fmt.Sprintf("%d %s", resp.StatusCode, b), err
}

// poll waits until cond holds, failing the test after d.
func poll(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	if !testmain.Eventually(d, cond) {
		t.Fatal("condition not met in time")
	}
}

func TestProxyPassesThroughAndInjectsFaults(t *testing.T) {
	up := newUpstream(t)
	p := newProxy(t, up.URL)
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}} // no transparent retries of GETs
	defer c.CloseIdleConnections()

	if got, err := get(t, c, p.URL+"/session/ses_a/message"); err != nil || got != "200 ok GET /session/ses_a/message" {
		t.Fatalf("pass-through = %q, %v", got, err)
	}

	// Status: answered by the proxy in OpenCode's error shape; the server sees nothing.
	status := p.Inject(opencodetest.Fault{Pattern: "GET /session/{id}/message", Status: 503, Times: 1})
	before := up.hits.Load()
	got, err := get(t, c, p.URL+"/session/ses_a/message")
	if err != nil || !strings.HasPrefix(got, `503 {"data":{"message":"opencodetest: injected HTTP 503`) || up.hits.Load() != before {
		t.Fatalf("status fault = %q, %v (upstream hits %d → %d)", got, err, before, up.hits.Load())
	}
	if got, _ := get(t, c, p.URL+"/session/ses_a/message"); got != "200 ok GET /session/ses_a/message" || status.Hits() != 1 {
		t.Fatalf("after Times ran out = %q, hits %d", got, status.Hits())
	}

	// Method and path must both match; the oldest matching injection takes the request.
	reset := p.Inject(opencodetest.Fault{Pattern: "POST /session/ses_b/{rest...}", Reset: true})
	counter := p.Inject(opencodetest.Fault{Pattern: "/session/ses_b/{rest...}"})
	if got, err := get(t, c, p.URL+"/session/ses_b/message"); err != nil || got != "200 ok GET /session/ses_b/message" {
		t.Fatalf("GET past a POST fault = %q, %v", got, err)
	}
	before = up.hits.Load()
	if _, err := c.Post(p.URL+"/session/ses_b/prompt_async", "application/json", strings.NewReader("{}")); err == nil {
		t.Fatal("reset fault: no error")
	}
	if up.hits.Load() != before || reset.Hits() != 1 || counter.Hits() != 1 {
		t.Fatalf("reset forwarded (hits %d → %d) or miscounted (reset %d, counter %d)", before, up.hits.Load(), reset.Hits(), counter.Hits())
	}
	reset.Remove()
	reset.Remove()
	if resp, err := c.Post(p.URL+"/session/ses_b/prompt_async", "application/json", nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("after Remove: %v, %v", resp, err)
	} else {
		resp.Body.Close()
	}
	if counter.Hits() != 2 {
		t.Errorf("counting fault hits = %d, want 2", counter.Hits())
	}
	counter.Remove()

	// DropResponse: the server acted, the client gets a broken connection.
	drop := p.Inject(opencodetest.Fault{Pattern: "POST /session/{id}/prompt_async", DropResponse: true, Times: 1})
	before = up.hits.Load()
	if _, err := c.Post(p.URL+"/session/ses_c/prompt_async", "application/json", nil); err == nil {
		t.Fatal("dropped response: no error")
	}
	if up.hits.Load() != before+1 || drop.Hits() != 1 {
		t.Fatalf("dropped response not forwarded once: hits %d → %d", before, up.hits.Load())
	}

	// Late: the client gets a broken connection at once; the server gets the request, with
	// its body, Delay later.
	p.Inject(opencodetest.Fault{Pattern: "POST /session/{id}/message", Late: true, Delay: 200 * time.Millisecond, Times: 1})
	before = up.hits.Load()
	start := time.Now()
	if _, err := c.Post(p.URL+"/session/ses_d/message", "application/json", strings.NewReader(`{"parts":[]}`)); err == nil {
		t.Fatal("late request: no error")
	}
	if up.hits.Load() != before || time.Since(start) > 150*time.Millisecond {
		t.Fatalf("late request forwarded at once (hits %d → %d) or the client waited %v", before, up.hits.Load(), time.Since(start))
	}
	poll(t, 10*time.Second, func() bool { return up.hits.Load() == before+1 })
	if time.Since(start) < 200*time.Millisecond || up.lastBody() != `{"parts":[]}` {
		t.Fatalf("late request forwarded after %v with body %q", time.Since(start), up.lastBody())
	}

	// Delay holds the request, then forwards it.
	p.Inject(opencodetest.Fault{Pattern: "GET /agent", Delay: 150 * time.Millisecond, Jitter: 50 * time.Millisecond})
	start = time.Now()
	if got, err := get(t, c, p.URL+"/agent"); err != nil || got != "200 ok GET /agent" || time.Since(start) < 150*time.Millisecond {
		t.Fatalf("delayed = %q, %v after %v", got, err, time.Since(start))
	}

	// Through opencode.HTTPClient: an injected status is an *opencode.APIError with the message.
	oc, err := opencode.NewHTTPClient(p.URL)
	if err != nil {
		t.Fatal(err)
	}
	p.Inject(opencodetest.Fault{Pattern: "GET /session/status", Status: 500})
	_, err = oc.SessionStatus(context.Background(), "")
	if apiErr := (*opencode.APIError)(nil); !errors.As(err, &apiErr) || apiErr.StatusCode != 500 || apiErr.Name != "ProxyFault" {
		t.Errorf("SessionStatus through a 500 fault = %v", err)
	}
}

func TestProxyRejectsBadFaults(t *testing.T) {
	p := newProxy(t, "http://127.0.0.1:1")
	for name, f := range map[string]opencodetest.Fault{
		"two actions":   {Pattern: "/x", Status: 500, Reset: true},
		"late and drop": {Pattern: "/x", Late: true, DropResponse: true},
		"bad status":    {Pattern: "/x", Status: 1000},
		"negative":      {Pattern: "/x", Times: -1},
		"empty pattern": {},
		"bad pattern":   {Pattern: "GET /{"},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: Inject did not panic", name)
				}
			}()
			p.Inject(f)
		}()
	}
	for _, u := range []string{"", "127.0.0.1:80", "ftp://x"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewProxy(%q) did not panic", u)
				}
			}()
			opencodetest.NewProxy(u).Close()
		}()
	}
	// The upstream is unreachable: 502 in OpenCode's error shape.
	oc, _ := opencode.NewHTTPClient(p.URL)
	_, err := oc.Agents(context.Background(), "")
	if apiErr := (*opencode.APIError)(nil); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadGateway {
		t.Errorf("unreachable upstream = %v", err)
	}
}

// nextEvent reads one event or the stream's end from a stream ranged in a goroutine.
type eventReader struct {
	ch chan result
}

type result struct {
	ev  opencode.Event
	err error
}

func readEvents(s opencode.EventStream) *eventReader {
	r := &eventReader{ch: make(chan result, 64)}
	go func() {
		defer close(r.ch)
		for ev, err := range s.All() {
			r.ch <- result{ev, err}
		}
	}()
	return r
}

func (r *eventReader) next(t *testing.T) result {
	t.Helper()
	select {
	case res, ok := <-r.ch:
		if !ok {
			t.Fatal("stream ended without an error")
		}
		return res
	case <-time.After(10 * time.Second):
		t.Fatal("no event in time")
	}
	return result{}
}

func TestProxyEventStreamSendAndCut(t *testing.T) {
	up := newUpstream(t)
	p := newProxy(t, up.URL)
	oc, err := opencode.NewHTTPClient(p.URL)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := oc.Events(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	r := readEvents(stream)
	if ev := r.next(t); ev.err != nil || ev.ev.Type != opencode.EventServerConnected {
		t.Fatalf("first event = %+v", ev)
	}
	if n := p.EventStreams(); n != 1 {
		t.Fatalf("EventStreams = %d", n)
	}

	// Half a frame from the server, then an injected event, then the rest: both arrive
	// whole, the injected one never inside the server's frame.
	up.frames <- `data: {"directory":"/d","payload":{"type":"session.status","properties":{"sessionID":"ses_1",`
	if n := p.SendEvent("/proj", opencode.Event{Type: opencode.EventSessionIdle, Properties: []byte(`{"sessionID":"ses_x"}`)}); n != 1 {
		t.Fatalf("SendEvent queued on %d streams", n)
	}
	up.frames <- `"status":{"type":"busy"}}}}` + "\n\n"
	got := map[string]result{}
	for range 2 {
		res := r.next(t)
		got[res.ev.Type] = res
	}
	if res := got[opencode.EventSessionStatus]; res.err != nil || res.ev.Directory != "/d" || !strings.Contains(string(res.ev.Properties), `"busy"`) {
		t.Errorf("server frame = %+v", res)
	}
	if res := got[opencode.EventSessionIdle]; res.err != nil || res.ev.Directory != "/proj" || string(res.ev.Properties) != `{"sessionID":"ses_x"}` {
		t.Errorf("injected frame = %+v", res)
	}

	// An injected event while the server is silent arrives at once.
	p.SendEvent("/proj", opencode.Event{Type: opencode.EventSessionIdle, Properties: []byte(`{"sessionID":"ses_y"}`)})
	if ev := r.next(t); ev.err != nil || !strings.Contains(string(ev.ev.Properties), "ses_y") {
		t.Errorf("injected on a silent stream = %+v", ev)
	}

	// Cut: the client's read fails (not a clean end), and the stream is gone.
	if n := p.CutEvents(); n != 1 {
		t.Fatalf("CutEvents cut %d streams", n)
	}
	if ev := r.next(t); ev.err == nil || errors.Is(ev.err, io.EOF) {
		t.Errorf("after a cut: %+v, want a read error", ev)
	}
	poll(t, 5*time.Second, func() bool { return p.EventStreams() == 0 })

	// Refusing the stream is a fault like any other.
	p.Inject(opencodetest.Fault{Pattern: "GET /global/event", Status: 503})
	if _, err := oc.Events(context.Background()); err == nil {
		t.Error("refused stream opened")
	}
}

func TestProxySetUpstreamAndClose(t *testing.T) {
	a, b := newUpstream(t), newUpstream(t)
	p := opencodetest.NewProxy(a.URL)
	c := &http.Client{Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	if _, err := get(t, c, p.URL+"/x"); err != nil || a.hits.Load() != 1 {
		t.Fatal(err)
	}
	p.SetUpstream(b.URL + "/")
	if _, err := get(t, c, p.URL+"/x"); err != nil || b.hits.Load() != 1 || p.Upstream() != b.URL {
		t.Fatalf("after SetUpstream: %v, b hits %d, upstream %s", err, b.hits.Load(), p.Upstream())
	}

	// Close ends an open stream and a held request, and returns.
	oc, _ := opencode.NewHTTPClient(p.URL)
	stream, err := oc.Events(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	r := readEvents(stream)
	r.next(t)
	hold := p.Inject(opencodetest.Fault{Pattern: "GET /held", Delay: time.Hour})
	held := make(chan error, 1)
	go func() {
		resp, err := c.Get(p.URL + "/held")
		if err == nil {
			resp.Body.Close()
		}
		held <- err
	}()
	poll(t, 5*time.Second, func() bool { return hold.Hits() == 1 })
	closed := make(chan struct{})
	go func() { p.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
	if ev := r.next(t); ev.err == nil {
		t.Errorf("stream after Close: %+v", ev)
	}
	if err := <-held; err == nil {
		t.Error("held request succeeded after Close")
	}
	p.Close() // idempotent
}

// Server.Restart brings the server back on the same folders: stored sessions and messages
// are there, a run in progress is not, and a proxy hides the restart from its clients.
func TestServerRestartKeepsSessions(t *testing.T) {
	srv := opencodetest.Start(t)
	p := newProxy(t, srv.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, err := opencode.NewHTTPClient(p.URL, opencode.WithDirectory(srv.Directory))
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.CreateSession(ctx, opencode.CreateSessionRequest{Title: "survivor"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Prompt(ctx, s.ID, opencode.PromptRequest{Parts: []opencode.TextPartInput{opencode.NewText("RUN:echo before")}}); err != nil {
		t.Fatal(err)
	}
	if err := c.PromptAsync(ctx, s.ID, opencode.PromptRequest{Parts: []opencode.TextPartInput{opencode.NewText("SLEEP:30")}}); err != nil {
		t.Fatal(err)
	}
	poll(t, 30*time.Second, func() bool {
		st, err := c.SessionStatus(ctx, "")
		return err == nil && st[s.ID].Type == "busy"
	})
	oldPID := srv.PID()
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	p.SetUpstream(srv.URL)
	if srv.PID() == oldPID || srv.PID() == 0 {
		t.Errorf("PID %d after restart, was %d", srv.PID(), oldPID)
	}
	got, err := c.GetSession(ctx, s.ID)
	if err != nil || got.Title != "survivor" {
		t.Fatalf("session after restart = %+v, %v", got, err)
	}
	st, err := c.SessionStatus(ctx, "")
	if err != nil || len(st) != 0 {
		t.Errorf("status after restart = %v, %v; want no busy session", st, err)
	}
	msgs, err := c.Messages(ctx, s.ID, 0)
	if err != nil || len(msgs) < 4 {
		t.Fatalf("messages after restart: %d, %v", len(msgs), err)
	}
	// The interrupted step stays as it was: no finish, no completion time, no error.
	if last := msgs[len(msgs)-1].Info; last.Role != opencode.RoleAssistant || last.Finish != "" || last.Time.Completed != 0 || last.Error != nil {
		t.Errorf("interrupted step after restart = %+v", last)
	}
	// The restarted server works: a new prompt on the same session runs.
	reply, err := c.Prompt(ctx, s.ID, opencode.PromptRequest{Parts: []opencode.TextPartInput{opencode.NewText("RUN:echo after")}})
	if err != nil || reply.Info.Finish != "stop" {
		t.Fatalf("prompt after restart = %+v, %v", reply, err)
	}
	srv.Close()
	if err := srv.Restart(ctx); err == nil {
		t.Error("Restart after Close succeeded")
	}
}
