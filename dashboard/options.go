package dashboard

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/asyncagents/asyncagents"
)

// Defaults and bounds of the options of [New].
const (
	// DefaultHeartbeat is how often an idle event stream gets a comment line
	// (": heartbeat"), so that proxies and browsers keep it open ([WithHeartbeat]).
	DefaultHeartbeat = 15 * time.Second
	// DefaultHistory is how many recent changes the handler keeps for event streams that
	// reconnect ([WithHistory]).
	DefaultHistory = 1024
	// MaxHistory bounds [WithHistory].
	MaxHistory = 1 << 16
	// DefaultMaxStreams is how many event streams may be open at once ([WithMaxStreams]).
	DefaultMaxStreams = 64
	// MaxStreams bounds [WithMaxStreams].
	MaxStreams = 1 << 12
	// DefaultLoginTTL is how long a login link stays valid ([WithLoginTTL]).
	DefaultLoginTTL = 5 * time.Minute
	// MaxLoginTTL bounds [WithLoginTTL].
	MaxLoginTTL = time.Hour
	// DefaultSessionIdle is how long a session lasts unused ([WithSessionTimeout]).
	DefaultSessionIdle = 8 * time.Hour
	// DefaultSessionLifetime is how long a session lasts at most, used or not
	// ([WithSessionTimeout]).
	DefaultSessionLifetime = 24 * time.Hour
	// MaxSessionLifetime bounds [WithSessionTimeout].
	MaxSessionLifetime = 30 * 24 * time.Hour
	// MaxLoginLinks is how many unused login links are valid at once: minting one more
	// forgets the oldest ([Handler.LoginLink]).
	MaxLoginLinks = 16
	// MaxSessions is how many sessions are kept at once: a login beyond it ends the
	// oldest session.
	MaxSessions = 64
	// retryAfter is the Retry-After, in seconds, of a stream refused for [WithMaxStreams].
	retryAfter = "5"
	// maxToken bounds the length of a token in bytes.
	maxToken = 4096
	// subscriptionBuffer is the buffer of the handler's own [asyncagents.Subscription]:
	// its reader only encodes each change once, so it falls behind only under a burst of
	// this many changes faster than that.
	subscriptionBuffer = 4096
	// defaultWriteTimeout bounds each write to an event stream: a client that stops reading is
	// cut off after it, so that [Handler.Close] never waits longer for its stream.
	defaultWriteTimeout = 10 * time.Second
)

// Option configures a [Handler]; pass options to [New].
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	token           string
	hasToken        bool
	middlewares     []func(http.Handler) http.Handler
	readOnly        bool
	heartbeat       time.Duration
	history         int
	maxStreams      int
	loginTTL        time.Duration
	sessionIdle     time.Duration
	sessionLifetime time.Duration
	allowedHosts    []string // lower case; IPs in netip's form
	anyHost         bool
	clock           asyncagents.Clock
	logger          *slog.Logger

	// Set by the package's own tests only: the buffer of the handler's subscription, a
	// function the hub calls before it takes each change, the bound on a stream's writes.
	subBuffer    int
	beforeChange func()
	writeTimeout time.Duration
}

func defaultConfig() config {
	return config{
		heartbeat:       DefaultHeartbeat,
		history:         DefaultHistory,
		maxStreams:      DefaultMaxStreams,
		loginTTL:        DefaultLoginTTL,
		sessionIdle:     DefaultSessionIdle,
		sessionLifetime: DefaultSessionLifetime,
		clock:           systemClock{},
		logger:          slog.New(slog.DiscardHandler),
		subBuffer:       subscriptionBuffer,
		writeTimeout:    defaultWriteTimeout,
	}
}

// validate checks the options, a group at a time in the order of the fields of config,
// and returns the first bad one as [asyncagents.ErrInvalidInput]. It puts the IP addresses
// of allowedHosts in netip's form.
func (c *config) validate() error {
	for _, check := range []func() error{
		c.validateAuth,
		c.validateStreams,
		c.validateSessions,
		c.validateAllowedHosts,
		c.validateClockAndLogger,
	} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// invalid returns a validation error: [asyncagents.ErrInvalidInput] with "dashboard: " and
// the formatted text.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: dashboard: %s", asyncagents.ErrInvalidInput, fmt.Sprintf(format, args...))
}

// validateAuth checks [WithToken] and [WithMiddleware].
func (c *config) validateAuth() error {
	if c.hasToken && (c.token == "" || len(c.token) > maxToken) {
		return invalid("token must be 1 to %d bytes", maxToken)
	}
	for _, mw := range c.middlewares {
		if mw == nil {
			return invalid("nil middleware")
		}
	}
	return nil
}

// validateStreams checks [WithHeartbeat], [WithHistory] and [WithMaxStreams].
func (c *config) validateStreams() error {
	switch {
	case c.heartbeat <= 0:
		return invalid("heartbeat %v must be positive", c.heartbeat)
	case c.history < 1 || c.history > MaxHistory:
		return invalid("history %d must be 1 to %d", c.history, MaxHistory)
	case c.maxStreams < 1 || c.maxStreams > MaxStreams:
		return invalid("max streams %d must be 1 to %d", c.maxStreams, MaxStreams)
	}
	return nil
}

// validateSessions checks [WithLoginTTL] and [WithSessionTimeout].
func (c *config) validateSessions() error {
	switch {
	case c.loginTTL <= 0 || c.loginTTL > MaxLoginTTL:
		return invalid("login TTL %v must be positive and at most %v", c.loginTTL, MaxLoginTTL)
	case c.sessionLifetime <= 0 || c.sessionLifetime > MaxSessionLifetime:
		return invalid("session lifetime %v must be positive and at most %v", c.sessionLifetime, MaxSessionLifetime)
	case c.sessionIdle <= 0 || c.sessionIdle > c.sessionLifetime:
		return invalid("session idle timeout %v must be positive and at most the lifetime %v", c.sessionIdle, c.sessionLifetime)
	}
	return nil
}

// validateAllowedHosts checks [WithAllowedHosts], and puts each IP address (without zone)
// in netip's form: an IPv4-mapped IPv6 address as IPv4, IPv6 compressed.
func (c *config) validateAllowedHosts() error {
	for i, h := range c.allowedHosts {
		if ip, err := netip.ParseAddr(h); err == nil && ip.Zone() == "" {
			c.allowedHosts[i] = ip.Unmap().String()
			continue
		}
		if len(h) > 253 || !hostPattern.MatchString(h) {
			return invalid("allowed host %s is not a host name or IP address without port", quote(h))
		}
	}
	return nil
}

// validateClockAndLogger checks [WithClock] and [WithLogger].
func (c *config) validateClockAndLogger() error {
	switch {
	case c.clock == nil:
		return invalid("nil clock")
	case c.logger == nil:
		return invalid("nil logger")
	}
	return nil
}

// hostPattern is a DNS name in lower case: labels of letters, digits and '-', joined by dots.
var hostPattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$`)

// quote quotes s for an error message, cut to 40 bytes.
func quote(s string) string {
	if len(s) > 40 {
		return strconv.Quote(s[:40]) + "…"
	}
	return strconv.Quote(s)
}

type systemClock struct{}

func (systemClock) Now() time.Time                         { return time.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// WithToken requires a credential on every route but the page itself: the token, as an
// "Authorization: Bearer <token>" header (for programs), or the session cookie a login
// link sets (for the page, see [Handler.LoginLink]). The token is never accepted in a URL
// (a page address with ?token= is answered 400), compared in constant time, kept only as
// a hash and never logged. Defaults to none: every request is served, and the page needs
// no login. To require login links without handing a token to any program, pass a random
// token and keep it to yourself. The token must be 1 to 4096 bytes; use a long random one
// (32 bytes of crypto/rand, hex-encoded).
func WithToken(token string) Option {
	return optionFunc(func(c *config) { c.token, c.hasToken = token, true })
}

// WithMiddleware wraps the whole handler, the page included, in mw: for authentication
// by the host (a session check, a reverse proxy's header). With several, the first given
// is the outermost. It combines with [WithToken] (the token is checked inside mw).
// Defaults to none; mw must not be nil.
func WithMiddleware(mw func(http.Handler) http.Handler) Option {
	return optionFunc(func(c *config) { c.middlewares = append(c.middlewares, mw) })
}

// WithReadOnly makes the handler read-only: POST /api/tasks/{id}/cancel answers 403 and
// the page shows no cancel buttons. Defaults to off.
func WithReadOnly() Option {
	return optionFunc(func(c *config) { c.readOnly = true })
}

// WithHeartbeat sets how often an event stream gets a comment line (": heartbeat") when
// there is nothing else to send. Defaults to [DefaultHeartbeat]; must be positive.
func WithHeartbeat(d time.Duration) Option {
	return optionFunc(func(c *config) { c.heartbeat = d })
}

// WithHistory sets how many recent changes the handler keeps so that an event stream
// that reconnects (Last-Event-ID) gets the changes it missed; one that missed more gets
// a snapshot instead. Defaults to [DefaultHistory]; 1 to [MaxHistory].
func WithHistory(n int) Option {
	return optionFunc(func(c *config) { c.history = n })
}

// WithMaxStreams bounds how many event streams (GET /api/events) may be open at once;
// one more is answered 503 with "Retry-After: 5". Defaults
// to [DefaultMaxStreams]; 1 to [MaxStreams].
func WithMaxStreams(n int) Option {
	return optionFunc(func(c *config) { c.maxStreams = n })
}

// WithLoginTTL sets how long a login link ([Handler.LoginLink]) stays valid after it was
// minted. Defaults to [DefaultLoginTTL]; positive, at most [MaxLoginTTL].
func WithLoginTTL(d time.Duration) Option {
	return optionFunc(func(c *config) { c.loginTTL = d })
}

// WithSessionTimeout sets when a session (the cookie a login link sets) ends: after idle
// without a request (an open event stream counts as use, at every heartbeat), and after
// lifetime whatever its use. An ended session is answered 401 and its open event streams
// end within a heartbeat. The cookie carries lifetime as its Max-Age; sessions live in
// memory only, so all end when the process does. Defaults to [DefaultSessionIdle] and
// [DefaultSessionLifetime]; lifetime positive and at most [MaxSessionLifetime], idle
// positive and at most lifetime.
func WithSessionTimeout(idle, lifetime time.Duration) Option {
	return optionFunc(func(c *config) { c.sessionIdle, c.sessionLifetime = idle, lifetime })
}

// WithAllowedHosts adds host names that the Host header of a request may name, besides
// localhost and loopback IPs, when the request arrives on a loopback address: for a name
// of the host's own that resolves to 127.0.0.1 ("dev.internal"). Each is a DNS name or an
// IP address, without port or brackets; case does not matter; any port is accepted.
// Defaults to none. See [WithAnyHost].
func WithAllowedHosts(hosts ...string) Option {
	return optionFunc(func(c *config) {
		for _, h := range hosts {
			c.allowedHosts = append(c.allowedHosts, strings.ToLower(h))
		}
	})
}

// WithAnyHost turns off the Host check: by default, a request that arrives on a loopback
// address (127.0.0.0/8, ::1) with a Host header naming anything but localhost, a loopback
// IP or a host of [WithAllowedHosts] is answered 403, so that a web page whose name was
// re-bound to 127.0.0.1 (DNS rebinding) cannot read or cancel tasks. Requests on other
// addresses are never checked. Turn it off only behind a proxy that checks Host itself.
func WithAnyHost() Option {
	return optionFunc(func(c *config) { c.anyHost = true })
}

// WithClock sets the clock that times login links and sessions. Defaults to the system
// clock; must not be nil.
func WithClock(c asyncagents.Clock) Option {
	return optionFunc(func(cfg *config) { cfg.clock = c })
}

// WithLogger sets the logger for the handler's own work: resubscriptions after it fell
// behind, failed writes. It never logs tokens, login codes, cookies or request URLs. Defaults to discarding;
// must not be nil.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.logger = l })
}
