package mcpserver

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"
)

// Defaults of the options of New.
const (
	// DefaultKeepalive is how often a running call sends a progress notification: well
	// inside OpenCode's 60 s MCP timeout, which every notification restarts.
	DefaultKeepalive = 20 * time.Second
	// DefaultLookupWait is how long the caller lookup keeps searching when it finds no
	// running call, or several, before it gives up.
	DefaultLookupWait = 2 * time.Second
	// DefaultSessionTimeout is how long an MCP session may stay idle before the bridge
	// closes it. OpenCode's MCP client opens a new one when its session is gone (it answers
	// the 404 with a new initialize and sends the request again), so a model's call after
	// a long pause costs one more round trip, and nothing fails.
	DefaultSessionTimeout = 10 * time.Minute
	// DefaultMaxSessions is how many MCP sessions the bridge keeps at once. OpenCode opens
	// one per instance (project directory) that has the bridge registered.
	DefaultMaxSessions = 64
)

// minSessionTimeout is the shortest session timeout: OpenCode opens a session in
// milliseconds, and a session closed while it does breaks OpenCode's connection.
const minSessionTimeout = time.Second

// CallerMode is one way of finding the caller of a tool call: the OpenCode session, message
// and agent the call is made for. See [Server] for what each one reads.
type CallerMode int

// The caller modes, in the order the bridge tries them.
const (
	// CallerFromMeta takes the session from the call's _meta.sessionID, which OpenCode
	// sends from version 2 on (1.x never does). Off by default: _meta is whatever the
	// MCP client sends, so any client that holds the bridge's token — a child session's
	// shell that read the token file and posts to the bridge itself, say — could name
	// any session as the caller. Turn it on ([WithCallerModes]) only for hosts whose MCP
	// client is trusted to send the caller's own session.
	CallerFromMeta CallerMode = iota + 1
	// CallerFromPlugin takes the {sessionID, callID, sig} the companion plugin (see
	// [Plugin]) adds to the arguments as _caller — signed with the token when the bridge
	// has one ([WithToken]) — and checks it against that session's running tool part.
	CallerFromPlugin
	// CallerFromLookup searches the busy sessions of the known directories for the running
	// tool part with the call's tool name and arguments.
	CallerFromLookup
)

func (m CallerMode) String() string {
	switch m {
	case CallerFromMeta:
		return "meta"
	case CallerFromPlugin:
		return "plugin"
	case CallerFromLookup:
		return "lookup"
	}
	return fmt.Sprintf("CallerMode(%d)", int(m))
}

// Option configures New.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	token          string
	tokenSet       bool
	dirs           []string
	logger         *slog.Logger
	keepalive      time.Duration
	lookupWait     time.Duration
	modes          map[CallerMode]bool
	origins        map[string]bool // lower case
	originErr      error
	sessionTimeout time.Duration
	maxSessions    int
}

func defaultConfig() config {
	return config{
		dirs:           []string{""},
		logger:         slog.New(slog.DiscardHandler),
		keepalive:      DefaultKeepalive,
		lookupWait:     DefaultLookupWait,
		modes:          map[CallerMode]bool{CallerFromPlugin: true, CallerFromLookup: true},
		origins:        map[string]bool{},
		sessionTimeout: DefaultSessionTimeout,
		maxSessions:    DefaultMaxSessions,
	}
}

// WithToken makes every request carry the header "Authorization: Bearer <token>"; others
// are answered 401 Unauthorized. The token is compared in constant time and never logged.
// It is also the key the companion plugin signs its _caller with (see [WithTokenFile]):
// with a token, only a signed _caller names the caller. Without it the handler
// authenticates nobody: mount it on a loopback listener only. The token must not be empty.
func WithToken(token string) Option {
	return optionFunc(func(c *config) { c.token, c.tokenSet = token, true })
}

// WithDirectories sets the project directories (OpenCode instances) whose busy sessions
// the caller lookup searches: GET /session/status is per instance, so a session of a
// directory not listed is found only by the plugin (or by _meta, with [CallerFromMeta]).
// Defaults to the client's own directory (opencode.WithDirectory, else the server's
// working directory); "" stands for it. At least one.
func WithDirectories(dirs ...string) Option {
	return optionFunc(func(c *config) { c.dirs = append([]string(nil), dirs...) })
}

// WithLogger sets where the bridge logs: resolved callers (debug), refused calls and
// requests without a valid token (warn), panics (error). It is also the MCP SDK's logger.
// Defaults to discarding everything; must not be nil.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.logger = l })
}

// WithKeepalive sets how often a running call sends a progress notification to OpenCode,
// which restarts its timeout (60 s unless the server's config sets "timeout"), so that a
// call may run as long as its handler does (a blocking output, up to 600 s). Only calls
// whose request carries a progress token get them; OpenCode's always do. Defaults to
// DefaultKeepalive; must be positive.
func WithKeepalive(every time.Duration) Option {
	return optionFunc(func(c *config) { c.keepalive = every })
}

// WithLookupWait sets how long the caller lookup, and the check of a plugin's _caller,
// keep reading the sessions while they find no running call, or one of several sessions,
// before the call fails with ErrUnknownCaller or ErrAmbiguousCaller. OpenCode stores a
// call's running tool part about when it sends the call, not always before. Defaults to
// DefaultLookupWait; 0 reads once; must not be negative.
func WithLookupWait(d time.Duration) Option {
	return optionFunc(func(c *config) { c.lookupWait = d })
}

// WithCallerModes sets the ways the caller of a call may be found; the bridge tries them
// in the fixed order meta, plugin, lookup, whatever the order given, and uses the first
// that applies. A call whose arguments carry _caller when CallerFromPlugin is off has it
// removed from the arguments its handler gets, and is resolved as any other, by its
// arguments, _caller included. A call's _meta.sessionID is read only when CallerFromMeta
// is on; otherwise it is ignored, and the call resolved by the other modes. Defaults to
// CallerFromPlugin and CallerFromLookup: CallerFromMeta is only for hosts whose MCP client
// is trusted to send the caller's own session (WithCallerModes(CallerFromMeta,
// CallerFromPlugin, CallerFromLookup) adds it to them). At least one.
func WithCallerModes(modes ...CallerMode) Option {
	return optionFunc(func(c *config) {
		c.modes = map[CallerMode]bool{}
		for _, m := range modes {
			c.modes[m] = true
		}
	})
}

// WithAllowedOrigins sets the origins (scheme://host[:port], e.g. "http://localhost:6274")
// whose browser pages may call the bridge. The bridge answers 403 Forbidden, before
// anything else, to a request whose Origin header is not one of them, and to a request
// without Origin whose Sec-Fetch-Site header says another site sent it: a web page cannot
// call the bridge, not even through a name that resolves to 127.0.0.1. OpenCode's MCP
// client sends neither header. Defaults to none: every request with an Origin is refused.
// Each origin must be an http or https URL with a host and no path, query or user.
func WithAllowedOrigins(origins ...string) Option {
	return optionFunc(func(c *config) {
		c.origins, c.originErr = map[string]bool{}, nil
		for _, o := range origins {
			u, err := url.Parse(o)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
				(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
				c.originErr = fmt.Errorf("mcpserver: WithAllowedOrigins: %q is not an origin (scheme://host[:port])", cut(o))
				return
			}
			c.origins[strings.ToLower(u.Scheme+"://"+u.Host)] = true
		}
	})
}

// WithSessionTimeout sets how long an MCP session may stay idle — no request of its
// client in progress; an open event stream (GET) does not count — before the bridge
// closes it; its client's next request is answered 404 Not Found, and OpenCode then opens
// a new session. A call in progress keeps its session. A session must outlast OpenCode's
// own opening of it (initialize, then the initialized notification): when one closes in
// between, OpenCode's client gives up and shows the server "failed" until it is connected
// again (POST /mcp/{name}/connect). Defaults to DefaultSessionTimeout; at least 1 s.
func WithSessionTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.sessionTimeout = d })
}

// WithMaxSessions sets how many MCP sessions the bridge keeps at once. A new session
// (an initialize without Mcp-Session-Id) beyond n closes the session that has been idle
// longest — one with no request in progress, not even an open event stream — and when
// every session has a request in progress it is refused with 503 Service Unavailable and
// "Retry-After: 1". Defaults to DefaultMaxSessions; must be at least 1.
func WithMaxSessions(n int) Option {
	return optionFunc(func(c *config) { c.maxSessions = n })
}

var errNoMode = errors.New("mcpserver: at least one caller mode")

func (c *config) validate() error {
	if c.tokenSet && c.token == "" {
		return errors.New("mcpserver: WithToken: empty token")
	}
	if len(c.dirs) == 0 {
		return errors.New("mcpserver: WithDirectories: no directory")
	}
	if c.logger == nil {
		return errors.New("mcpserver: WithLogger: nil logger")
	}
	if c.keepalive <= 0 {
		return fmt.Errorf("mcpserver: WithKeepalive: %v must be positive", c.keepalive)
	}
	if c.lookupWait < 0 {
		return fmt.Errorf("mcpserver: WithLookupWait: %v must not be negative", c.lookupWait)
	}
	if len(c.modes) == 0 {
		return errNoMode
	}
	if c.originErr != nil {
		return c.originErr
	}
	if c.sessionTimeout < minSessionTimeout {
		return fmt.Errorf("mcpserver: WithSessionTimeout: %v must be at least %v", c.sessionTimeout, minSessionTimeout)
	}
	if c.maxSessions < 1 {
		return fmt.Errorf("mcpserver: WithMaxSessions: %d must be at least 1", c.maxSessions)
	}
	for m := range c.modes {
		if m < CallerFromMeta || m > CallerFromLookup {
			return fmt.Errorf("mcpserver: WithCallerModes: unknown %v", m)
		}
	}
	return nil
}
