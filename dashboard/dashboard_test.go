package dashboard_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/asyncagentstest"
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
	return asyncagentstest.Started(t, e.m, task)
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
	if err := e.f.Release(a1.SessionID, opencodetest.Text("done")); err != nil {
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
	if err := e.f.Release(done.SessionID, opencodetest.Text("ok")); err != nil {
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
