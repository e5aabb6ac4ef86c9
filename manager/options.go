package manager

import (
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/asyncagents/asyncagents/fork"
)

// Clock tells time for polling, timeouts and durations (STYLE 8). The default is the
// system clock.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time                         { return time.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Defaults of the Manager options.
const (
	DefaultPollInterval   = 2 * time.Second   // SPEC T-7; must be positive
	DefaultOutputTimeout  = 120 * time.Second // SPEC T-10
	MaxOutputTimeout      = 600 * time.Second // SPEC T-10: larger timeouts are clamped
	DefaultToolPrefix     = "asyncagents"     // SPEC L; letters, digits, _ and -
	DefaultReconcilers    = 4                 // goroutines reading finished sessions; 1 to 64
	DefaultNotifyAttempts = 6                 // delivery attempts of a notification; at least 1
)

type config struct {
	clock          Clock
	poll           time.Duration
	pipeline       *fork.Pipeline
	store          Store
	logger         *slog.Logger
	toolPrefix     string
	notify         bool
	notifyNoReply  bool
	debugHints     bool
	allowNesting   bool
	reconcilers    int
	notifyAttempts int
}

func defaultConfig() config {
	return config{
		clock:          systemClock{},
		poll:           DefaultPollInterval,
		logger:         slog.New(slog.DiscardHandler),
		toolPrefix:     DefaultToolPrefix,
		notify:         true,
		reconcilers:    DefaultReconcilers,
		notifyAttempts: DefaultNotifyAttempts,
	}
}

var prefixRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,40}$`)

func (c *config) validate() error {
	switch {
	case c.clock == nil:
		return fmt.Errorf("%w: nil clock", ErrInvalidInput)
	case c.poll <= 0:
		return fmt.Errorf("%w: poll interval %v must be positive", ErrInvalidInput, c.poll)
	case c.logger == nil:
		return fmt.Errorf("%w: nil logger", ErrInvalidInput)
	case !prefixRE.MatchString(c.toolPrefix):
		return fmt.Errorf("%w: tool prefix %q must be 1–40 letters, digits, _ or -", ErrInvalidInput, c.toolPrefix)
	case c.reconcilers < 1 || c.reconcilers > 64:
		return fmt.Errorf("%w: reconcilers %d must be 1 to 64", ErrInvalidInput, c.reconcilers)
	case c.notifyAttempts < 1:
		return fmt.Errorf("%w: notification attempts %d must be at least 1", ErrInvalidInput, c.notifyAttempts)
	}
	return nil
}

// Option configures a Manager.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithClock sets the clock. Defaults to the system clock; must not be nil.
func WithClock(c Clock) Option { return optionFunc(func(cfg *config) { cfg.clock = c }) }

// WithPollInterval sets how often running tasks are checked with GET /session/status as a
// fallback to events (SPEC T-7). Defaults to DefaultPollInterval; must be positive.
func WithPollInterval(d time.Duration) Option {
	return optionFunc(func(cfg *config) { cfg.poll = d })
}

// WithForkPipeline sets the pipeline that builds a forked task's context. Defaults to
// fork.New() with the SPEC §2 defaults.
func WithForkPipeline(p *fork.Pipeline) Option {
	return optionFunc(func(cfg *config) { cfg.pipeline = p })
}

// WithStore sets where task records are kept (SPEC T-19). Defaults to a new MemoryStore.
func WithStore(s Store) Option { return optionFunc(func(cfg *config) { cfg.store = s }) }

// WithLogger sets the logger for background work (reconnects, failed deliveries).
// Defaults to discarding; must not be nil.
func WithLogger(l *slog.Logger) Option { return optionFunc(func(cfg *config) { cfg.logger = l }) }

// WithToolPrefix sets the prefix of the LLM tool names (SPEC L), which the hints mention
// and child sessions are denied (SPEC T-17). Defaults to DefaultToolPrefix.
func WithToolPrefix(p string) Option { return optionFunc(func(cfg *config) { cfg.toolPrefix = p }) }

// WithNotifications turns parent notifications (SPEC §4) on or off. Defaults to on.
func WithNotifications(on bool) Option { return optionFunc(func(cfg *config) { cfg.notify = on }) }

// WithNotifyNoReply sends notifications with noReply: true, so the parent does not take a
// turn. Defaults to off: notifications use prompt_async with the caller's agent.
func WithNotifyNoReply(on bool) Option {
	return optionFunc(func(cfg *config) { cfg.notifyNoReply = on })
}

// WithDebugHints ends the visible notification with " [hint attached]" (SPEC N-6).
// Defaults to off.
func WithDebugHints(on bool) Option { return optionFunc(func(cfg *config) { cfg.debugHints = on }) }

// WithNesting lets child sessions use the asyncagents tools themselves (SPEC T-17).
// Defaults to off: children are created with rules that deny them.
func WithNesting(on bool) Option { return optionFunc(func(cfg *config) { cfg.allowNesting = on }) }

// WithReconcilers sets how many goroutines read the messages of sessions that went idle.
// Defaults to DefaultReconcilers; 1 to 64.
func WithReconcilers(n int) Option { return optionFunc(func(cfg *config) { cfg.reconcilers = n }) }

// WithNotifyAttempts sets how often a notification is tried before it is given up (and
// logged). Defaults to DefaultNotifyAttempts; at least 1.
func WithNotifyAttempts(n int) Option {
	return optionFunc(func(cfg *config) { cfg.notifyAttempts = n })
}
