package asyncagents

import (
	"bytes"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"time"

	"github.com/asyncagents/asyncagents/fork"
	"github.com/asyncagents/asyncagents/hints"
)

// WithConcurrency sets how many tasks may run at once (see [Limits]). Defaults to no limit;
// limits must not be negative.
func WithConcurrency(l Limits) Option {
	l.Providers, l.Models = maps.Clone(l.Providers), maps.Clone(l.Models)
	return optionFunc(func(cfg *config) { cfg.limits = l })
}

// Clock tells time for polling, timeouts, backoff and durations. The default is the system
// clock; tests inject a fake one with [WithClock].
type Clock interface {
	Now() time.Time
	// After returns a channel that receives the time once d has passed.
	After(d time.Duration) <-chan time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Defaults of the options of [New] and [Manager.Output].
const (
	// DefaultPollInterval is how often active tasks are checked with GET /session/status.
	DefaultPollInterval = 2 * time.Second
	// DefaultOutputTimeout is how long a blocking Output waits when no timeout is given.
	DefaultOutputTimeout = 120 * time.Second
	// MaxOutputTimeout is the longest blocking Output wait; longer timeouts are clamped.
	MaxOutputTimeout = 600 * time.Second
	// DefaultToolPrefix ("asyncagents") starts the names of the LLM tools:
	// asyncagents_task, ….
	DefaultToolPrefix = hints.DefaultToolPrefix
	// DefaultNestingDepth is how deep tasks may nest: 1, a task cannot launch tasks.
	DefaultNestingDepth = 1
	// MaxNestingDepth bounds WithNestingDepth.
	MaxNestingDepth = 8
	// DefaultRequestTimeout bounds each request the Manager's own goroutines make.
	DefaultRequestTimeout = 30 * time.Second
	// QuickRequestTimeout bounds the requests of the Manager's own goroutines that the server
	// answers at once (see [WithRequestTimeout]), when the request timeout is longer.
	QuickRequestTimeout = 5 * time.Second
	// MaxFollowUps bounds WithFollowUpQueue.
	MaxFollowUps = 10
	// MaxActivePerParent bounds WithMaxActivePerParent.
	MaxActivePerParent = 10000
	// DefaultReconcilers is how many goroutines read the messages of sessions that went idle.
	DefaultReconcilers = 4
	// DefaultNotifyHorizon is how long a parent notification is retried after its run ended
	// before it is given up: long enough to outlast a restart or an upgrade of the OpenCode
	// server and a host that was down for a while, short enough that a parent which comes
	// back much later is not told about stale work in the middle of something else.
	DefaultNotifyHorizon = 30 * time.Minute
	// DefaultWaveWindow is how long, under [NotifyPerWave], a parent's turn waits after a
	// run of its ended for another to end, while it has tasks running: long enough for the
	// runs of a batch that end within a second or so of each other to share one turn, short
	// enough that the model hears of a lone run end about a second after it (the notification
	// itself is in the parent at once).
	DefaultWaveWindow = time.Second
	// MaxWaveWindow bounds WithWaveWindow.
	MaxWaveWindow = time.Minute
)

// Bounds of the options.
const (
	maxReconcilers  = 64
	maxToolPrefix   = 40
	minPollInterval = 10 * time.Millisecond
)

type config struct {
	clock          Clock
	poll           time.Duration
	pipeline       *fork.Pipeline
	store          Store
	logger         *slog.Logger
	toolPrefix     string
	notify         bool
	notifyPolicy   NotifyPolicy
	waveWindow     time.Duration
	taskBudget     Budget
	treeBudget     Budget
	forkMode       ForkMode
	debugHints     bool
	nestingDepth   int
	followUps      int
	requestTimeout time.Duration
	deadline       time.Duration
	stale          time.Duration
	permissions    PermissionPolicy
	limits         Limits
	perParent      int
	reconcilers    int
	notifyHorizon  time.Duration
	recordKey      []byte
	toolHints      bool
	budgetPause    bool
	serverStarted  time.Time
	digestAfter    time.Duration
	digestEvery    time.Duration
	isolation      Isolation
	worktreeRoot   string
}

func defaultConfig() config {
	return config{
		clock:          systemClock{},
		poll:           DefaultPollInterval,
		logger:         slog.New(slog.DiscardHandler),
		toolPrefix:     DefaultToolPrefix,
		notify:         true,
		reconcilers:    DefaultReconcilers,
		nestingDepth:   DefaultNestingDepth,
		notifyHorizon:  DefaultNotifyHorizon,
		waveWindow:     DefaultWaveWindow,
		forkMode:       ForkDigest,
		requestTimeout: DefaultRequestTimeout,
		store:          &MemoryStore{},
	}
}

var prefixRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// newConfig applies opts over the defaults and validates the result.
func newConfig(opts []Option) (config, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o.apply(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return config{}, err
	}
	if cfg.pipeline == nil {
		p, err := fork.New()
		if err != nil {
			return config{}, err
		}
		cfg.pipeline = p
	}
	return cfg, nil
}

// validate returns the first option out of its bounds, as an error matching ErrInvalidInput.
func (c *config) validate() error {
	checks := []struct {
		bad bool
		msg func() string
	}{
		{c.clock == nil, func() string { return "nil clock" }},
		{c.poll < minPollInterval, func() string { return fmt.Sprintf("poll interval %v must be at least %v", c.poll, minPollInterval) }},
		{c.logger == nil, func() string { return "nil logger" }},
		{c.store == nil, func() string { return "nil store" }},
		{len(c.toolPrefix) > maxToolPrefix || !prefixRE.MatchString(c.toolPrefix), func() string {
			return fmt.Sprintf("tool prefix %s must be 1 to %d letters, digits, _ or -", echo(c.toolPrefix), maxToolPrefix)
		}},
		{c.nestingDepth < 1 || c.nestingDepth > MaxNestingDepth, func() string {
			return fmt.Sprintf("nesting depth %d must be 1 to %d", c.nestingDepth, MaxNestingDepth)
		}},
		{c.deadline < 0, func() string { return fmt.Sprintf("deadline %v must not be negative", c.deadline) }},
		{c.stale < 0, func() string { return fmt.Sprintf("stale timeout %v must not be negative", c.stale) }},
		{c.requestTimeout <= 0, func() string { return fmt.Sprintf("request timeout %v must be positive", c.requestTimeout) }},
		{c.perParent < 0 || c.perParent > MaxActivePerParent, func() string {
			return fmt.Sprintf("active tasks per parent %d must be 0 to %d", c.perParent, MaxActivePerParent)
		}},
		{c.followUps < 0 || c.followUps > MaxFollowUps, func() string {
			return fmt.Sprintf("follow-up queue %d must be 0 to %d", c.followUps, MaxFollowUps)
		}},
		{c.reconcilers < 1 || c.reconcilers > maxReconcilers, func() string {
			return fmt.Sprintf("reconcilers %d must be 1 to %d", c.reconcilers, maxReconcilers)
		}},
		{c.notifyHorizon < 0, func() string { return fmt.Sprintf("notification horizon %v must not be negative", c.notifyHorizon) }},
		{c.notifyPolicy < NotifyPerWave || c.notifyPolicy > NotifyNoReply, func() string {
			return fmt.Sprintf("notification policy %d is not one of NotifyPerWave, NotifyPerRun, NotifyNoReply", int(c.notifyPolicy))
		}},
		{c.forkMode != ForkDigest && c.forkMode != ForkNative, func() string {
			return fmt.Sprintf("fork mode %s: want digest or native", echo(string(c.forkMode)))
		}},
		{!c.taskBudget.valid() || !c.treeBudget.valid(), func() string {
			return fmt.Sprintf("budgets %s, %s must not be negative", c.taskBudget, c.treeBudget)
		}},
		{c.recordKey != nil && len(c.recordKey) < 32, func() string {
			return fmt.Sprintf("record key of %d bytes: at least 32", len(c.recordKey))
		}},
		{c.digestAfter < 0, func() string { return fmt.Sprintf("progress digest after %v must not be negative", c.digestAfter) }},
		{!c.isolation.valid(), func() string { return fmt.Sprintf("isolation %s: want none or worktree", echo(string(c.isolation))) }},
		{c.waveWindow < 0 || c.waveWindow > MaxWaveWindow, func() string {
			return fmt.Sprintf("wave window %v must be 0 to %v", c.waveWindow, MaxWaveWindow)
		}},
	}
	for _, ch := range checks {
		if ch.bad {
			return fmt.Errorf("%w: %s", ErrInvalidInput, ch.msg())
		}
	}
	return c.limits.validate()
}

// Option configures a [Manager]; pass options to [New].
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithClock sets the clock used for polling, timeouts, backoff and durations. Defaults to
// the system clock; must not be nil.
func WithClock(c Clock) Option { return optionFunc(func(cfg *config) { cfg.clock = c }) }

// WithPollInterval sets how often active tasks are checked with GET /session/status, the
// fallback when events are missed. Defaults to [DefaultPollInterval]; at least 10ms.
func WithPollInterval(d time.Duration) Option {
	return optionFunc(func(cfg *config) { cfg.poll = d })
}

// WithForkPipeline sets the pipeline that builds a forked task's context from the parent's
// messages. Defaults to the result of [fork.New] with no options; nil keeps the default.
func WithForkPipeline(p *fork.Pipeline) Option {
	return optionFunc(func(cfg *config) { cfg.pipeline = p })
}

// WithStore sets where task records are kept. Defaults to a new [MemoryStore]; must not be
// nil.
func WithStore(s Store) Option { return optionFunc(func(cfg *config) { cfg.store = s }) }

// WithLogger sets the logger for background work (reconnects, failed deliveries, recovered
// panics). Defaults to discarding; must not be nil.
func WithLogger(l *slog.Logger) Option { return optionFunc(func(cfg *config) { cfg.logger = l }) }

// WithToolPrefix sets the prefix of the LLM tool names (prefix_task, prefix_output, …), which
// the notifications' hints mention and child sessions are denied beyond [WithNestingDepth].
// Defaults to [DefaultToolPrefix]; 1 to 40 letters, digits, _ or -.
func WithToolPrefix(p string) Option { return optionFunc(func(cfg *config) { cfg.toolPrefix = p }) }

// WithNotifications turns parent notifications on or off. Defaults to on.
func WithNotifications(on bool) Option { return optionFunc(func(cfg *config) { cfg.notify = on }) }

// WithNotifyPolicy sets how notifications ask for the parent's turn: [NotifyPerWave] (one
// turn for the run ends of a wave), [NotifyPerRun] (one turn per run end) or [NotifyNoReply]
// (none). Prompts use the caller's agent. Defaults to NotifyPerWave.
func WithNotifyPolicy(p NotifyPolicy) Option {
	return optionFunc(func(cfg *config) { cfg.notifyPolicy = p })
}

// WithWaveWindow sets how long, under [NotifyPerWave], a parent's turn waits after a run of
// its ended for another run to end while it still has tasks running; the turn waits at most
// 5 windows after the first notification it covers. A parent with no task running gets its
// turn at once. Defaults to [DefaultWaveWindow]; 0 to [MaxWaveWindow] (0: a turn as soon as
// the notifications were posted).
func WithWaveWindow(d time.Duration) Option {
	return optionFunc(func(cfg *config) { cfg.waveWindow = d })
}

// WithDebugHints ends the visible part of every notification with " [hint attached]".
// Defaults to off.
func WithDebugHints(on bool) Option { return optionFunc(func(cfg *config) { cfg.debugHints = on }) }

// WithNestingDepth sets how deep tasks may nest. A task launched for a session that is not a
// task of the Manager has depth 1; a task launched for a task's session has that task's
// depth plus one. Tasks at the deepest level are created with a permission rule that denies
// them the LLM tools ("<prefix>_*": deny), and a Launch for a caller at that level is refused
// with [ErrNestingDepth]. Defaults to [DefaultNestingDepth] (1: no nesting); 1 to
// [MaxNestingDepth].
func WithNestingDepth(n int) Option { return optionFunc(func(cfg *config) { cfg.nestingDepth = n }) }

// WithFollowUpQueue lets [Manager.Resume] queue up to n follow-ups for a task that is
// running or resumed; they are sent one by one, each when the run before it ends (not after
// a cancel, which drops them). The queue is part of the task's record (Task.FollowUps).
// Defaults to 0: a follow-up for an active task is [ErrTaskBusy]; 0 to [MaxFollowUps].
func WithFollowUpQueue(n int) Option { return optionFunc(func(cfg *config) { cfg.followUps = n }) }

// WithMaxActivePerParent caps how many tasks of one parent session may be active at once
// (queued, running or resumed): a [Manager.Launch] or [Manager.Resume] that would make one
// more fails with [ErrTaskLimit] and changes nothing, creating no session. It bounds what the
// model of one session can start through the tools (say, a loop that launches hundreds);
// [WithConcurrency] bounds how many run, of all parents. Defaults to 0: no cap; 0 to
// [MaxActivePerParent].
func WithMaxActivePerParent(n int) Option {
	return optionFunc(func(cfg *config) { cfg.perParent = n })
}

// WithRequestTimeout bounds each request that the Manager's own goroutines make (status
// polls, message reads, aborts, notifications, the opening of the event stream), so a server
// that accepts connections but does not answer — as OpenCode 1.18.33 does, forever, for the
// requests that arrive in a moment while it starts — holds up nothing for long. The requests
// a server answers at once whatever its load, the status poll (GET /session/status), the
// list of permission requests (GET /permission) and the opening of the event stream
// (GET /global/event), get at most [QuickRequestTimeout] of it,
// so that runs a restart cut short are found within seconds of the server being back.
// Operations called by the host use the host's ctx instead. Defaults to
// [DefaultRequestTimeout]; must be positive.
func WithRequestTimeout(d time.Duration) Option {
	return optionFunc(func(cfg *config) { cfg.requestTimeout = d })
}

// WithDeadline sets how long a run (a launch's, or a follow-up's) may take before the
// Manager aborts its session and ends the task in [StatusError] with a message naming the
// deadline; the parent is notified once, as for any failure. [LaunchInput].Deadline sets it
// per task. It is checked at every status poll, so it fires up to one poll interval late.
// Defaults to 0: no deadline; must not be negative.
func WithDeadline(d time.Duration) Option { return optionFunc(func(cfg *config) { cfg.deadline = d }) }

// WithForkMode sets how forked tasks get their caller's context when [LaunchInput].ForkMode
// (the task tool's fork_mode) does not say: [ForkDigest] or [ForkNative]. Defaults to
// ForkDigest.
func WithForkMode(m ForkMode) Option { return optionFunc(func(cfg *config) { cfg.forkMode = m }) }

// WithTaskBudget bounds what each run of a task may use: once its completed steps, as the
// event stream shows them (Task.RunUsage), reach the budget (Task.Budget) while the run goes
// on to another step, the Manager aborts the session and ends the task in [StatusError] with
// a message naming the budget and what was used; the parent is notified once, as for any
// failure. It is checked at every status poll, so the run may take a step more; a resume
// starts a new run, with the same budget. [LaunchInput].Budget sets it per task, field by
// field; the task tool lets a model ask for less, not more. Defaults to none; must not be
// negative.
func WithTaskBudget(b Budget) Option { return optionFunc(func(cfg *config) { cfg.taskBudget = b }) }

// WithTreeBudget bounds what the tasks of one caller session, with the tasks they launched in
// turn, may use in all ([Manager.TreeUsage]; tasks cleared since New still count): once they
// reached it, a [Manager.Launch] or [Manager.Resume] for that caller, or for a task below it,
// fails with [ErrBudget] and changes nothing, and a follow-up queued before is not sent
// (logged); the runs under way go on (each within its own budget, [WithTaskBudget]).
// Defaults to none; must not be negative.
func WithTreeBudget(b Budget) Option { return optionFunc(func(cfg *config) { cfg.treeBudget = b }) }

// WithStaleTimeout ends a run that shows no activity for d: no event of its session (a part
// created or updated — a tool streaming output counts —, streamed text, a status change) and
// no change seen by a status poll. The Manager aborts the session and ends the task in
// [StatusError] with a message naming the timeout, and the last retry message when the
// session was stuck retrying a model call. Checked at every status poll. Defaults to 0: off;
// must not be negative.
func WithStaleTimeout(d time.Duration) Option { return optionFunc(func(cfg *config) { cfg.stale = d }) }

// WithPermissionPolicy answers the permission requests of task sessions (OpenCode asks, for
// example, before a tool touches a path outside the project, and the session waits until it
// is answered): p decides each request, and the Manager replies on the task's directory
// (POST /permission/{id}/reply). [ReplyAll] answers every request the same way. Defaults to
// nil: requests are not answered; the task shows the pending request (Task.Permission) and
// the parent gets one notification per request naming the permission and its patterns.
func WithPermissionPolicy(p PermissionPolicy) Option {
	return optionFunc(func(cfg *config) { cfg.permissions = p })
}

// WithReconcilers sets how many goroutines stay ready to decide the runs of sessions that
// went idle, from a read of their messages or from what the event stream carried of them.
// While sessions wait with all of them busy, the Manager adds more, up to 16 times n and at
// most 64 in all, and lets the extra ones go when the queue is empty.
// Defaults to [DefaultReconcilers]; 1 to 64.
func WithReconcilers(n int) Option { return optionFunc(func(cfg *config) { cfg.reconcilers = n }) }

// WithRecordKey has the Manager seal every record it saves with key (an HMAC-SHA256 of the
// record, [Task].Seal) and refuse, when it reads its store, a record without the key's seal:
// with a store several hosts share, a row written by anyone who can write the database but
// does not have the key is never acted on. Every Manager on the store needs the same key,
// kept outside the database (a file of the hosts'). Defaults to none: records are checked for
// their shape and, with a LeaseStore, against their sessions on the server, not for who wrote
// them. The key must be at least 32 bytes.
func WithRecordKey(key []byte) Option {
	key = bytes.Clone(key)
	return optionFunc(func(cfg *config) { cfg.recordKey = key })
}

// WithNotifyHorizon sets how long a parent notification is retried after its run ended,
// with delays doubling from 0.5 s to 1 min. When it has passed, the notification is marked
// failed on the task (Task.Notifications) and the failure is logged. Defaults to
// [DefaultNotifyHorizon]; 0 means one attempt; must not be negative.
func WithNotifyHorizon(d time.Duration) Option {
	return optionFunc(func(cfg *config) { cfg.notifyHorizon = d })
}

// WithIsolation sets where tasks work when their launch does not say
// ([LaunchInput.Isolation]): [IsolationNone] (the default: in the parent's directory) or
// [IsolationWorktree] (in a git worktree of their own; see [Manager.Merge]).
func WithIsolation(i Isolation) Option { return optionFunc(func(cfg *config) { cfg.isolation = i }) }

// WithWorktreeRoot sets the folder isolated tasks' worktrees are made in, <root>/<name> for
// every repository. The default, "", is each repository's own <common git dir>/asyncagents/worktrees
// (.git/asyncagents/worktrees of the main checkout), which neither git status nor a search of
// the parent's files sees. A root must not lie in a parent's working tree outside its .git.
func WithWorktreeRoot(root string) Option {
	return optionFunc(func(cfg *config) { cfg.worktreeRoot = root })
}

// WithToolHints makes the notifications and turn prompts name the tools
// (<prefix>_output, <prefix>_merge) the parent's model reads results with. Off by default, so
// that a host that reads the results itself does not send its model to tools it never gave
// it; [Tools] turns it on (and so does the MCP bridge, which serves them).
func WithToolHints(on bool) Option { return optionFunc(func(cfg *config) { cfg.toolHints = on }) }

// WithProgressDigest shows a parent's model the progress of its tasks that run longer than
// after: a digest of them (elapsed time, tool calls, last tool, usage so far), posted without
// reply at most once every every, and only while the parent is idle after a turn of its
// model, so that it starts no turn and its model reads it at its next (see [DigestText]). Off
// by default (after 0): a host that follows its tasks itself may not want its model's context
// to grow; asyncagents serve turns it on with [DefaultDigestAfter] and [DefaultDigestEvery].
// every below a second is a second.
func WithProgressDigest(after, every time.Duration) Option {
	return optionFunc(func(cfg *config) { cfg.digestAfter, cfg.digestEvery = after, max(every, time.Second) })
}

// WithBudgetPause makes a run that reaches its budget ([WithTaskBudget], LaunchInput.Budget)
// pause rather than fail: it is aborted as before, but the task ends [StatusCancelled] with
// Task.Paused set and what the run did so far as its Result, its parent is told so, and
// [Manager.Resume] (with [ResumeBudget] to change the budget) goes on in the same session.
// Off by default: the run ends [StatusError].
func WithBudgetPause(on bool) Option { return optionFunc(func(cfg *config) { cfg.budgetPause = on }) }

// WithServerStarted tells the Manager when the OpenCode server its client reaches started
// (a host that sees the server's process start, as the asyncagents daemon does). A task the
// store holds as running whose run OpenCode aborted before then (MessageAbortedError, which
// OpenCode writes when it quits mid-run) was cut by an earlier server's stop, not by anyone's
// abort: it ends [StatusError] with the error "interrupted: OpenCode stopped before the run
// finished …; resume the task to go on", as a run left unfinished by a crash does, and its
// duration ends at the run's last activity, not when the server came back. Unset, such a run
// ends with OpenCode's own error ("Aborted").
func WithServerStarted(t time.Time) Option {
	return optionFunc(func(cfg *config) { cfg.serverStarted = t })
}
