package dashboard

import (
	"fmt"
	"log/slog"
	"net/http"
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
	// maxToken bounds the length of a token in bytes.
	maxToken = 4096
	// subscriptionBuffer is the buffer of the handler's own [asyncagents.Subscription]:
	// its reader only encodes each change once, so it falls behind only under a burst of
	// this many changes faster than that.
	subscriptionBuffer = 4096
	// retryAfter is the Retry-After, in seconds, of a stream refused for [WithMaxStreams].
	retryAfter = "5"
	// defaultWriteTimeout bounds each write to an event stream: a client that stops reading is
	// cut off after it, so that [Handler.Close] never waits longer for its stream.
	defaultWriteTimeout = 10 * time.Second
)

// Option configures a [Handler]; pass options to [New].
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	token       string
	hasToken    bool
	middlewares []func(http.Handler) http.Handler
	readOnly    bool
	heartbeat   time.Duration
	history     int
	maxStreams  int
	logger      *slog.Logger

	// Set by the package's own tests only: the buffer of the handler's subscription, a
	// function the hub calls before it takes each change, the bound on a stream's writes.
	subBuffer    int
	beforeChange func()
	writeTimeout time.Duration
}

func defaultConfig() config {
	return config{
		heartbeat:    DefaultHeartbeat,
		history:      DefaultHistory,
		maxStreams:   DefaultMaxStreams,
		logger:       slog.New(slog.DiscardHandler),
		subBuffer:    subscriptionBuffer,
		writeTimeout: defaultWriteTimeout,
	}
}

func (c *config) validate() error {
	if c.hasToken && (c.token == "" || len(c.token) > maxToken) {
		return fmt.Errorf("%w: dashboard: token must be 1 to %d bytes", asyncagents.ErrInvalidInput, maxToken)
	}
	for _, mw := range c.middlewares {
		if mw == nil {
			return fmt.Errorf("%w: dashboard: nil middleware", asyncagents.ErrInvalidInput)
		}
	}
	if c.heartbeat <= 0 {
		return fmt.Errorf("%w: dashboard: heartbeat %v must be positive", asyncagents.ErrInvalidInput, c.heartbeat)
	}
	if c.history < 1 || c.history > MaxHistory {
		return fmt.Errorf("%w: dashboard: history %d must be 1 to %d", asyncagents.ErrInvalidInput, c.history, MaxHistory)
	}
	if c.maxStreams < 1 || c.maxStreams > MaxStreams {
		return fmt.Errorf("%w: dashboard: max streams %d must be 1 to %d", asyncagents.ErrInvalidInput, c.maxStreams, MaxStreams)
	}
	if c.logger == nil {
		return fmt.Errorf("%w: dashboard: nil logger", asyncagents.ErrInvalidInput)
	}
	return nil
}

// WithToken requires a bearer token on every route but the page itself: an
// "Authorization: Bearer <token>" header, or the cookie the page sets when it is opened
// once as "/?token=<token>" (URL-escaped). Tokens are compared in constant time and never
// logged. Defaults to none: every request is served. The token must be 1 to 4096 bytes;
// use a long random one (32 bytes of crypto/rand, hex-encoded).
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

// WithLogger sets the logger for the handler's own work: resubscriptions after it fell
// behind, failed writes. It never logs tokens or request URLs. Defaults to discarding;
// must not be nil.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.logger = l })
}
