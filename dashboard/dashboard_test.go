package dashboard_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/dashboard"
	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// shared is the real OpenCode server of the browser test.
var shared opencodetest.Shared

func TestMain(m *testing.M) { testmain.Run(m, shared.Close) }

// env is a Manager on the in-memory OpenCode with a dashboard in front of it.
type env struct {
	f      *opencodetest.FakeClient
	m      *asyncagents.Manager
	h      *dashboard.Handler
	srv    *httptest.Server
	caller asyncagents.Caller
}

func newEnv(t *testing.T, fakeOpts []opencodetest.FakeOption, opts ...dashboard.Option) *env {
	t.Helper()
	return newEnvServer(t, fakeOpts, nil, opts...)
}

// newEnvServer is newEnv with setup applied to the test server before it starts.
func newEnvServer(t *testing.T, fakeOpts []opencodetest.FakeOption, setup func(*http.Server), opts ...dashboard.Option) *env {
	t.Helper()
	f := opencodetest.NewFakeClient(fakeOpts...)
	t.Cleanup(func() { _ = f.Close() })
	m, err := asyncagents.New(f, asyncagents.WithPollInterval(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	if !testmain.Eventually(10*time.Second, func() bool { return f.Streams() == 1 }) {
		t.Fatal("the Manager did not subscribe to the fake's events")
	}
	srv := httptest.NewUnstartedServer(nil)
	h, err := dashboard.New(m, opts...)
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = h
	if setup != nil {
		setup(srv.Config)
	}
	srv.Start()
	t.Cleanup(srv.Close)
	t.Cleanup(func() { _ = h.Close() }) // before srv.Close: it waits for open streams
	return &env{f: f, m: m, h: h, srv: srv, caller: parent(t, f)}
}

func held() []opencodetest.FakeOption { return []opencodetest.FakeOption{opencodetest.WithHeldRuns()} }

func parent(t *testing.T, c opencode.Client) asyncagents.Caller {
	t.Helper()
	s, err := c.CreateSession(context.Background(), opencode.CreateSessionRequest{Title: "parent"})
	if err != nil {
		t.Fatal(err)
	}
	return asyncagents.Caller{SessionID: s.ID, Agent: "build"}
}

func (e *env) launch(t *testing.T, caller asyncagents.Caller, desc, prompt string, fork bool) asyncagents.Task {
	t.Helper()
	task, err := e.m.Launch(context.Background(), asyncagents.LaunchInput{Caller: caller, Description: desc, Agent: "general", Prompt: prompt, Fork: fork})
	if err != nil {
		t.Fatal(err)
	}
	return task
}

func (e *env) await(t *testing.T, caller asyncagents.Caller, id string) asyncagents.Task {
	t.Helper()
	out, err := e.m.Output(context.Background(), caller, id, asyncagents.OutputOptions{Block: true, Timeout: 30 * time.Second})
	if err != nil || out.TimedOut {
		t.Fatalf("Output(%s) = %+v, %v", id, out, err)
	}
	return out.Task
}

// do sends a request and returns the status, the headers and the body.
func (e *env) do(t *testing.T, method, path string, hdr ...string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, body
}

// getJSON GETs path, wants 200 and decodes the body into v.
func (e *env) getJSON(t *testing.T, path string, v any, hdr ...string) {
	t.Helper()
	code, _, body := e.do(t, http.MethodGet, path, hdr...)
	if code != http.StatusOK {
		t.Fatalf("GET %s = %d %s", path, code, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: %v in %s", path, err, body)
	}
}

// wantError checks a JSON error answer.
func wantError(t *testing.T, what string, code, want int, hdr http.Header, body []byte) {
	t.Helper()
	if code != want {
		t.Errorf("%s: status %d, want %d (%s)", what, code, want, body)
		return
	}
	if ct := hdr.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("%s: Content-Type %q", what, ct)
	}
	var e struct{ Error string }
	if err := json.Unmarshal(body, &e); err != nil || e.Error == "" {
		t.Errorf("%s: body %s is not {\"error\": …}", what, body)
	}
	if len(body) > 160 || strings.Contains(string(body), "asyncagents.") || strings.Contains(string(body), "&{") {
		t.Errorf("%s: body too long or a Go dump: %s", what, body)
	}
}

type taskDoc map[string]any

func (d taskDoc) obj(k string) taskDoc { m, _ := d[k].(map[string]any); return m }
func (d taskDoc) str(k string) string  { s, _ := d[k].(string); return s }

func TestTaskJSONShape(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	// The parent did some work, so a fork inherits something.
	if _, err := e.f.Prompt(ctx, e.caller.SessionID, opencode.PromptRequest{Parts: []opencode.TextPartInput{opencode.NewText("RUN:echo TOKEN=1")}}); err != nil {
		t.Fatal(err)
	}
	forked := e.launch(t, e.caller, "forked look", "RUN:echo a ||| echo b", true)
	e.await(t, e.caller, forked.ID)
	waiting := e.launch(t, e.caller, "outside", "RUN:cat /no/such/file.txt", false)
	if !testmain.Eventually(10*time.Second, func() bool { t, _ := e.m.Get(waiting.ID); return t.Permission != nil }) {
		t.Fatal("no pending permission")
	}
	if !testmain.Eventually(10*time.Second, func() bool {
		t, _ := e.m.Get(forked.ID)
		return len(t.Notifications) > 0 && t.Notifications[len(t.Notifications)-1].State == asyncagents.NotificationDelivered
	}) {
		t.Fatal("notification not delivered")
	}

	var d taskDoc
	e.getJSON(t, "/api/tasks/"+forked.ID, &d)
	for _, k := range []string{"id", "parentSessionID", "parentAgent", "description", "prompt", "agent", "status", "started",
		"completed", "result", "batchID", "resumeCount", "forked", "progress", "forkStats", "notifications", "displayID"} {
		if _, ok := d[k]; !ok {
			t.Errorf("task JSON lacks %q: %v", k, d)
		}
	}
	now, err := e.m.Get(forked.ID) // display ids grow as siblings arrive
	if err != nil {
		t.Fatal(err)
	}
	if d.str("id") != forked.ID || d.str("status") != "completed" || d["forked"] != true || d.str("displayID") != now.DisplayID || now.DisplayID == "" {
		t.Errorf("task = %v", d)
	}
	if p := d.obj("progress"); p["toolCalls"] != 2.0 || p.obj("tools")["bash"] != 2.0 || len(p["lastTools"].([]any)) != 2 || p.str("updated") == "" {
		t.Errorf("progress = %v", p)
	}
	if fs := d.obj("forkStats"); fs["final_messages"] == nil || fs["original_messages"] == nil || fs["total_chars"] == nil {
		t.Errorf("forkStats = %v", fs)
	}
	if ns, _ := d["notifications"].([]any); len(ns) == 0 || taskDoc(ns[len(ns)-1].(map[string]any)).str("state") != "delivered" {
		t.Errorf("notifications = %v", d["notifications"])
	}
	// The id without "ses_" names the task too.
	var short taskDoc
	e.getJSON(t, "/api/tasks/"+strings.TrimPrefix(forked.ID, "ses_"), &short)
	if short.str("id") != forked.ID {
		t.Errorf("by short id: %v", short)
	}

	var w taskDoc
	e.getJSON(t, "/api/tasks/"+waiting.ID, &w)
	if p := w.obj("permission"); p.str("permission") != "external_directory" || p.str("id") == "" || len(p["patterns"].([]any)) == 0 {
		t.Errorf("permission = %v", w["permission"])
	}
	if _, ok := w["completed"]; ok {
		t.Errorf("a running task has completed: %v", w)
	}
}

func TestListFilters(t *testing.T) {
	e := newEnv(t, held())
	other := parent(t, e.f)
	a1 := e.launch(t, e.caller, "a1", "one", false)
	a2 := e.launch(t, e.caller, "a2", "two", false)
	b1 := e.launch(t, other, "b1", "three", false)
	if err := e.f.Release(a1.ID, opencodetest.Text("done")); err != nil {
		t.Fatal(err)
	}
	e.await(t, e.caller, a1.ID)

	ids := func(path string) []string {
		t.Helper()
		var l struct{ Tasks []taskDoc }
		e.getJSON(t, path, &l)
		var out []string
		for _, d := range l.Tasks {
			out = append(out, d.str("id"))
		}
		return out
	}
	all, err := e.m.ListAll("")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, task := range all {
		want = append(want, task.ID)
	}
	for _, c := range []struct {
		path string
		want []string
	}{
		{"/api/tasks", want},
		{"/api/tasks?parent=" + e.caller.SessionID, filter(want, a1.ID, a2.ID)},
		{"/api/tasks?parent=" + other.SessionID, []string{b1.ID}},
		{"/api/tasks?parent=" + e.caller.SessionID + "&status=completed", []string{a1.ID}},
		{"/api/tasks?status=running", filter(want, a2.ID, b1.ID)},
		{"/api/tasks?parent=ses_nobody", nil},
	} {
		if got := ids(c.path); strings.Join(got, ",") != strings.Join(c.want, ",") {
			t.Errorf("GET %s = %v, want %v", c.path, got, c.want)
		}
	}
	// An empty list is [], not null.
	if _, _, body := e.do(t, http.MethodGet, "/api/tasks?status=cancelled"); !strings.Contains(string(body), `"tasks":[]`) {
		t.Errorf("empty list = %s", body)
	}
}

// filter keeps the ids of in that are among keep, in in's order.
func filter(in []string, keep ...string) []string {
	var out []string
	for _, id := range in {
		for _, k := range keep {
			if id == k {
				out = append(out, id)
			}
		}
	}
	return out
}

func TestErrors(t *testing.T) {
	e := newEnv(t, held())
	done := e.launch(t, e.caller, "done", "x", false)
	if err := e.f.Release(done.ID, opencodetest.Text("ok")); err != nil {
		t.Fatal(err)
	}
	e.await(t, e.caller, done.ID)
	for _, c := range []struct {
		method, path string
		want         int
		allow        string
	}{
		{"GET", "/api/nothing", 404, ""},
		{"GET", "/nothing", 404, ""},
		{"GET", "/api/tasks?status=bogus", 400, ""},
		{"GET", "/api/tasks?parent=a%20b", 400, ""},
		{"GET", "/api/tasks?status=" + strings.Repeat("x", 5000), 400, ""},
		{"GET", "/api/tasks/" + strings.Repeat("a", 3000), 400, ""},
		{"GET", "/api/tasks/bad$id", 400, ""},
		{"GET", "/api/tasks/ses_unknown", 404, ""},
		{"POST", "/api/tasks/ses_unknown/cancel", 404, ""},
		{"POST", "/api/tasks/" + done.ID + "/cancel", 409, ""},
		{"DELETE", "/api/tasks", 405, "GET, HEAD"},
		{"PUT", "/api/tasks/" + done.ID, 405, "GET, HEAD"},
		{"GET", "/api/tasks/" + done.ID + "/cancel", 405, "POST"},
		{"POST", "/api/events", 405, "GET"},
		{"POST", "/", 405, "GET, HEAD"},
	} {
		code, hdr, body := e.do(t, c.method, c.path)
		what := c.method + " " + c.path
		if len(what) > 60 {
			what = what[:60] + "…"
		}
		wantError(t, what, code, c.want, hdr, body)
		if c.allow != "" && hdr.Get("Allow") != c.allow {
			t.Errorf("%s: Allow %q, want %q", what, hdr.Get("Allow"), c.allow)
		}
	}
}

func TestCancel(t *testing.T) {
	e := newEnv(t, held())
	task := e.launch(t, e.caller, "stuck", "x", false)
	code, _, body := e.do(t, http.MethodPost, "/api/tasks/"+task.ID+"/cancel")
	var d taskDoc
	if err := json.Unmarshal(body, &d); code != http.StatusOK || err != nil || d.str("status") != "cancelled" || d.str("id") != task.ID {
		t.Fatalf("cancel = %d %s", code, body)
	}
	if got, _ := e.m.Get(task.ID); got.Status != asyncagents.StatusCancelled {
		t.Errorf("task after cancel = %s", got.Status)
	}
	code, hdr, body := e.do(t, http.MethodPost, "/api/tasks/"+task.ID+"/cancel")
	wantError(t, "second cancel", code, http.StatusConflict, hdr, body)

	// A POST from another site is refused whatever the authentication.
	other := e.launch(t, e.caller, "other", "y", false)
	code, hdr, body = e.do(t, http.MethodPost, "/api/tasks/"+other.ID+"/cancel", "Sec-Fetch-Site", "cross-site")
	wantError(t, "cross-site cancel", code, http.StatusForbidden, hdr, body)
	code, hdr, body = e.do(t, http.MethodPost, "/api/tasks/"+other.ID+"/cancel", "Origin", "https://evil.example")
	wantError(t, "cross-origin cancel", code, http.StatusForbidden, hdr, body)
	if got, _ := e.m.Get(other.ID); got.Status != asyncagents.StatusRunning {
		t.Errorf("refused cancel changed the task: %s", got.Status)
	}
}

func TestReadOnly(t *testing.T) {
	e := newEnv(t, held(), dashboard.WithReadOnly())
	task := e.launch(t, e.caller, "stuck", "x", false)
	code, hdr, body := e.do(t, http.MethodPost, "/api/tasks/"+task.ID+"/cancel")
	wantError(t, "read-only cancel", code, http.StatusForbidden, hdr, body)
	if got, _ := e.m.Get(task.ID); got.Status != asyncagents.StatusRunning {
		t.Errorf("task = %s", got.Status)
	}
	_, _, page := e.do(t, http.MethodGet, "/")
	if !strings.Contains(string(page), `<meta name="asyncagents-read-only" content="true">`) {
		t.Error("the page is not marked read-only")
	}
	s := openStream(t, e, "")
	if ev := s.next(t); ev.name != "snapshot" || !strings.Contains(ev.data, `"readOnly":true`) {
		t.Errorf("snapshot = %+v", ev)
	}
}

func TestPage(t *testing.T) {
	e := newEnv(t, nil)
	code, hdr, body := e.do(t, http.MethodGet, "/")
	if code != http.StatusOK || !strings.HasPrefix(hdr.Get("Content-Type"), "text/html") {
		t.Fatalf("GET / = %d %s", code, hdr.Get("Content-Type"))
	}
	page := string(body)
	if !strings.Contains(page, `content="false"`) {
		t.Error("the page is not marked writable")
	}
	// Self-contained: nothing loaded from elsewhere, and the policy allows only its own
	// inline script and style.
	if m := regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?(https?:)?//`).FindString(page); m != "" {
		t.Errorf("the page loads from elsewhere: %s", m)
	}
	csp := hdr.Get("Content-Security-Policy")
	for _, tag := range []string{"script", "style"} {
		_, rest, _ := strings.Cut(page, "<"+tag+">")
		inline, _, _ := strings.Cut(rest, "</"+tag+">")
		sum := sha256.Sum256([]byte(inline))
		if want := "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"; !strings.Contains(csp, tag+"-src "+want) {
			t.Errorf("CSP %q lacks %s-src %s", csp, tag, want)
		}
	}
	if code, _, _ := e.do(t, http.MethodHead, "/"); code != http.StatusOK {
		t.Errorf("HEAD / = %d", code)
	}
}

func TestMiddleware(t *testing.T) {
	var calls int
	var mu sync.Mutex
	mw := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			calls++
			mu.Unlock()
			if r.Header.Get("X-Host-Auth") != "yes" {
				http.Error(w, "host says no", http.StatusTeapot)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	e := newEnv(t, nil, dashboard.WithMiddleware(mw), dashboard.WithReadOnly())
	for _, path := range []string{"/", "/api/tasks", "/api/events"} {
		if code, _, _ := e.do(t, http.MethodGet, path); code != http.StatusTeapot {
			t.Errorf("GET %s without the host's auth = %d", path, code)
		}
	}
	if code, _, _ := e.do(t, http.MethodGet, "/api/tasks", "X-Host-Auth", "yes"); code != http.StatusOK {
		t.Errorf("with the host's auth = %d", code)
	}
	if calls != 4 {
		t.Errorf("middleware called %d times, want 4", calls)
	}
}

func TestNewValidates(t *testing.T) {
	e := newEnv(t, nil)
	for name, opts := range map[string][]dashboard.Option{
		"empty token":    {dashboard.WithToken("")},
		"long token":     {dashboard.WithToken(strings.Repeat("x", 5000))},
		"nil middleware": {dashboard.WithMiddleware(nil)},
		"zero heartbeat": {dashboard.WithHeartbeat(0)},
		"no history":     {dashboard.WithHistory(0)},
		"huge history":   {dashboard.WithHistory(dashboard.MaxHistory + 1)},
		"no streams":     {dashboard.WithMaxStreams(0)},
		"many streams":   {dashboard.WithMaxStreams(dashboard.MaxStreams + 1)},
		"nil logger":     {dashboard.WithLogger(nil)},
		"nil clock":      {dashboard.WithClock(nil)},
		"no login TTL":   {dashboard.WithLoginTTL(0)},
		"long login TTL": {dashboard.WithLoginTTL(dashboard.MaxLoginTTL + time.Second)},
		"no idle":        {dashboard.WithSessionTimeout(0, time.Hour)},
		"idle past life": {dashboard.WithSessionTimeout(2*time.Hour, time.Hour)},
		"no lifetime":    {dashboard.WithSessionTimeout(time.Hour, 0)},
		"long lifetime":  {dashboard.WithSessionTimeout(time.Hour, dashboard.MaxSessionLifetime+time.Second)},
		"host with port": {dashboard.WithAllowedHosts("dev.example:80")},
		"host wildcard":  {dashboard.WithAllowedHosts("*.example")},
		"empty host":     {dashboard.WithAllowedHosts("")},
		"host with path": {dashboard.WithAllowedHosts("dev.example/x")},
		"bracketed IP":   {dashboard.WithAllowedHosts("[::1]")},
	} {
		if h, err := dashboard.New(e.m, opts...); !errors.Is(err, asyncagents.ErrInvalidInput) {
			t.Errorf("%s: New = %v, want ErrInvalidInput", name, err)
			if h != nil {
				_ = h.Close()
			}
		}
	}
	if _, err := dashboard.New(nil); !errors.Is(err, asyncagents.ErrInvalidInput) {
		t.Errorf("nil manager: %v", err)
	}
	if err := e.m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := dashboard.New(e.m); !errors.Is(err, asyncagents.ErrClosed) {
		t.Errorf("closed manager: %v", err)
	}
}

// --- event streams ---

type event struct{ id, name, data string }

// stream reads the events of GET /api/events on its own goroutine.
type stream struct {
	resp   *http.Response
	events chan event
	done   chan struct{} // closed when the body ended
}

func openStream(t *testing.T, e *env, lastID string, hdr ...string) *stream {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.srv.URL+"/api/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		resp.Body.Close()
		t.Fatalf("GET /api/events = %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	s := &stream{resp: resp, events: make(chan event, 10000), done: make(chan struct{})}
	go s.read()
	t.Cleanup(s.close)
	return s
}

func (s *stream) read() {
	defer close(s.done)
	dashboard.ReadSSE(s.resp.Body, func(ev dashboard.SSEEvent) bool {
		s.events <- event{id: ev.ID, name: ev.Name, data: ev.Data}
		return true
	})
}

func (s *stream) close() {
	s.resp.Body.Close()
	<-s.done
}

// next returns the next event that is not a comment, failing after 10 s.
func (s *stream) next(t *testing.T) event {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				t.Fatal("stream ended")
			}
			if ev.name != "comment" {
				return ev
			}
		case <-s.done:
			select {
			case ev := <-s.events:
				if ev.name != "comment" {
					return ev
				}
				continue
			default:
			}
			t.Fatal("stream ended")
		case <-timeout:
			t.Fatal("no event in 10 s")
		}
	}
}

// change is a decoded change event.
type change struct {
	Seq     uint64
	Task    taskDoc
	Removed bool
}

func decode(t *testing.T, ev event) change {
	t.Helper()
	var c change
	if ev.name != "change" || json.Unmarshal([]byte(ev.data), &c) != nil {
		t.Fatalf("not a change: %+v", ev)
	}
	return c
}

// until reads changes until one satisfies cond and returns all it read.
func (s *stream) until(t *testing.T, cond func(change) bool) []event {
	t.Helper()
	var out []event
	for {
		ev := s.next(t)
		out = append(out, ev)
		if ev.name == "change" && cond(decode(t, ev)) {
			return out
		}
	}
}

func idNum(t *testing.T, id string) (string, uint64) {
	t.Helper()
	epoch, num, ok := strings.Cut(id, "-")
	var n uint64
	if _, err := fmt.Sscan(num, &n); !ok || err != nil {
		t.Fatalf("event id %q is not <epoch>-<n>", id)
	}
	return epoch, n
}

func statusIs(id, status string) func(change) bool {
	return func(c change) bool { return c.Task.str("id") == id && c.Task.str("status") == status }
}

// A client that reconnects with Last-Event-ID gets exactly the changes it missed.
func TestEventsResumeWithoutGaps(t *testing.T) {
	e := newEnv(t, held())
	before := e.launch(t, e.caller, "before", "x", false)

	ref := openStream(t, e, "") // never disconnects
	if snap := ref.next(t); snap.name != "snapshot" {
		t.Fatalf("first event = %+v", snap)
	} else if !strings.Contains(snap.data, before.ID) { // the handler had not seen the launch yet
		ref.until(t, statusIs(before.ID, "running"))
	}
	a := openStream(t, e, "")
	if ev := a.next(t); ev.name != "snapshot" || !strings.Contains(ev.data, before.ID) {
		t.Fatalf("second stream's first event = %+v, want a snapshot with %s", ev, before.ID)
	}
	task := e.launch(t, e.caller, "watched", "y", false)
	got := a.until(t, statusIs(task.ID, "running"))
	lastSeen := got[len(got)-1].id
	a.close()

	// Missed: a tool call, the completion, the notification, another launch.
	if err := e.f.Release(task.ID, opencodetest.Bash("echo hi"), opencodetest.Text("done")); err != nil {
		t.Fatal(err)
	}
	e.await(t, e.caller, task.ID)
	later := e.launch(t, e.caller, "later", "z", false)

	want := ref.until(t, statusIs(later.ID, "running"))
	b := openStream(t, e, lastSeen)
	got = b.until(t, statusIs(later.ID, "running"))
	// ref's events from after lastSeen are the ones b must get, in the same order.
	var i int
	for i = range want {
		if want[i].id == lastSeen {
			break
		}
	}
	want = want[i+1:]
	if len(got) != len(want) {
		t.Fatalf("resumed stream got %d events, want %d: %v", len(got), len(want), ids(got))
	}
	epoch, last := idNum(t, lastSeen)
	var seq uint64
	for k := range got {
		if got[k] != want[k] {
			t.Fatalf("event %d: got %+v, want %+v", k, got[k], want[k])
		}
		ep, n := idNum(t, got[k].id)
		if ep != epoch || n != last+uint64(k)+1 {
			t.Errorf("event %d id %s after %s: not the next", k, got[k].id, lastSeen)
		}
		c := decode(t, got[k])
		if seq != 0 && c.Seq != seq+1 {
			t.Errorf("seq %d after %d", c.Seq, seq)
		}
		seq = c.Seq
	}
	var sawTool, sawDone bool
	for _, ev := range got {
		c := decode(t, ev)
		if c.Task.str("id") == task.ID && c.Task.obj("progress")["toolCalls"] == 1.0 {
			sawTool = true
		}
		if c.Task.str("id") == task.ID && c.Task.str("status") == "completed" && c.Task.str("result") == "done" {
			sawDone = true
		}
	}
	if !sawTool || !sawDone {
		t.Errorf("resumed stream lacks the tool call (%v) or the completion (%v)", sawTool, sawDone)
	}

	// The same through ?lastEventId=, as the page sends it after it gave up and reconnects.
	c := openStreamQuery(t, e, lastSeen)
	if ev := c.next(t); ev != want[0] {
		t.Errorf("?lastEventId: first event %+v, want %+v", ev, want[0])
	}
}

func openStreamQuery(t *testing.T, e *env, lastID string) *stream {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/api/events?lastEventId="+lastID, nil)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	s := &stream{resp: resp, events: make(chan event, 1000), done: make(chan struct{})}
	go s.read()
	t.Cleanup(s.close)
	return s
}

func ids(evs []event) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, ev.name+" "+ev.id)
	}
	return out
}

// A client of another epoch (a restarted host), from the future, or too far behind gets a
// snapshot first.
func TestEventsSnapshotWhenResumeImpossible(t *testing.T) {
	e := newEnv(t, held(), dashboard.WithHistory(3))
	first := openStream(t, e, "")
	snap := first.next(t)
	epoch, n0 := idNum(t, snap.id)
	if n0 != 0 || snap.name != "snapshot" {
		t.Fatalf("first snapshot %+v", snap)
	}
	var last event
	for i := range 5 {
		task := e.launch(t, e.caller, fmt.Sprint("t", i), "x", false)
		evs := first.until(t, statusIs(task.ID, "running"))
		last = evs[len(evs)-1]
	}
	_, n := idNum(t, last.id)
	if n < 4 {
		t.Fatalf("only %d changes", n)
	}
	for _, c := range []struct {
		lastID string
		snap   bool
	}{
		{"0123456789abcdef-1", true},              // another epoch
		{"garbage", true},                         // not an id
		{snap.id, true},                           // more than 3 changes behind
		{fmt.Sprintf("%s-%d", epoch, n+5), true},  // from the future
		{fmt.Sprintf("%s-%d", epoch, n-3), false}, // 3 behind: all held
		{last.id, false},                          // up to date
	} {
		s := openStream(t, e, c.lastID)
		if c.snap {
			ev := s.next(t)
			if ev.name != "snapshot" || ev.id != last.id {
				t.Errorf("Last-Event-ID %s: first event %s %s, want a snapshot %s", c.lastID, ev.name, ev.id, last.id)
			}
			var sn struct {
				Time  time.Time
				Tasks []taskDoc
			}
			if err := json.Unmarshal([]byte(ev.data), &sn); err != nil || len(sn.Tasks) != 5 || time.Since(sn.Time) > time.Minute {
				t.Errorf("snapshot = %s", ev.data)
			}
		} else {
			_, from := idNum(t, c.lastID)
			for k := from + 1; k <= n; k++ {
				if ev := s.next(t); ev.name != "change" || ev.id != fmt.Sprintf("%s-%d", epoch, k) {
					t.Errorf("Last-Event-ID %s: got %s %s, want change %d", c.lastID, ev.name, ev.id, k)
				}
			}
		}
		s.close()
	}
}

func TestEventsHeartbeat(t *testing.T) {
	e := newEnv(t, nil, dashboard.WithHeartbeat(20*time.Millisecond))
	s := openStream(t, e, "")
	timeout := time.After(5 * time.Second)
	for beats := 0; beats < 3; {
		select {
		case ev := <-s.events:
			if ev.name == "comment" && ev.data == ": heartbeat" {
				beats++
			}
		case <-timeout:
			t.Fatal("fewer than 3 heartbeats in 5 s")
		}
	}
}

func TestCloseEndsStreams(t *testing.T) {
	e := newEnv(t, nil)
	s := openStream(t, e, "")
	s.next(t)
	start := time.Now()
	if err := e.h.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		t.Fatal("stream still open after Close")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close took %v", d)
	}
	_ = e.h.Close() // idempotent
	for _, path := range []string{"/api/events", "/api/tasks"} {
		code, hdr, body := e.do(t, http.MethodGet, path)
		wantError(t, "after Close: "+path, code, http.StatusServiceUnavailable, hdr, body)
	}
	if code, _, _ := e.do(t, http.MethodGet, "/"); code != http.StatusOK {
		t.Errorf("page after Close = %d", code)
	}
}

func TestManagerCloseEndsStreams(t *testing.T) {
	e := newEnv(t, nil)
	s := openStream(t, e, "")
	s.next(t)
	if err := e.m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		t.Fatal("stream still open after the Manager closed")
	}
	for _, path := range []string{"/api/events", "/api/tasks", "/api/tasks/ses_x"} {
		code, hdr, body := e.do(t, http.MethodGet, path)
		wantError(t, "manager closed: "+path, code, http.StatusServiceUnavailable, hdr, body)
	}
}
