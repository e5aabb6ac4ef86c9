package asyncagents

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/asyncagents/asyncagents/fork"
	"github.com/asyncagents/asyncagents/manager"
	"github.com/asyncagents/asyncagents/opencode"
)

// entry is the Manager's record of a task plus the run state that is not stored.
type entry struct {
	task Task
	done chan struct{} // closed when the current run ends or the task is removed

	// Blocked Outputs do not need Manager.mu when the run they wait for ends: waiters counts
	// them (under Manager.mu), and finish, when there are any, marks a completed result
	// retrieved on their behalf and leaves them the task as the run ended in ended, before it
	// closes done.
	waiters int
	ended   atomic.Pointer[endView]

	// Saves of one task are serialized by saveMu and carry the newest version: version
	// counts changes (under Manager.mu), saved is the version the store has.
	saveMu  sync.Mutex
	version uint64
	saved   uint64
	removed bool // cleared or taken away with its parent: never saved again

	slot string // the concurrency limit whose slot the run holds ("" for none)
	// aborting, set while the Manager aborts the run (Cancel, a watchdog), is how the run ends,
	// whatever a reconcile reads first (the abort's own MessageAbortedError).
	aborting *runEnd
	active   time.Time              // the last activity seen: an event, or a change seen by a poll
	polled   opencode.SessionStatus // what the last poll saw of a busy session
	retry    string                 // the message of the last retry status
	baseline string                 // id of the last message before the run's prompt ("" for a new session)
	seenBusy bool                   // the session went busy during this run
	// The run's prompt (Task.PromptID) is being sent, was last sent at sentAt, and has been
	// sent sends times (see sendPrompt).
	sending bool
	sentAt  time.Time
	sends   int
	// suspect is what a confirmed-idle look last found against the run (see
	// confirmUnfinished), first at suspectAt.
	suspect   string
	suspectAt time.Time
	sessErr   string // the last session.error of this run

	// While the status poll finds the session idle and the run undecided, its messages are
	// read again at recheckAt, with a delay that doubles up to maxRecheck.
	recheckAt    time.Time
	recheckDelay time.Duration

	recent [16]string
	next   int // ids of tool parts already counted, a ring

	mirror   *runLog    // what the event stream carried of the run (nil for a run started before New)
	streamed []logFrame // the log's frames at the run's last idle event, when it carried the whole run
}

// endView is the task as a run ended, for the Outputs that waited for it (entry.ended). It
// is never changed: each waiter returns a clone.
type endView struct {
	done chan struct{} // the run's done channel
	task Task
	left atomic.Int64 // waiters yet to take it; the last one clears entry.ended
}

// maxRecheck bounds the delay between two reads of an idle, undecided task's messages.
const maxRecheck = 30 * time.Second

// batch counts the tasks of one batch: launched by one parent while another of its tasks
// was active. Notifications report done/total.
type batch struct {
	total  int
	active int
}

// Manager runs background tasks in child sessions of an OpenCode server and tracks them
// until they end. Create one with [New]; it is safe for concurrent use.
//
// A Manager owns a bounded number of goroutines, whatever the number of tasks: one event
// subscription (GET /global/event, reconnected with backoff) and one goroutine applying its
// events, one status poller, the reconcilers of [WithReconcilers] (while sessions wait to be
// read with all of them busy, up to 16 times as many, at most 64, which end when the queue is
// empty) and one notifier with up to 32 delivery workers; with [WithPermissionPolicy], one
// short-lived goroutine per request it answers.
// [Manager.Close] stops them and waits.
type Manager struct {
	client opencode.Client
	cfg    config

	ctx    context.Context // cancelled by Close: ends background I/O
	cancel context.CancelFunc
	stop   chan struct{}
	wg     sync.WaitGroup // the Manager's goroutines
	ops    sync.WaitGroup // operations that may create or change tasks; Close waits for them
	close1 sync.Once
	stop1  sync.Once

	mu       sync.Mutex
	closed   bool
	tasks    map[string]*entry
	reg      manager.Registry
	batches  map[string]*batch // by batch id
	open     map[string]string // parent → its batch with active tasks
	activeOf map[string]int    // parent → its queued, running and resumed tasks, and launches on their way
	rq       map[string]bool   // sessions waiting for a reconcile → the session was seen idle
	rqOrder  []string
	rqWake   chan struct{}
	recon    reconcilers        // the goroutines that read them
	outboxes map[string]*outbox // parent → pending notifications
	nready   []string           // parents whose next notification is due, waiting for a worker
	running  map[string]int     // concurrency limit → runs holding a slot
	waiting  map[string][]*entry
	limitOf  map[string]int
	agents   map[string]agentList // directory → its instance's visible agents

	agentsOnce singleflight.Group
	nqWake     chan struct{}

	// Notifications posted with prompt_async whose message the server has not shown yet, by
	// message id (see confirmGrace); nconfirm counts them for the event reader.
	lossGrace time.Duration // lossGrace, or what a test sets (under mu)

	confirmMu sync.Mutex
	confirms  map[string]posted
	nconfirm  atomic.Int64

	seq  uint64                     // changes so far (Change.Seq)
	subs map[*Subscription]struct{} // live subscriptions

	// The runs the event stream is followed for: task session id → mirror, written under mu
	// (and mirrorsMu) and read under mirrorsMu alone by the goroutine reading the stream.
	// epoch numbers the stream's connections; live is the open one once it delivered an
	// event, else 0.
	mirrorsMu     sync.RWMutex
	mirrors       map[string]*runLog
	epoch, live   atomic.Uint64
	streamDecided atomic.Int64 // runs completed from their mirror, without a read
	quickest      quickest     // the server's quickest answer
	replayFrom    atomic.Int64 // replayFrom, or what a test sets
}

// New returns a Manager that runs tasks on the OpenCode server behind client (usually an
// [opencode.HTTPClient]), loads the tasks of the store ([WithStore]) and starts its
// goroutines; call [Manager.Close] to stop them. Loaded tasks that were active are checked
// against the server at once. It returns an error matching [ErrInvalidInput] for a nil
// client or a bad option, or the store's Load error.
func New(client opencode.Client, opts ...Option) (*Manager, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil opencode.Client", ErrInvalidInput)
	}
	cfg := defaultConfig()
	for _, o := range opts {
		o.apply(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.pipeline == nil {
		p, err := fork.New()
		if err != nil {
			return nil, err
		}
		cfg.pipeline = p
	}
	m := &Manager{
		client:   client,
		cfg:      cfg,
		stop:     make(chan struct{}),
		tasks:    map[string]*entry{},
		batches:  map[string]*batch{},
		open:     map[string]string{},
		activeOf: map[string]int{},
		rq:       map[string]bool{},
		rqWake:   make(chan struct{}, 1),
		outboxes: map[string]*outbox{},
		running:  map[string]int{},
		waiting:  map[string][]*entry{},
		limitOf:  map[string]int{},
		nqWake:   make(chan struct{}, 1),
		mirrors:  map[string]*runLog{},
		confirms: map[string]posted{},

		lossGrace: lossGrace,
	}
	m.replayFrom.Store(int64(replayFrom))
	m.ctx, m.cancel = context.WithCancel(context.Background())
	stored, err := cfg.store.Load(m.ctx)
	if err != nil {
		m.cancel()
		return nil, fmt.Errorf("asyncagents: load tasks: %w", err)
	}
	sort.SliceStable(stored, func(i, j int) bool { return stored[i].Started.Before(stored[j].Started) })
	var pending []noteRef
	created := map[string]time.Time{}
	for _, t := range stored {
		if !m.reg.Add(t.ParentSessionID, t.ID) {
			continue
		}
		e := &entry{task: t, done: make(chan struct{})}
		if t.Status.Terminal() {
			close(e.done)
		}
		m.tasks[t.ID] = e
		b := m.batchLocked(t.BatchID)
		b.total++
		if !t.Status.Terminal() {
			b.active++
			m.open[t.ParentSessionID] = t.BatchID
			m.activeOf[t.ParentSessionID]++
		}
		switch {
		case t.Status.Active():
			m.rq[t.ID] = false
			m.rqOrder = append(m.rqOrder, t.ID)
			// Its prompt may have been sent a moment before the host stopped: it is taken
			// for lost only a grace after this start (see prompt.go).
			e.sentAt = cfg.clock.Now()
			if key, limit := cfg.limits.keyOf(t.Model); limit > 0 && t.ResumeCount == 0 {
				m.limitOf[key] = limit
				m.running[key]++
				e.slot = key
			}
		case t.Status == StatusQueued: // in launch order, the stored tasks being sorted by start
			key, limit := cfg.limits.keyOf(t.Model)
			m.limitOf[key] = limit
			m.waiting[key] = append(m.waiting[key], e)
		}
		for _, n := range t.Notifications {
			if n.State == NotificationPending {
				pending = append(pending, noteRef{task: t.ID, key: n.Key})
				created[n.Key] = n.Created
			}
		}
	}
	sort.SliceStable(pending, func(i, j int) bool { return created[pending[i].key].Before(created[pending[j].key]) })
	var followUps []*entry // ended with follow-ups queued: the last Manager stopped before sending
	for _, e := range m.tasks {
		if e.task.Status.Terminal() && len(e.task.FollowUps) > 0 {
			followUps = append(followUps, e)
		}
	}
	for _, ref := range pending { // what the last Manager did not deliver
		m.queueLocked(m.tasks[ref.task].task.ParentSessionID, ref)
	}
	var start []*entry // queued tasks that fit now (the limits may have changed)
	for key := range m.waiting {
		start = append(start, m.startableLocked(key)...)
	}
	m.start()
	if len(start) > 0 {
		m.goLoop(func() { m.startQueued(start) })
	}
	if len(followUps) > 0 {
		m.goLoop(func() {
			for _, e := range followUps {
				m.sendFollowUp(e)
			}
		})
	}
	return m, nil
}

// Close stops the event subscription, the poller, the reconcilers and the notifier. It
// first waits for operations in flight (a Launch that created its session records it), then
// stops the goroutines and waits for them, or until ctx ends (returning ctx.Err(); they
// still stop). Notifications still queued get one delivery attempt. Tasks keep running on
// the server and their records stay in the store, so a new Manager on the same store picks
// them up. Close is idempotent; afterwards every method returns [ErrClosed].
func (m *Manager) Close(ctx context.Context) error {
	m.close1.Do(func() {
		m.mu.Lock()
		m.closed = true
		for s := range m.subs {
			m.endSubLocked(s, ErrClosed)
		}
		m.mu.Unlock()
	})
	err := waitCtx(ctx, &m.ops)
	m.stop1.Do(func() {
		close(m.stop)
		m.cancel()
	})
	if err != nil {
		return err
	}
	return waitCtx(ctx, &m.wg)
}

// waitCtx waits for wg or until ctx ends.
func waitCtx(ctx context.Context, wg *sync.WaitGroup) error {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// begin registers an operation that Close waits for; it fails with ErrClosed after Close.
// The caller calls m.ops.Done.
func (m *Manager) begin() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	m.ops.Add(1)
	return nil
}

func (m *Manager) now() time.Time { return m.cfg.clock.Now() }

// LaunchInput describes a new task for [Manager.Launch].
type LaunchInput struct {
	// Caller is the parent: the task's session is created as its child and its
	// notifications are sent to it. Caller.SessionID is required.
	Caller Caller
	// Description is a short label (a few words) shown in lists and notifications; required.
	Description string
	// Prompt is the task for the agent; required.
	Prompt string
	// Agent names an agent of the server (GET /agent), e.g. "general"; required.
	Agent string
	// Fork gives the task the caller session's context: its messages, sliced at the latest
	// compaction, with old tool results cut and the whole within a character budget (see
	// package fork), sent before the prompt.
	Fork bool
	// Resume must be empty: a follow-up to an existing task is [Manager.Resume]. It exists
	// so a caller's fork-and-resume request is refused with [ErrForkResumeConflict].
	Resume string
	// Deadline bounds each run of the task (see [WithDeadline]); 0 uses the Manager's.
	Deadline time.Duration
	// Model optionally picks the model as "providerID/modelID" (e.g.
	// "anthropic/claude-sonnet-4"); empty uses the agent's or the server's default.
	Model string
}

var sessionIDRE = regexp.MustCompile(`^ses_[A-Za-z0-9]{1,64}$`)

// checkCaller validates the caller's session id without asking the server.
func checkCaller(c Caller) error {
	switch {
	case strings.TrimSpace(c.SessionID) == "":
		return fmt.Errorf("%w: caller session is required", ErrInvalidInput)
	case !sessionIDRE.MatchString(c.SessionID):
		return fmt.Errorf("%w: caller session %s is not an OpenCode session id (ses_…)", ErrInvalidInput, echo(c.SessionID))
	}
	return nil
}

// parseModel splits "providerID/modelID".
func parseModel(s string) (*opencode.Model, error) {
	if s == "" {
		return nil, nil
	}
	prov, id, ok := strings.Cut(s, "/")
	if !ok || strings.TrimSpace(prov) == "" || strings.TrimSpace(id) == "" {
		return nil, fmt.Errorf("%w: model %s must be providerID/modelID", ErrInvalidInput, echo(s))
	}
	return &opencode.Model{ProviderID: prov, ModelID: id}, nil
}

// Launch starts a task and returns as soon as the server accepted its prompt; it never
// waits for the model. The returned task is [StatusRunning], with its DisplayID set — or
// [StatusQueued], with its QueuePosition, when its concurrency limit ([WithConcurrency]) is
// full: its session exists (and has the parent's context, for a fork), and its prompt is sent
// when a slot frees.
//
// Launch validates first and creates nothing on bad input: [ErrForkResumeConflict],
// [ErrInvalidInput] (an empty description, prompt, agent or caller session, a malformed
// model, or a caller session the server does not know), [ErrNestingDepth], [ErrTaskLimit]
// (the caller has [WithMaxActivePerParent] active tasks), [ErrUnknownAgent] (the message
// names the known agents), [ErrClosed]. It reads the caller session (GET /session/{id}) and
// checks the agent against its directory's (GET /agent?directory=). Then it creates the
// child session in the caller's directory (POST /session?directory=, with the caller's
// session as parentID, the title "Background: <description>" or
// "Background (forked): <description>", and a rule denying the LLM tools at the deepest
// level of [WithNestingDepth]); for a fork it reads the caller's messages newest first
// (GET /session/{id}/message?limit=…&before=…), only as far back as the child's context
// reaches (the latest compaction summary, or what fits the budget), runs the fork pipeline
// and sends the result as a synthetic part without reply (POST /session/{id}/message with
// noReply); it records the task and sends the prompt (POST /session/{id}/prompt_async), each
// with a message id of its own choosing.
//
// A prompt whose answer is lost (the connection broke after the request may have reached
// the server) is not a failure: Launch returns the task running, and the Manager finds out
// from the session whether the prompt arrived (see the package documentation). A failure
// the server answers with, after the child session exists, leaves the task recorded in
// [StatusError] with the reason, and Launch returns that task with the error (its ID is set);
// the parent is notified as for any failed task. Errors of the server are returned wrapped
// (see package opencode).
func (m *Manager) Launch(ctx context.Context, in LaunchInput) (Task, error) {
	if in.Fork && in.Resume != "" {
		return Task{}, fmt.Errorf("%w: use fork to start a new task with the parent's context, resume to continue an existing task", ErrForkResumeConflict)
	}
	if in.Resume != "" {
		return Task{}, fmt.Errorf("%w: resume is not a launch; use Resume to send a follow-up", ErrInvalidInput)
	}
	if err := checkCaller(in.Caller); err != nil {
		return Task{}, err
	}
	for _, f := range []struct{ name, v string }{{"description", in.Description}, {"prompt", in.Prompt}, {"agent", in.Agent}} {
		if strings.TrimSpace(f.v) == "" {
			return Task{}, fmt.Errorf("%w: %s is required", ErrInvalidInput, f.name)
		}
	}
	if _, err := parseModel(in.Model); err != nil {
		return Task{}, err
	}
	if in.Deadline < 0 {
		return Task{}, fmt.Errorf("%w: deadline %v must not be negative", ErrInvalidInput, in.Deadline)
	}
	deadline := cmp.Or(in.Deadline, m.cfg.deadline)
	status := StatusRunning
	if _, limit := m.cfg.limits.keyOf(in.Model); limit > 0 {
		status = StatusQueued // until slotLocked says it may start
	}
	if err := m.begin(); err != nil {
		return Task{}, err
	}
	defer m.ops.Done()
	depth, err := m.depth(in.Caller.SessionID)
	if err != nil {
		return Task{}, err
	}
	m.mu.Lock()
	err = m.reserveLocked(in.Caller.SessionID)
	m.mu.Unlock()
	if err != nil {
		return Task{}, err
	}
	registered := false
	defer func() {
		if !registered { // the launch failed before its task counted
			m.mu.Lock()
			m.unreserveLocked(in.Caller.SessionID)
			m.mu.Unlock()
		}
	}()
	parent, err := m.client.GetSession(ctx, in.Caller.SessionID)
	if err != nil {
		return Task{}, callerErr(in.Caller.SessionID, err)
	}
	if err := m.checkAgent(ctx, parent.Directory, in.Agent); err != nil {
		return Task{}, err
	}

	var (
		injection string
		stats     *fork.Stats
	)
	if in.Fork { // newest first, only as far back as the child's context reaches
		r, err := m.cfg.pipeline.RunPages(ctx, fork.SessionPages(m.client, in.Caller.SessionID))
		if err != nil {
			return Task{}, callerErr(in.Caller.SessionID, err)
		}
		injection, stats = r.Injection(), &r.Stats
	}

	title := "Background: " + in.Description
	if in.Fork {
		title = "Background (forked): " + in.Description
	}
	asked := time.Now()
	sess, err := m.client.CreateSession(ctx, opencode.CreateSessionRequest{
		Directory: parent.Directory, ParentID: in.Caller.SessionID, Title: title, Permission: m.childRules(depth),
	})
	m.quickest.observe(time.Since(asked))
	if err != nil {
		return Task{}, fmt.Errorf("asyncagents: create task session: %w", err)
	}

	e := &entry{done: make(chan struct{}), task: Task{
		ID: sess.ID, ParentSessionID: in.Caller.SessionID, ParentMessageID: in.Caller.MessageID,
		ParentAgent: in.Caller.Agent, Directory: sess.Directory, Description: in.Description,
		Prompt: in.Prompt, Agent: in.Agent, Model: in.Model, Status: status,
		Started: m.now(), Forked: in.Fork, ForkStats: stats, Depth: depth,
		Deadline: deadline,
	}}
	m.mu.Lock()
	if !m.reg.Add(in.Caller.SessionID, sess.ID) { // the server handed out an id twice
		m.mu.Unlock()
		return Task{}, fmt.Errorf("asyncagents: create task session: the server returned the existing session %s", sess.ID)
	}
	e.task.BatchID = sess.ID
	if open, ok := m.open[in.Caller.SessionID]; ok {
		e.task.BatchID = open // joins the batch of the parent's active tasks
	}
	m.open[in.Caller.SessionID] = e.task.BatchID
	var injectID string
	if injection != "" {
		injectID = opencode.NewMessageID(m.now(), "")
		e.baseline = injectID
	}
	m.newPromptIDLocked(e, injectID)
	b := m.batchLocked(e.task.BatchID)
	b.total++
	b.active++
	m.tasks[sess.ID] = e
	registered = true // its reservation is the task's count now
	m.startMirrorLocked(e)
	m.changedLocked(e)
	m.mu.Unlock()
	m.persist(e)

	if injection != "" {
		if err := m.injectContext(ctx, sess.ID, injectID, in.Agent, injection); err != nil {
			return m.failLaunch(e, 0, fmt.Errorf("asyncagents: inject parent context: %w", err))
		}
	}
	if status == StatusQueued {
		m.mu.Lock()
		switch {
		case e.task.Status != StatusQueued: // cancelled or cleared meanwhile
			m.mu.Unlock()
			return m.snapshot(e), nil
		case !m.slotLocked(e):
			m.mu.Unlock()
			return m.snapshot(e), nil // it starts when a slot frees
		}
		e.task.Status, e.task.Started = StatusRunning, m.now()
		m.changedLocked(e)
		m.mu.Unlock()
		m.persist(e)
	}
	if err := m.sendPrompt(ctx, e, 0); err != nil {
		return m.failLaunch(e, 0, fmt.Errorf("asyncagents: send prompt: %w", err))
	}
	return m.snapshot(e), nil
}

func (m *Manager) batchLocked(id string) *batch {
	b := m.batches[id]
	if b == nil {
		b = &batch{}
		m.batches[id] = b
	}
	return b
}

func callerErr(id string, err error) error {
	if errors.Is(err, opencode.ErrNotFound) {
		return fmt.Errorf("%w: caller session %s does not exist", ErrInvalidInput, id)
	}
	return fmt.Errorf("asyncagents: read caller session %s: %w", id, err)
}

// failLaunch records a launch failure after the child session exists.
func (m *Manager) failLaunch(e *entry, rc int, err error) (Task, error) {
	m.finish(e, rc, StatusError, "", err.Error())
	return m.snapshot(e), err
}

// agentsTTL is how long the server's agent list is trusted; an agent not in it is checked
// against a fresh list before it is refused.
const agentsTTL = 30 * time.Second

// maxAgentLists bounds the directories whose agent lists are cached; past it the cache
// starts over.
const maxAgentLists = 64

// agentList is the visible agents of one instance, sorted, as of at.
type agentList struct {
	names []string
	at    time.Time
}

// checkAgent verifies the agent against GET /agent of dir's instance (hidden agents do not
// count; a project may define its own). Each directory's list is cached for agentsTTL;
// concurrent launches share one request.
func (m *Manager) checkAgent(ctx context.Context, dir, name string) error {
	m.mu.Lock()
	l := m.agents[dir]
	m.mu.Unlock()
	if m.now().Sub(l.at) < agentsTTL && slices.Contains(l.names, name) {
		return nil
	}
	v, err, _ := m.agentsOnce.Do(dir, func() (any, error) {
		agents, err := m.client.Agents(ctx, dir)
		if err != nil {
			return nil, err
		}
		var names []string
		for _, a := range agents {
			if !a.Hidden {
				names = append(names, a.Name)
			}
		}
		sort.Strings(names)
		m.mu.Lock()
		if m.agents == nil || len(m.agents) >= maxAgentLists {
			m.agents = map[string]agentList{}
		}
		m.agents[dir] = agentList{names: names, at: m.now()}
		m.mu.Unlock()
		return names, nil
	})
	if err != nil {
		return fmt.Errorf("asyncagents: list agents: %w", err)
	}
	known := v.([]string)
	if slices.Contains(known, name) {
		return nil
	}
	return fmt.Errorf("%w: %s (known agents: %s)", ErrUnknownAgent, echo(name), strings.Join(known, ", "))
}

// depth returns the depth of a task launched for the caller session, or ErrNestingDepth.
func (m *Manager) depth(caller string) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := 1
	if p := m.tasks[caller]; p != nil {
		d = max(p.task.Depth, 1) + 1
	}
	if d > m.cfg.nestingDepth {
		return 0, fmt.Errorf("%w: the caller is a task at depth %d and tasks may nest %d deep", ErrNestingDepth, d-1, m.cfg.nestingDepth)
	}
	return d, nil
}

// childRules are the permission rules of a task session at depth: the deepest may not use
// the LLM tools.
func (m *Manager) childRules(depth int) []opencode.PermissionRule {
	if depth < m.cfg.nestingDepth {
		return nil
	}
	return []opencode.PermissionRule{{Permission: m.cfg.toolPrefix + "_*", Pattern: "*", Action: "deny"}}
}

func (m *Manager) snapshot(e *entry) Task {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.viewLocked(e)
}

// viewLocked copies a task and sets its display id.
func (m *Manager) viewLocked(e *entry) Task {
	t := e.task.clone()
	t.DisplayID = m.reg.DisplayID(t.ID)
	if t.Status == StatusQueued {
		t.QueuePosition = m.queuePositionLocked(e)
	}
	return t
}

// persist saves the newest version of e unless the store has it already or e was removed.
// Saves of one task never overlap, so an older snapshot never overwrites a newer one.
func (m *Manager) persist(e *entry) {
	e.saveMu.Lock()
	defer e.saveMu.Unlock()
	m.mu.Lock()
	if e.removed || e.saved == e.version {
		m.mu.Unlock()
		return
	}
	snap, v := e.task.clone(), e.version
	m.mu.Unlock()
	if err := m.cfg.store.Save(m.ctx, snap); err != nil {
		m.cfg.logger.Warn("asyncagents: save task", "task", snap.ID, "err", err)
		return
	}
	e.saved = v
}

// Get returns any task of the Manager, whatever its parent: id is the full task id or the id
// without "ses_" (prefixes resolve only among a caller's tasks, in the caller's operations).
// It returns [ErrTaskNotFound] for an unknown id and [ErrClosed] after Close.
func (m *Manager) Get(id string) (Task, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return Task{}, ErrClosed
	}
	if e, ok := m.tasks[manager.SessionPrefix+strings.TrimPrefix(strings.TrimSpace(id), manager.SessionPrefix)]; ok {
		return m.viewLocked(e), nil
	}
	return Task{}, fmt.Errorf("%w: %s", ErrTaskNotFound, echo(id))
}

// OutputOptions select how [Manager.Output] waits and what it returns.
type OutputOptions struct {
	// Block waits until the task ends or Timeout passes.
	Block bool
	// Timeout bounds a blocking wait. Zero means [DefaultOutputTimeout]; more than
	// [MaxOutputTimeout] is clamped to it; negative is [ErrInvalidInput].
	Timeout time.Duration

	// FullSession also returns the task session's messages (Output.Messages): the last
	// MessageLimit of them, or with SinceMessageID the first MessageLimit after that message.
	// [FormatMessages] renders them; IncludeThinking and IncludeToolResults say what it shows.
	FullSession bool
	// SinceMessageID, with FullSession, returns only the messages after this one, which must
	// be a message of the task's session ([ErrInvalidInput] otherwise).
	SinceMessageID string
	// MessageLimit, with FullSession, bounds how many messages are returned: 1 to
	// [MaxMessageLimit]; 0 means [DefaultMessageLimit].
	MessageLimit int
	// IncludeThinking shows reasoning parts, and IncludeToolResults tool outputs and errors,
	// in [FormatMessages].
	IncludeThinking, IncludeToolResults bool
}

// Bounds of OutputOptions.MessageLimit.
const (
	DefaultMessageLimit = 20
	MaxMessageLimit     = 100
)

// Output is what [Manager.Output] returns.
type Output struct {
	// Task is the task: with its Result when completed, its Error when failed or cancelled,
	// and its Progress while active.
	Task Task
	// TimedOut reports that a blocking wait ended by its timeout while the task was active.
	TimedOut bool
	// Messages are the session's messages asked for with FullSession, oldest first, and
	// MoreMessages reports that more come after them (with SinceMessageID) or before them.
	Messages     []opencode.Message
	MoreMessages bool
}

// Output returns the caller's task id: the full id, the id without "ses_", or a unique
// prefix of at least 4 characters after "ses_". A completed result is marked retrieved
// (Task.Retrieved). It reads no messages from the server, except with FullSession: then it
// reads the session's messages newest first in pages (GET /session/{id}/message?limit&before),
// only as far back as needed.
//
// With Block it first waits until the task ends, the timeout passes (not an error: TimedOut
// is set), ctx ends (returning ctx.Err(); nothing changes) or the Manager closes
// ([ErrClosed]). A task cleared while waited on gives [ErrTaskNotFound]. Other errors:
// [ErrInvalidInput] (an empty id or caller, a negative timeout, a message limit out of range,
// an unknown SinceMessageID), [ErrTaskNotFound], [ErrAmbiguousID], or the server's error
// reading the messages.
func (m *Manager) Output(ctx context.Context, caller Caller, id string, opts OutputOptions) (Output, error) {
	if opts.Timeout < 0 {
		return Output{}, fmt.Errorf("%w: negative timeout %v", ErrInvalidInput, opts.Timeout)
	}
	if opts.MessageLimit < 0 || opts.MessageLimit > MaxMessageLimit {
		return Output{}, fmt.Errorf("%w: message limit %d must be 1 to %d", ErrInvalidInput, opts.MessageLimit, MaxMessageLimit)
	}
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = DefaultOutputTimeout
	}
	timeout = min(timeout, MaxOutputTimeout)
	e, err := m.lookup(caller, id)
	if err != nil {
		return Output{}, err
	}
	done := e.done
	wait := opts.Block && !isClosed(done)
	if wait {
		e.waiters++
	}
	m.mu.Unlock()

	timedOut := false
	if wait {
		var stopped error
		select {
		case <-done:
		case <-m.cfg.clock.After(timeout):
			timedOut = true
		case <-ctx.Done():
			stopped = ctx.Err()
		case <-m.stop:
			stopped = ErrClosed
		}
		counted := true // in e.waiters when the run ended
		if !isClosed(done) {
			m.mu.Lock()
			if !isClosed(done) {
				e.waiters--
				counted = false
			}
			m.mu.Unlock()
		}
		if t, ok := takeEnd(e, done, counted); ok { // finish left the task as the run ended
			return m.output(ctx, Output{Task: t}, opts)
		}
		if stopped != nil {
			return Output{}, stopped
		}
	}
	m.mu.Lock()
	if e.removed {
		m.mu.Unlock()
		return Output{}, fmt.Errorf("%w: %s was cleared", ErrTaskNotFound, e.task.ID)
	}
	save := false
	if e.task.Status == StatusCompleted && e.task.Retrieved.IsZero() {
		e.task.Retrieved = m.now()
		m.changedLocked(e)
		save = true
	}
	out := Output{Task: m.viewLocked(e), TimedOut: timedOut && !e.task.Status.Terminal()}
	m.mu.Unlock()
	if save {
		m.persist(e)
	}
	return m.output(ctx, out, opts)
}

// output adds the session's messages to out when opts ask for them.
func (m *Manager) output(ctx context.Context, out Output, opts OutputOptions) (Output, error) {
	if opts.FullSession {
		var err error
		out.Messages, out.MoreMessages, err = m.sessionMessages(ctx, out.Task.ID, opts.SinceMessageID, cmp.Or(opts.MessageLimit, DefaultMessageLimit))
		if err != nil {
			return Output{}, err
		}
	}
	return out, nil
}

// isClosed reports whether c is closed.
func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// takeEnd returns, to a blocked Output whose wait on done ended, a copy of the task as the run
// ended, when finish left it one: the run ended while the Output was counted in e.waiters.
func takeEnd(e *entry, done chan struct{}, counted bool) (Task, bool) {
	if !counted {
		return Task{}, false
	}
	v := e.ended.Load()
	if v == nil || v.done != done {
		return Task{}, false
	}
	t := v.task.clone()
	if v.left.Add(-1) == 0 {
		e.ended.CompareAndSwap(v, nil)
	}
	return t, true
}

// messagePage is how many messages sessionMessages asks for at a time when it looks for a
// message further back.
const messagePage = 100

// sessionMessages returns the last limit messages of session id, or, after since, the first
// limit after it, reading pages newest first.
func (m *Manager) sessionMessages(ctx context.Context, id, since string, limit int) ([]opencode.Message, bool, error) {
	if since == "" {
		msgs, next, err := m.client.MessagesBefore(ctx, id, limit, "")
		if err != nil {
			return nil, false, fmt.Errorf("asyncagents: read the messages of %s: %w", id, err)
		}
		return msgs, next != "", nil
	}
	// after holds the oldest messages (at most limit) newer than the pages read so far.
	var (
		after  []opencode.Message
		more   bool
		cursor string
	)
	for {
		page, next, err := m.client.MessagesBefore(ctx, id, messagePage, cursor)
		if err != nil {
			return nil, false, fmt.Errorf("asyncagents: read the messages of %s: %w", id, err)
		}
		i := slices.IndexFunc(page, func(msg opencode.Message) bool { return msg.Info.ID == since })
		if i < 0 && next == "" {
			return nil, false, fmt.Errorf("%w: since_message_id %s is not a message of task %s", ErrInvalidInput, echo(since), id)
		}
		after = append(page[i+1:], after...) // i = -1: the whole page
		if len(after) > limit {
			after, more = after[:limit], true
		}
		if i >= 0 {
			return after, more, nil
		}
		cursor = next
	}
}

// Cancel aborts the caller's running or resumed task (POST /session/{id}/abort), or takes a
// queued one out of its queue, marks it [StatusCancelled] and notifies the parent. It returns the cancelled task. Errors, each
// leaving the task unchanged: [ErrNotRunning] for a task in any other state,
// [ErrInvalidInput], [ErrTaskNotFound], [ErrAmbiguousID], [ErrClosed], and the server's
// error when the abort request fails.
func (m *Manager) Cancel(ctx context.Context, caller Caller, id string) (Task, error) {
	if err := m.begin(); err != nil {
		return Task{}, err
	}
	defer m.ops.Done()
	e, err := m.lookup(caller, id)
	if err != nil {
		return Task{}, err
	}
	tid, st, rc := e.task.ID, e.task.Status, e.task.ResumeCount
	if st.Terminal() {
		m.mu.Unlock()
		return Task{}, fmt.Errorf("%w: only running or queued tasks can be cancelled; %s is %s", ErrNotRunning, tid, st)
	}
	m.mu.Unlock()
	if st == StatusQueued { // nothing runs on the server yet
		m.finish(e, rc, StatusCancelled, "", "cancelled")
		return m.snapshot(e), nil
	}
	if err := m.abortAs(ctx, e, rc, runEnd{StatusCancelled, "cancelled"}); err != nil {
		return Task{}, fmt.Errorf("asyncagents: abort %s: %w", tid, err)
	}
	return m.snapshot(e), nil
}

// List returns the caller's tasks, newest first, with their DisplayID set; with a status,
// only the tasks in it. Tasks of other parent sessions are never included. Errors:
// [ErrInvalidInput] (an unknown status or an empty caller), [ErrClosed].
func (m *Manager) List(caller Caller, status Status) ([]Task, error) {
	if status != "" && !status.valid() {
		return nil, fmt.Errorf("%w: unknown status %s (queued, running, completed, error, cancelled, resumed)", ErrInvalidInput, echo(string(status)))
	}
	if err := checkCaller(caller); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	var out []Task
	for _, id := range slices.Backward(m.reg.Tasks(caller.SessionID)) {
		if e := m.tasks[id]; status == "" || e.task.Status == status {
			out = append(out, m.viewLocked(e))
		}
	}
	return out, nil
}

// ClearResult reports what [Manager.Clear] did.
type ClearResult struct {
	Aborted int // active tasks whose sessions were aborted
	Removed int // tasks removed from the Manager and its store
}

// Clear aborts the caller's active tasks (POST /session/{id}/abort) and removes all the
// caller's tasks from the Manager and its store. Tasks of other parents are untouched. An
// abort that fails is logged and the task is removed all the same; a blocked Output on a
// removed task returns [ErrTaskNotFound]. Errors: [ErrInvalidInput] (an empty caller),
// [ErrClosed], or the store's Delete error (the tasks are gone from the Manager).
func (m *Manager) Clear(ctx context.Context, caller Caller) (ClearResult, error) {
	if err := checkCaller(caller); err != nil {
		return ClearResult{}, err
	}
	return m.clear(ctx, func(parent string) bool { return parent == caller.SessionID })
}

// ClearAll aborts every active task and removes every task, whatever its parent: for
// shutdown and admin use. It works as [Manager.Clear].
func (m *Manager) ClearAll(ctx context.Context) (ClearResult, error) {
	return m.clear(ctx, func(string) bool { return true })
}

func (m *Manager) clear(ctx context.Context, match func(parent string) bool) (ClearResult, error) {
	if err := m.begin(); err != nil {
		return ClearResult{}, err
	}
	defer m.ops.Done()
	m.mu.Lock()
	var active, ids []string
	var removed, start []*entry
	for id, e := range m.tasks {
		if !match(e.task.ParentSessionID) {
			continue
		}
		if e.task.Status.Active() {
			active = append(active, id)
		}
		ids = append(ids, id)
		removed = append(removed, e)
		start = append(start, m.removeLocked(e)...)
	}
	m.mu.Unlock()
	m.startQueued(start)
	var res ClearResult
	for _, id := range active {
		if err := m.client.Abort(ctx, id); err != nil {
			m.cfg.logger.Warn("asyncagents: abort on clear", "task", id, "err", err)
			continue
		}
		res.Aborted++
	}
	for _, e := range removed { // a barrier: saves in flight land before the delete, later ones see e.removed
		e.saveMu.Lock()
		e.saveMu.Unlock() //nolint:staticcheck // empty critical section on purpose
	}
	res.Removed = len(ids)
	if err := m.cfg.store.Delete(ctx, ids...); err != nil {
		return res, fmt.Errorf("asyncagents: delete tasks: %w", err)
	}
	return res, nil
}

// removeLocked forgets a task; a blocked Output on it returns at once. It returns the queued
// tasks that can start in the slot it freed (see startQueued).
func (m *Manager) removeLocked(e *entry) []*entry {
	id := e.task.ID
	m.publishLocked(e, true)
	delete(m.tasks, id)
	delete(m.rq, id)
	m.dropMirrorLocked(e)
	m.reg.Remove(id)
	e.removed = true
	if b := m.batches[e.task.BatchID]; b != nil {
		b.total--
		if !e.task.Status.Terminal() {
			b.active--
			m.unreserveLocked(e.task.ParentSessionID)
		}
		m.closeBatchLocked(e.task.ParentSessionID, e.task.BatchID, b)
	}
	select {
	case <-e.done:
	default:
		close(e.done)
	}
	return m.releaseLocked(e)
}

// closeBatchLocked ends the parent's open batch when it has no active task left, and
// forgets an empty batch.
func (m *Manager) closeBatchLocked(parent, id string, b *batch) {
	if b.active == 0 && m.open[parent] == id {
		delete(m.open, parent)
	}
	if b.total == 0 {
		delete(m.batches, id)
	}
}
