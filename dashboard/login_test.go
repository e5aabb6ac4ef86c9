package dashboard_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents/dashboard"
	"github.com/asyncagents/asyncagents/internal/fakeclock"
)

// noRedirect returns a client of e's server that does not follow redirects.
func noRedirect(e *env) *http.Client {
	return &http.Client{Transport: e.srv.Client().Transport,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// get GETs the server's base URL + path without following redirects.
func get(t *testing.T, e *env, path string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := noRedirect(e).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}

var linkPattern = regexp.MustCompile(`^\?login=[A-Za-z0-9_-]{43}$`)

// login opens link and returns the session cookie it set, failing unless it did.
func login(t *testing.T, e *env, link string) *http.Cookie {
	t.Helper()
	resp, body := get(t, e, "/"+link)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "./" {
		t.Fatalf("GET /%s = %d, Location %q: %s", link, resp.StatusCode, resp.Header.Get("Location"), body)
	}
	cs := resp.Cookies()
	if len(cs) != 1 {
		t.Fatalf("GET /%s set %d cookies", link, len(cs))
	}
	return cs[0]
}

func cookieHeader(c *http.Cookie) []string { return []string{"Cookie", c.Name + "=" + c.Value} }

// tasksStatus is the status of GET /api/tasks with the given headers.
func tasksStatus(t *testing.T, e *env, hdr ...string) int {
	t.Helper()
	code, _, _ := e.do(t, http.MethodGet, "/api/tasks", hdr...)
	return code
}

// The token is for programs, as a bearer header; it is never accepted in a URL.
//
// S-2: no secret in a URL or a log.
func TestTokenOnlyAsBearerHeader(t *testing.T) {
	const token = "s3cret token/+"
	e := newEnv(t, nil, dashboard.WithToken(token))
	code, hdr, body := e.do(t, http.MethodGet, "/api/tasks")
	wantError(t, "no token", code, http.StatusUnauthorized, hdr, body)
	if !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Bearer") {
		t.Errorf("WWW-Authenticate = %q", hdr.Get("WWW-Authenticate"))
	}
	code, hdr, body = e.do(t, http.MethodGet, "/api/tasks", "Authorization", "Bearer wrong")
	wantError(t, "wrong token", code, http.StatusUnauthorized, hdr, body)
	code, hdr, body = e.do(t, http.MethodGet, "/api/events", "Authorization", "Bearer wrong")
	wantError(t, "wrong token, events", code, http.StatusUnauthorized, hdr, body)
	if code := tasksStatus(t, e, "Authorization", "Bearer "+token); code != http.StatusOK {
		t.Errorf("right token = %d", code)
	}
	if code := tasksStatus(t, e, "Authorization", "bearer "+token); code != http.StatusOK {
		t.Errorf("right token, lower-case scheme = %d", code)
	}
	// The page itself holds no data: it loads without the token.
	if code, _, _ := e.do(t, http.MethodGet, "/"); code != http.StatusOK {
		t.Errorf("page without token = %d", code)
	}
	// The token in the page's address signs nothing in: 400, no cookie.
	for _, q := range []string{"?token=" + strings.NewReplacer(" ", "%20", "/", "%2F", "+", "%2B").Replace(token), "?token=wrong"} {
		resp, body := get(t, e, "/"+q)
		wantError(t, "page with "+q[:8], resp.StatusCode, http.StatusBadRequest, resp.Header, []byte(body))
		if len(resp.Cookies()) != 0 || resp.Header.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("page with ?token=: cookies %v, Referrer-Policy %q", resp.Cookies(), resp.Header.Get("Referrer-Policy"))
		}
	}
	if code := tasksStatus(t, e, "Cookie", "asyncagents_dashboard="+token); code != http.StatusUnauthorized {
		t.Errorf("the token as a cookie = %d", code)
	}
}

// A login link works once, is traded for a session cookie that holds neither the
// token nor the code, and redirects to the page without the code.
//
// S-2: the status page has its own credential: a single-use login link traded for an
// expiring server-side session, distinct from the bridge's token.
func TestLoginLinkWorksOnce(t *testing.T) {
	const token = "the-dashboard-token"
	var log syncBuffer
	e := newEnv(t, held(), dashboard.WithToken(token),
		dashboard.WithLogger(slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	task := e.launch(t, e.caller, "stuck", "x", false)
	link := e.h.LoginLink()
	if !linkPattern.MatchString(link) {
		t.Fatalf("LoginLink() = %q, want ?login= and 43 base64url characters", link)
	}
	code := strings.TrimPrefix(link, "?login=")
	resp, _ := get(t, e, "/"+link)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "./" {
		t.Fatalf("GET /%s = %d, Location %q", link, resp.StatusCode, resp.Header.Get("Location"))
	}
	for k, v := range map[string]string{"Referrer-Policy": "no-referrer", "Cache-Control": "no-store"} {
		if resp.Header.Get(k) != v {
			t.Errorf("%s = %q, want %q", k, resp.Header.Get(k), v)
		}
	}
	_, port, _ := strings.Cut(strings.TrimPrefix(e.srv.URL, "http://"), ":")
	cs := resp.Cookies()
	if len(cs) != 1 {
		t.Fatalf("cookies = %v", cs)
	}
	c := cs[0]
	if c.Name != "asyncagents_dashboard_"+port || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/api/" ||
		c.MaxAge != int(dashboard.DefaultSessionLifetime/time.Second) || len(c.Value) != 43 ||
		strings.Contains(c.Value, token) || strings.Contains(c.Value, code) || c.Value == code {
		t.Errorf("cookie = %+v", c)
	}
	if code := tasksStatus(t, e, cookieHeader(c)...); code != http.StatusOK {
		t.Errorf("with the cookie: %d", code)
	}
	s := openStream(t, e, "", cookieHeader(c)...)
	if ev := s.next(t); ev.name != "snapshot" {
		t.Errorf("stream with the cookie: %+v", ev)
	}
	if code, _, body := e.do(t, http.MethodPost, "/api/tasks/"+task.ID+"/cancel", cookieHeader(c)...); code != http.StatusOK {
		t.Errorf("cancel with the cookie: %d %s", code, body)
	}

	// The link works once: then, as any link it did not mint, 401, JSON for a program and
	// a page for a browser, neither echoing the code.
	for _, l := range []string{link, "?login=" + strings.Repeat("A", 43), "?login=", "?login=" + strings.Repeat("x", 5000)} {
		resp, body := get(t, e, "/"+l, "Accept", "application/json")
		wantError(t, "used or unknown link", resp.StatusCode, http.StatusUnauthorized, resp.Header, []byte(body))
		if len(resp.Cookies()) != 0 {
			t.Errorf("a failed login set %v", resp.Cookies())
		}
		resp, body = get(t, e, "/"+l, "Accept", "text/html,application/xhtml+xml")
		if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") ||
			!strings.Contains(body, "This login link is not valid") || strings.Contains(body, code) || resp.Header.Get("Content-Security-Policy") == "" {
			t.Errorf("used link in a browser = %d %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
	}
	// Two codes at once, and HEAD, trade nothing.
	a, b := e.h.LoginLink(), e.h.LoginLink()
	resp, body := get(t, e, "/"+a+"&login="+strings.TrimPrefix(b, "?login="))
	wantError(t, "two codes", resp.StatusCode, http.StatusUnauthorized, resp.Header, []byte(body))
	code2, hdr, body2 := e.do(t, http.MethodHead, "/"+b)
	if code2 != http.StatusMethodNotAllowed || hdr.Get("Allow") != "GET" {
		t.Errorf("HEAD /%s = %d, Allow %q %s", b, code2, hdr.Get("Allow"), body2)
	}
	c2 := login(t, e, b) // still unused

	// Opened by many at once, a link lets one in.
	l := e.h.LoginLink()
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for range 20 {
		wg.Go(func() {
			resp, err := noRedirect(e).Get(e.srv.URL + "/" + l)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			mu.Lock()
			codes[resp.StatusCode]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if codes[http.StatusSeeOther] != 1 || codes[http.StatusUnauthorized] != 19 {
		t.Errorf("20 GETs of one link at once: %v", codes)
	}

	// The log names none of the secrets.
	s.close()
	for _, secret := range []string{token, code, strings.TrimPrefix(b, "?login="), c.Value, c2.Value} {
		if strings.Contains(log.String(), secret) {
			t.Errorf("the log holds a secret: %s", log.String())
		}
	}
}

// syncBuffer is a bytes.Buffer for a logger.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A link expires after the login TTL; at most MaxLoginLinks unused links are kept.
//
// S-2: the status page has its own credential: a single-use login link traded for an
// expiring server-side session, distinct from the bridge's token.
func TestLoginLinksExpireAndAreBounded(t *testing.T) {
	clock := fakeclock.New(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	e := newEnv(t, nil, dashboard.WithToken("t"), dashboard.WithClock(clock))
	early, late := e.h.LoginLink(), e.h.LoginLink()
	clock.Advance(dashboard.DefaultLoginTTL - time.Second)
	login(t, e, early)
	clock.Advance(time.Second)
	resp, body := get(t, e, "/"+late)
	wantError(t, "expired link", resp.StatusCode, http.StatusUnauthorized, resp.Header, []byte(body))

	e2 := newEnv(t, nil, dashboard.WithToken("t"), dashboard.WithClock(clock), dashboard.WithLoginTTL(time.Minute))
	l := e2.h.LoginLink()
	clock.Advance(time.Minute)
	resp, body = get(t, e2, "/"+l)
	wantError(t, "expired link, WithLoginTTL", resp.StatusCode, http.StatusUnauthorized, resp.Header, []byte(body))

	var links []string
	for range dashboard.MaxLoginLinks + 1 {
		links = append(links, e2.h.LoginLink())
	}
	resp, body = get(t, e2, "/"+links[0])
	wantError(t, "the oldest of too many links", resp.StatusCode, http.StatusUnauthorized, resp.Header, []byte(body))
	for _, l := range links[1:] {
		login(t, e2, l)
	}
}

// A session is the handler's own: another handler with the same token (the host
// restarted) does not know its cookie.
//
// S-2: the status page has its own credential: a single-use login link traded for an
// expiring server-side session, distinct from the bridge's token.
func TestSessionEndsWithHandler(t *testing.T) {
	e := newEnv(t, nil, dashboard.WithToken("same"))
	c := login(t, e, e.h.LoginLink())
	again, err := dashboard.New(e.m, dashboard.WithToken("same"))
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	req := httptest.NewRequest(http.MethodGet, "/api/tasks", nil)
	req.Host = strings.TrimPrefix(e.srv.URL, "http://")
	req.AddCookie(c)
	rec := httptest.NewRecorder()
	again.ServeHTTP(rec, req)
	if rec.Code != http.StatusUnauthorized {
		t.Errorf("the cookie at a new handler with the same token: %d", rec.Code)
	}
}

// A session ends after its idle timeout, or its lifetime, whichever comes first;
// an open event stream keeps it in use and ends with it.
//
// S-2: the status page has its own credential: a single-use login link traded for an
// expiring server-side session, distinct from the bridge's token.
func TestSessionExpiresIdleOrAtLifetime(t *testing.T) {
	clock := fakeclock.New(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	e := newEnv(t, nil, dashboard.WithToken("t"), dashboard.WithClock(clock),
		dashboard.WithSessionTimeout(time.Hour, 3*time.Hour), dashboard.WithHeartbeat(20*time.Millisecond))
	idle := login(t, e, e.h.LoginLink())
	used := login(t, e, e.h.LoginLink())
	watched := login(t, e, e.h.LoginLink())
	if idle.MaxAge != 3*3600 {
		t.Errorf("Max-Age %d, want the lifetime", idle.MaxAge)
	}
	s := openStream(t, e, "", cookieHeader(watched)...)
	heartbeats := func(n int) {
		t.Helper()
		for n > 0 {
			select {
			case ev := <-s.events:
				if ev.name == "comment" {
					n--
				}
			case <-s.done:
				t.Fatal("the stream ended")
			case <-time.After(5 * time.Second):
				t.Fatal("no heartbeat in 5 s")
			}
		}
	}
	for range 2 {
		clock.Advance(50 * time.Minute)
		heartbeats(3)
		if code := tasksStatus(t, e, cookieHeader(used)...); code != http.StatusOK {
			t.Fatalf("a session used every 50 min: %d", code)
		}
	}
	// 100 min after the login: the idle session ended, the one with a stream did not.
	if code := tasksStatus(t, e, cookieHeader(idle)...); code != http.StatusUnauthorized {
		t.Errorf("a session idle for 100 min of 60: %d", code)
	}
	if code := tasksStatus(t, e, cookieHeader(watched)...); code != http.StatusOK {
		t.Errorf("a session with an open stream: %d", code)
	}
	// At 3 h, the lifetime, both end, and so does the stream.
	clock.Advance(50 * time.Minute)
	heartbeats(1)
	if code := tasksStatus(t, e, cookieHeader(used)...); code != http.StatusOK {
		t.Fatalf("at 150 min: %d", code)
	}
	clock.Advance(30 * time.Minute)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		t.Error("the stream outlived its session")
	}
	for _, c := range []*http.Cookie{used, watched} {
		if code := tasksStatus(t, e, cookieHeader(c)...); code != http.StatusUnauthorized {
			t.Errorf("a session at its lifetime: %d", code)
		}
	}
}

// At most MaxSessions sessions; one more login ends the oldest.
//
// S-2: the status page has its own credential: a single-use login link traded for an
// expiring server-side session, distinct from the bridge's token.
func TestSessionsBoundedOldestEnds(t *testing.T) {
	e := newEnv(t, nil, dashboard.WithToken("t"))
	var cs []*http.Cookie
	for range dashboard.MaxSessions + 1 {
		cs = append(cs, login(t, e, e.h.LoginLink()))
	}
	if code := tasksStatus(t, e, cookieHeader(cs[0])...); code != http.StatusUnauthorized {
		t.Errorf("the oldest of %d sessions: %d", len(cs), code)
	}
	for _, c := range cs[1:] {
		if code := tasksStatus(t, e, cookieHeader(c)...); code != http.StatusOK {
			t.Fatalf("a newer session: %d", code)
		}
	}
}

// POST /api/logout ends the session, clears the cookie and ends its streams.
//
// S-2: the status page has its own credential: a single-use login link traded for an
// expiring server-side session, distinct from the bridge's token.
func TestLogoutEndsSessionAndStreams(t *testing.T) {
	e := newEnv(t, nil, dashboard.WithToken("t"))
	c := login(t, e, e.h.LoginLink())
	s := openStream(t, e, "", cookieHeader(c)...)
	s.next(t)
	code, hdr, _ := e.do(t, http.MethodPost, "/api/logout", cookieHeader(c)...)
	if code != http.StatusNoContent || !strings.Contains(hdr.Get("Set-Cookie"), c.Name+"=;") || !strings.Contains(hdr.Get("Set-Cookie"), "Max-Age=0") {
		t.Errorf("logout = %d, Set-Cookie %q", code, hdr.Get("Set-Cookie"))
	}
	if code := tasksStatus(t, e, cookieHeader(c)...); code != http.StatusUnauthorized {
		t.Errorf("after logout: %d", code)
	}
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		t.Error("the stream outlived the logout")
	}
	// Without a session, and from another site.
	if code, _, _ := e.do(t, http.MethodPost, "/api/logout"); code != http.StatusNoContent {
		t.Errorf("logout without a session = %d", code)
	}
	c2 := login(t, e, e.h.LoginLink())
	code, hdr, body := e.do(t, http.MethodPost, "/api/logout", append(cookieHeader(c2), "Sec-Fetch-Site", "cross-site")...)
	wantError(t, "cross-site logout", code, http.StatusForbidden, hdr, body)
	if code := tasksStatus(t, e, cookieHeader(c2)...); code != http.StatusOK {
		t.Errorf("after a refused logout: %d", code)
	}
}

// Under a prefix, the cookie's path is the prefix's API, and the redirect stays
// under the prefix.
//
// S-2: the status page has its own credential: a single-use login link traded for an
// expiring server-side session, distinct from the bridge's token.
func TestLoginUnderPrefix(t *testing.T) {
	e := newEnv(t, nil, dashboard.WithToken("t"))
	mux := http.NewServeMux()
	mux.Handle("/tasks/", http.StripPrefix("/tasks", e.h))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Get(srv.URL + "/tasks/" + e.h.LoginLink())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cs := resp.Cookies()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "./" || len(cs) != 1 || cs[0].Path != "/tasks/api/" {
		t.Fatalf("login under /tasks/ = %d, Location %q, cookies %v", resp.StatusCode, resp.Header.Get("Location"), cs)
	}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/tasks/api/tasks", nil)
	req.AddCookie(cs[0])
	resp, err = client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /tasks/api/tasks with the cookie = %d", resp.StatusCode)
	}
}

// A program that holds the token mints login links with POST /api/login-link; a
// session cannot.
//
// S-2: the status page has its own credential: a single-use login link traded for an
// expiring server-side session, distinct from the bridge's token.
func TestOnlyTokenHolderMintsLoginLinks(t *testing.T) {
	e := newEnv(t, nil, dashboard.WithToken("tok"))
	code, hdr, body := e.do(t, http.MethodPost, "/api/login-link", "Authorization", "Bearer tok")
	var got struct {
		Link    string
		Expires time.Time
	}
	if err := json.Unmarshal(body, &got); code != http.StatusOK || err != nil || !linkPattern.MatchString(got.Link) ||
		time.Until(got.Expires) > dashboard.DefaultLoginTTL || time.Until(got.Expires) < dashboard.DefaultLoginTTL-time.Minute ||
		hdr.Get("Cache-Control") != "no-store" {
		t.Fatalf("POST /api/login-link = %d %s", code, body)
	}
	c := login(t, e, got.Link)
	code, hdr, body = e.do(t, http.MethodPost, "/api/login-link", cookieHeader(c)...)
	wantError(t, "a link for a session", code, http.StatusForbidden, hdr, body)
	code, hdr, body = e.do(t, http.MethodPost, "/api/login-link")
	wantError(t, "a link for nobody", code, http.StatusUnauthorized, hdr, body)
	code, hdr, body = e.do(t, http.MethodPost, "/api/login-link", "Authorization", "Bearer tok", "Origin", "https://evil.example")
	wantError(t, "a link for another site", code, http.StatusForbidden, hdr, body)
	code, hdr, body = e.do(t, http.MethodGet, "/api/login-link", "Authorization", "Bearer tok")
	wantError(t, "GET a link", code, http.StatusMethodNotAllowed, hdr, body)
}

// Without a token, the page and the API need no sign-in, and a login link still works.
func TestWithoutTokenNoLoginNeeded(t *testing.T) {
	e := newEnv(t, nil)
	if code := tasksStatus(t, e); code != http.StatusOK {
		t.Errorf("GET /api/tasks = %d", code)
	}
	c := login(t, e, e.h.LoginLink())
	if code := tasksStatus(t, e, cookieHeader(c)...); code != http.StatusOK {
		t.Errorf("GET /api/tasks with a cookie = %d", code)
	}
	resp, body := get(t, e, "/?token=x")
	wantError(t, "?token= without a token", resp.StatusCode, http.StatusBadRequest, resp.Header, []byte(body))
}
