package dashboard

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/asyncagents/asyncagents"
)

// --- login links and sessions ---

// sessions holds the pending login codes and the signed-in sessions, both only as hashes,
// in memory: they are gone when the process ends.
type sessions struct {
	clock    asyncagents.Clock
	loginTTL time.Duration
	idle     time.Duration
	lifetime time.Duration

	mu     sync.Mutex
	seq    uint64                // orders codes and sessions by age
	codes  map[[32]byte]code     // sha256 of a login code → the code
	active map[[32]byte]*session // sha256 of a session cookie → the session
}

type code struct {
	seq     uint64
	expires time.Time
}

type session struct {
	key     [32]byte // its key in active
	seq     uint64
	created time.Time
	used    time.Time
	gone    chan struct{} // closed when the session ends: logout, eviction, expiry seen
}

func newSessions(cfg *config) *sessions {
	return &sessions{
		clock: cfg.clock, loginTTL: cfg.loginTTL, idle: cfg.sessionIdle, lifetime: cfg.sessionLifetime,
		codes: make(map[[32]byte]code), active: make(map[[32]byte]*session),
	}
}

// secret returns 32 random bytes, base64url-encoded (43 characters), and their hash.
func secret() (string, [32]byte) {
	var b [32]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	s := base64.RawURLEncoding.EncodeToString(b[:])
	return s, sha256.Sum256([]byte(s))
}

// mint adds a login code and returns it with its expiry, forgetting the oldest pending
// code beyond MaxLoginLinks.
func (s *sessions) mint() (string, time.Time) {
	c, sum := secret()
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	var oldest [32]byte
	var oldestSeq uint64
	for k, v := range s.codes {
		if !now.Before(v.expires) {
			delete(s.codes, k)
		} else if oldestSeq == 0 || v.seq < oldestSeq {
			oldest, oldestSeq = k, v.seq
		}
	}
	if len(s.codes) >= MaxLoginLinks {
		delete(s.codes, oldest)
	}
	s.seq++
	exp := now.Add(s.loginTTL)
	s.codes[sum] = code{seq: s.seq, expires: exp}
	return c, exp
}

// redeem uses up a login code: when it is pending and unexpired, it starts a session and
// returns its cookie value, forgetting the oldest session beyond MaxSessions.
func (s *sessions) redeem(loginCode string) (string, bool) {
	if len(loginCode) > 128 {
		return "", false
	}
	sum := sha256.Sum256([]byte(loginCode))
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.codes[sum]
	delete(s.codes, sum)
	if !ok || !now.Before(c.expires) {
		return "", false
	}
	var oldest [32]byte
	var oldestSeq uint64
	for k, v := range s.active {
		if s.expired(v, now) {
			s.endLocked(k, v)
		} else if oldestSeq == 0 || v.seq < oldestSeq {
			oldest, oldestSeq = k, v.seq
		}
	}
	if len(s.active) >= MaxSessions {
		s.endLocked(oldest, s.active[oldest])
	}
	value, key := secret()
	s.seq++
	s.active[key] = &session{key: key, seq: s.seq, created: now, used: now, gone: make(chan struct{})}
	return value, true
}

func (s *sessions) expired(v *session, now time.Time) bool {
	return now.Sub(v.used) >= s.idle || now.Sub(v.created) >= s.lifetime
}

func (s *sessions) endLocked(key [32]byte, v *session) {
	delete(s.active, key)
	close(v.gone)
}

// check returns the live session a cookie value names and marks it used, or nil.
func (s *sessions) check(value string) *session {
	if value == "" || len(value) > 128 {
		return nil
	}
	key := sha256.Sum256([]byte(value))
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.active[key]
	if !ok {
		return nil
	}
	if s.expired(v, now) {
		s.endLocked(key, v)
		return nil
	}
	v.used = now
	return v
}

// touch marks an open event stream's session used; false when it has ended.
func (s *sessions) touch(v *session) bool {
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-v.gone:
		return false
	default:
	}
	if s.expired(v, now) {
		s.endLocked(v.key, v)
		return false
	}
	v.used = now
	return true
}

// end ends the session a cookie value names, if any.
func (s *sessions) end(value string) {
	key := sha256.Sum256([]byte(value))
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.active[key]; ok {
		s.endLocked(key, v)
	}
}

// LoginLink mints a login link for the page: "?login=<code>", a query to append to the
// address the handler's root is served at, with its trailing slash ("http://127.0.0.1:4097/"
// + h.LoginLink(), or ".../tasks/" + h.LoginLink() under a prefix). The code is 43
// characters of base64url (256 random bits) and is kept only as a hash, in memory.
//
// The link works once, with GET, within the login TTL ([WithLoginTTL]; [DefaultLoginTTL]):
// it answers with a session cookie and a redirect to the page without the code in its
// address. A used, expired or unknown code is answered 401 (an HTML page for a browser,
// JSON otherwise). At most [MaxLoginLinks] unused links are valid at once: minting one
// more forgets the oldest. Without [WithToken] the handler needs no sign-in, and a link
// only sets a cookie that no route needs.
//
// A link is a secret of short value: hand it to the user over a channel only they can
// read (their terminal), not in a log. It never grants more than the page does: the
// session reads tasks and cancels them (unless [WithReadOnly]), and cannot mint links.
func (h *Handler) LoginLink() string {
	c, _ := h.sessions.mint()
	return "?login=" + c
}

// --- the cookie ---

// cookieName names the cookie after the port the page was opened on: browsers send a
// host's cookies to all its ports, and two dashboards on one host must not overwrite each
// other's.
func cookieName(r *http.Request) string {
	name := "asyncagents_dashboard"
	if _, port, err := net.SplitHostPort(r.Host); err == nil && port != "" && len(port) <= 5 && strings.Trim(port, "0123456789") == "" {
		name += "_" + port
	}
	return name
}

// cookiePath is the path of the handler's API as the browser addresses it: "/api/" under
// the prefix the host strips ([http.StripPrefix] leaves RequestURI whole), "/" when the
// prefix cannot be told.
func cookiePath(r *http.Request) string {
	u, err := url.ParseRequestURI(r.RequestURI)
	if err != nil {
		return "/"
	}
	prefix, ok := strings.CutSuffix(u.EscapedPath(), r.URL.EscapedPath())
	if !ok || strings.ContainsAny(prefix, ";\"\\") {
		return "/"
	}
	return prefix + "/api/"
}

func (h *Handler) setCookie(w http.ResponseWriter, r *http.Request, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name: cookieName(r), Value: value, Path: cookiePath(r), MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
}

// --- authentication ---

type sessionKey struct{}

// sessionOf returns the session a request was authenticated with, nil for a bearer token
// or a handler without one.
func sessionOf(r *http.Request) *session {
	s, _ := r.Context().Value(sessionKey{}).(*session)
	return s
}

func (h *Handler) tokenOK(token string) bool {
	got := sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(got[:], h.tokenHash[:]) == 1
}

// bearer reports whether r carries an Authorization header, and whether it holds the token.
func (h *Handler) bearer(r *http.Request) (present, ok bool) {
	v := r.Header.Get("Authorization")
	if v == "" {
		return false, false
	}
	scheme, tok, found := strings.Cut(v, " ")
	return true, found && strings.EqualFold(scheme, "Bearer") && h.tokenOK(strings.TrimSpace(tok))
}

// authenticate checks the token or the session cookie on every route but the page and
// the logout.
func (h *Handler) authenticate(next http.Handler) http.Handler {
	if !h.cfg.hasToken {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/" || r.URL.Path == "/api/logout" {
			next.ServeHTTP(w, r) // the page holds no data; a logout only ends its own session
			return
		}
		if present, ok := h.bearer(r); present {
			if ok {
				next.ServeHTTP(w, r)
				return
			}
		} else if c, err := r.Cookie(cookieName(r)); err == nil {
			if s := h.sessions.check(c.Value); s != nil {
				next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), sessionKey{}, s)))
				return
			}
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="asyncagents"`)
		writeError(w, http.StatusUnauthorized, "missing or invalid token or session")
	})
}

// serveLogin trades a login code (GET /?login=<code>) for a session cookie.
func (h *Handler) serveLogin(w http.ResponseWriter, r *http.Request, codes []string) {
	if !allow(w, r, http.MethodGet) {
		return
	}
	w.Header().Set("Referrer-Policy", "no-referrer")
	w.Header().Set("Cache-Control", "no-store")
	value, ok := "", false
	if len(codes) == 1 {
		value, ok = h.sessions.redeem(codes[0])
	}
	if !ok {
		writeLoginError(w, r)
		return
	}
	h.setCookie(w, r, value, int(h.cfg.sessionLifetime/time.Second))
	// "./", not a path: behind http.StripPrefix the request does not know its prefix.
	w.Header().Set("Location", "./")
	w.WriteHeader(http.StatusSeeOther)
}

const loginErrorHTML = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>asyncagents · login link not valid</title></head>
<body><h1>This login link is not valid</h1>
<p>It was used already, it expired (a link works once, for a few minutes), or this dashboard did not issue it.
Ask the program that runs the dashboard for a new link.</p>
<p><a href="./">Open the dashboard</a> (it loads if this browser is signed in already).</p>
</body></html>
`

// writeLoginError answers 401 for a login code that is not valid: a page for a browser,
// JSON for a program.
func writeLoginError(w http.ResponseWriter, r *http.Request) {
	if !strings.Contains(r.Header.Get("Accept"), "text/html") {
		writeError(w, http.StatusUnauthorized, "login link not valid: used, expired or unknown")
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", "text/html; charset=utf-8")
	hd.Set("Content-Security-Policy", "default-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	w.WriteHeader(http.StatusUnauthorized)
	_, _ = w.Write([]byte(loginErrorHTML))
}

// loginLinkJSON is the answer of POST /api/login-link.
type loginLinkJSON struct {
	Link    string    `json:"link"`
	Expires time.Time `json:"expires"`
}

// serveLoginLink mints a login link for a program that holds the token.
func (h *Handler) serveLoginLink(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodPost) {
		return
	}
	if sessionOf(r) != nil {
		writeError(w, http.StatusForbidden, "a login link needs the token, not a session")
		return
	}
	c, exp := h.sessions.mint()
	writeJSON(w, http.StatusOK, loginLinkJSON{Link: "?login=" + c, Expires: exp.UTC()})
}

// serveLogout ends the session of the request's cookie, if any, and clears the cookie.
func (h *Handler) serveLogout(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodPost) {
		return
	}
	if c, err := r.Cookie(cookieName(r)); err == nil {
		h.sessions.end(c.Value)
	}
	h.setCookie(w, r, "", -1)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
}
