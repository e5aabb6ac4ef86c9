package manager

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/asyncagents/asyncagents/fork"
	"github.com/asyncagents/asyncagents/opencode"
)

// entry is the Manager's record of a task plus the run state that is not persisted.
type entry struct {
	task     Task
	done     chan struct{} // closed when the current run ends
	baseline string        // id of the last message before the run's prompt ("" for a new session)
	seenBusy bool          // the session went busy during this run
	sessErr  string        // the last session.error of this run
	polled   pollState     // what the last status poll saw
	recent   [16]string    // part ids of tool parts already counted (SPEC T-8)
	next     int
}

type pollState int8

const (
	pollUnknown pollState = iota
	pollBusy
	pollAbsent
)

// Manager runs background tasks in child sessions of an OpenCode server and tracks them
// until they end. It is safe for concurrent use.
//
// A Manager owns its goroutines: one event subscription (GET /global/event), one status
// poller, a fixed number of reconcilers and one notifier — a constant number, whatever the
// number of tasks. Close stops and waits for all of them.
type Manager struct {
	client opencode.Client
	cfg    config

	ctx    context.Context // cancelled by Close: ends background I/O
	cancel context.CancelFunc
	stop   chan struct{}
	wg     sync.WaitGroup
	once   sync.Once

	mu       sync.Mutex
	closed   bool
	tasks    map[string]*entry
	byParent map[string][]*entry // launch order
	rq       map[string]bool     // sessions waiting for a reconcile → the session was seen idle
	rqOrder  []string
	rqWake   chan struct{}
	nq       []notice
	nqWake   chan struct{}
}

// New returns a Manager that uses client, loads the tasks of the store and starts its
// goroutines. Loaded tasks that were running are reconciled against the server at once
// (SPEC T-19). It returns an error matching ErrInvalidInput for a bad option, or the store's
// error.
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
	if cfg.store == nil {
		cfg.store = &MemoryStore{}
	}
	m := &Manager{
		client:   client,
		cfg:      cfg,
		stop:     make(chan struct{}),
		tasks:    map[string]*entry{},
		byParent: map[string][]*entry{},
		rq:       map[string]bool{},
		rqWake:   make(chan struct{}, 1),
		nqWake:   make(chan struct{}, 1),
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	stored, err := cfg.store.Load(m.ctx)
	if err != nil {
		m.cancel()
		return nil, fmt.Errorf("asyncagents: load tasks: %w", err)
	}
	sort.Slice(stored, func(i, j int) bool { return stored[i].Started.Before(stored[j].Started) })
	for _, t := range stored {
		e := &entry{task: t, done: make(chan struct{})}
		if t.Status.Terminal() {
			close(e.done)
		}
		m.tasks[t.ID] = e
		m.byParent[t.ParentSessionID] = append(m.byParent[t.ParentSessionID], e)
		if t.Status.Active() {
			m.rq[t.ID] = false
			m.rqOrder = append(m.rqOrder, t.ID)
		}
	}
	m.start()
	return m, nil
}

// Close stops the event subscription, the poller, the reconcilers and the notifier and
// waits for them, or until ctx ends (returning ctx.Err(); they still stop). Notifications
// already queued get one delivery attempt. Running tasks keep running on the server and
// their records stay in the store (SPEC T-20). Close is idempotent; afterwards every
// operation returns ErrClosed.
func (m *Manager) Close(ctx context.Context) error {
	m.once.Do(func() {
		m.mu.Lock()
		m.closed = true
		m.mu.Unlock()
		close(m.stop)
		m.cancel()
	})
	done := make(chan struct{})
	go func() { m.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (m *Manager) now() time.Time { return m.cfg.clock.Now() }

// LaunchInput describes a new task (SPEC T-4).
type LaunchInput struct {
	Caller      Caller
	Description string // short, shown in lists and notifications; required
	Prompt      string // the task; required
	Agent       string // an agent of the server (GET /agent); required
	Fork        bool   // inherit the caller session's context (SPEC §2)
	// Resume, a task id, is not a launch: it is rejected together with Fork
	// (ErrForkResumeConflict).
	Resume string
	Model  *opencode.Model // optional; the agent's or server's default otherwise
}

// Launch starts a task and returns as soon as OpenCode accepted its prompt; it never waits
// for the model (SPEC T-4). It validates first and creates nothing on bad input:
// ErrForkResumeConflict, ErrInvalidInput (empty description, prompt, agent or caller
// session, or a caller session the server does not know), ErrUnknownAgent (naming the
// known agents), ErrClosed. It then creates the child session (POST /session with
// parentID, a "Background: …" title and the rules of SPEC T-17), injects the parent's
// context for a fork (SPEC F-17), registers the task as running and sends the prompt
// (POST /session/{id}/prompt_async). A failure after the session exists leaves the task in
// StatusError with the reason, and that task is returned with the error.
func (m *Manager) Launch(ctx context.Context, in LaunchInput) (Task, error) {
	if in.Fork && in.Resume != "" {
		return Task{}, ErrForkResumeConflict
	}
	for _, f := range []struct{ name, v string }{
		{"caller session", in.Caller.SessionID}, {"description", in.Description}, {"prompt", in.Prompt}, {"agent", in.Agent},
	} {
		if strings.TrimSpace(f.v) == "" {
			return Task{}, fmt.Errorf("%w: %s is required", ErrInvalidInput, f.name)
		}
	}
	if m.isClosed() {
		return Task{}, ErrClosed
	}
	if err := m.checkAgent(ctx, in.Agent); err != nil {
		return Task{}, err
	}

	var (
		injection string
		stats     *fork.Stats
	)
	if in.Fork {
		msgs, err := m.client.Messages(ctx, in.Caller.SessionID, 0)
		if err != nil {
			return Task{}, callerErr(in.Caller.SessionID, err)
		}
		r := m.cfg.pipeline.Run(msgs)
		injection, stats = r.Injection(), &r.Stats
	} else if _, err := m.client.GetSession(ctx, in.Caller.SessionID); err != nil {
		return Task{}, callerErr(in.Caller.SessionID, err)
	}

	title := "Background: " + in.Description
	if in.Fork {
		title = "Background (forked): " + in.Description
	}
	sess, err := m.client.CreateSession(ctx, opencode.CreateSessionRequest{
		ParentID: in.Caller.SessionID, Title: title, Permission: m.childRules(),
	})
	if err != nil {
		return Task{}, fmt.Errorf("asyncagents: create task session: %w", err)
	}

	e := &entry{done: make(chan struct{}), task: Task{
		ID: sess.ID, ParentSessionID: in.Caller.SessionID, ParentMessageID: in.Caller.MessageID,
		ParentAgent: in.Caller.Agent, Directory: sess.Directory, Description: in.Description,
		Prompt: in.Prompt, Agent: in.Agent, Model: in.Model, Status: StatusRunning,
		Started: m.now(), Forked: in.Fork, ForkStats: stats,
	}}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return Task{}, ErrClosed
	}
	e.task.BatchID = e.task.ID
	for _, o := range m.byParent[in.Caller.SessionID] {
		if o.task.Status.Active() {
			e.task.BatchID = o.task.BatchID // SPEC T-5
			break
		}
	}
	m.tasks[sess.ID] = e
	m.byParent[in.Caller.SessionID] = append(m.byParent[in.Caller.SessionID], e)
	snap := e.task.clone()
	m.mu.Unlock()
	m.persist(snap)

	if injection != "" {
		msg, err := m.client.Prompt(ctx, sess.ID, opencode.PromptRequest{
			NoReply: true, Agent: in.Agent, Parts: []opencode.TextPartInput{opencode.NewSyntheticText(injection)},
		})
		if err != nil {
			return m.failLaunch(e, 0, fmt.Errorf("asyncagents: inject parent context: %w", err))
		}
		m.mu.Lock()
		e.baseline = msg.Info.ID
		m.mu.Unlock()
	}
	err = m.client.PromptAsync(ctx, sess.ID, opencode.PromptRequest{
		Agent: in.Agent, Model: in.Model, Parts: []opencode.TextPartInput{opencode.NewText(in.Prompt)},
	})
	if err != nil {
		return m.failLaunch(e, 0, fmt.Errorf("asyncagents: send prompt: %w", err))
	}
	return m.snapshot(e), nil
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

// checkAgent verifies the agent against GET /agent (hidden agents do not count).
func (m *Manager) checkAgent(ctx context.Context, name string) error {
	agents, err := m.client.Agents(ctx)
	if err != nil {
		return fmt.Errorf("asyncagents: list agents: %w", err)
	}
	var known []string
	for _, a := range agents {
		if a.Hidden {
			continue
		}
		if a.Name == name {
			return nil
		}
		known = append(known, a.Name)
	}
	sort.Strings(known)
	return fmt.Errorf("%w: %q (known agents: %s)", ErrUnknownAgent, name, strings.Join(known, ", "))
}

// childRules are the permission rules of a task session (SPEC T-17).
func (m *Manager) childRules() []opencode.PermissionRule {
	if m.cfg.allowNesting {
		return nil
	}
	return []opencode.PermissionRule{{Permission: m.cfg.toolPrefix + "_*", Pattern: "*", Action: "deny"}}
}

func (m *Manager) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

func (m *Manager) snapshot(e *entry) Task {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.viewLocked(e)
}

// viewLocked copies a task and sets its display id among its parent's tasks.
func (m *Manager) viewLocked(e *entry) Task {
	t := e.task.clone()
	t.DisplayID = m.displayIDLocked(e)
	return t
}

func (m *Manager) displayIDLocked(e *entry) string {
	sibs := m.byParent[e.task.ParentSessionID]
	ids := make([]string, len(sibs))
	for i, s := range sibs {
		ids[i] = s.task.ID
	}
	return displayIDs(ids)[e.task.ID]
}

func (m *Manager) persist(t Task) {
	if err := m.cfg.store.Save(m.ctx, t); err != nil {
		m.cfg.logger.Warn("asyncagents: save task", "task", t.ID, "err", err)
	}
}

// Get returns a task for the host, whatever its parent: id is the full id or the id without
// "ses_" (prefixes resolve only among a caller's tasks, in the caller operations). It
// returns ErrTaskNotFound for an unknown id.
func (m *Manager) Get(id string) (Task, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.tasks[sessionPrefix+strings.TrimPrefix(id, sessionPrefix)]; ok {
		return m.viewLocked(e), nil
	}
	return Task{}, fmt.Errorf("%w: %q", ErrTaskNotFound, id)
}

// OutputOptions select how Output waits.
type OutputOptions struct {
	// Block waits until the task is terminal or Timeout passes (SPEC T-10).
	Block bool
	// Timeout of a blocking wait. Zero means DefaultOutputTimeout; larger than
	// MaxOutputTimeout is clamped; negative is ErrInvalidInput.
	Timeout time.Duration
}

// Output is what Output returns: the task (result or error when terminal, progress while
// running) and whether a blocking wait timed out.
type Output struct {
	Task     Task
	TimedOut bool
}

// Output returns the caller's task id (SPEC T-9). A completed result is marked retrieved.
// With Block it waits until the task is terminal, the timeout passes (not an error:
// TimedOut is set), ctx ends (returning ctx.Err(), nothing changed) or the Manager closes
// (ErrClosed). Errors: ErrTaskNotFound, ErrAmbiguousID, ErrInvalidInput.
func (m *Manager) Output(ctx context.Context, caller Caller, id string, opts OutputOptions) (Output, error) {
	if opts.Timeout < 0 {
		return Output{}, fmt.Errorf("%w: negative timeout %v", ErrInvalidInput, opts.Timeout)
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
	m.mu.Unlock()

	timedOut := false
	if opts.Block {
		select {
		case <-done:
		case <-m.cfg.clock.After(timeout):
			timedOut = true
		case <-ctx.Done():
			return Output{}, ctx.Err()
		case <-m.stop:
			return Output{}, ErrClosed
		}
	}
	m.mu.Lock()
	var save *Task
	if e.task.Status == StatusCompleted && e.task.Retrieved.IsZero() {
		e.task.Retrieved = m.now()
		s := e.task.clone()
		save = &s
	}
	out := Output{Task: m.viewLocked(e), TimedOut: timedOut && !e.task.Status.Terminal()}
	m.mu.Unlock()
	if save != nil {
		m.persist(*save)
	}
	return out, nil
}

// Cancel aborts the caller's running or resumed task (POST /session/{id}/abort), marks it
// cancelled and notifies the parent (SPEC T-12, N-4). Any other state returns ErrNotRunning
// and changes nothing; so does a failed abort request.
func (m *Manager) Cancel(ctx context.Context, caller Caller, id string) (Task, error) {
	e, err := m.lookup(caller, id)
	if err != nil {
		return Task{}, err
	}
	if !e.task.Status.Active() {
		st := e.task.Status
		m.mu.Unlock()
		return Task{}, fmt.Errorf("%w (task %s is %s)", ErrNotRunning, e.task.ID, st)
	}
	rc := e.task.ResumeCount
	m.mu.Unlock()
	if err := m.client.Abort(ctx, e.task.ID); err != nil {
		return Task{}, fmt.Errorf("asyncagents: abort %s: %w", e.task.ID, err)
	}
	m.finish(e, rc, StatusCancelled, "", "cancelled")
	return m.snapshot(e), nil
}

// List returns the caller's tasks, newest first (SPEC T-13), optionally only those with
// status. Tasks of other parent sessions are never included. An unknown status is
// ErrInvalidInput.
func (m *Manager) List(caller Caller, status Status) ([]Task, error) {
	if status != "" && !status.valid() {
		return nil, fmt.Errorf("%w: unknown status %q (running, completed, error, cancelled, resumed)", ErrInvalidInput, status)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	sibs := m.byParent[caller.SessionID]
	ids := make([]string, len(sibs))
	for i, e := range sibs {
		ids[i] = e.task.ID
	}
	disp := displayIDs(ids)
	var out []Task
	for _, e := range slices.Backward(sibs) {
		if status == "" || e.task.Status == status {
			t := e.task.clone()
			t.DisplayID = disp[t.ID]
			out = append(out, t)
		}
	}
	return out, nil
}

// ClearResult reports what Clear did.
type ClearResult struct {
	Aborted int // running tasks whose sessions were aborted
	Removed int // tasks removed from memory and store
}

// Clear aborts the caller's running tasks and removes all the caller's tasks from memory
// and store (SPEC T-14). Tasks of other parents are untouched. An abort that fails is
// logged; the task is removed all the same.
func (m *Manager) Clear(ctx context.Context, caller Caller) (ClearResult, error) {
	return m.clear(ctx, func(t *Task) bool { return t.ParentSessionID == caller.SessionID })
}

// ClearAll aborts every running task and removes every task: for shutdown and admin use.
func (m *Manager) ClearAll(ctx context.Context) (ClearResult, error) {
	return m.clear(ctx, func(*Task) bool { return true })
}

func (m *Manager) clear(ctx context.Context, match func(*Task) bool) (ClearResult, error) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return ClearResult{}, ErrClosed
	}
	var active, ids []string
	for id, e := range m.tasks {
		if !match(&e.task) {
			continue
		}
		if e.task.Status.Active() {
			active = append(active, id)
		}
		ids = append(ids, id)
		m.removeLocked(e)
	}
	m.mu.Unlock()
	var res ClearResult
	for _, id := range active {
		if err := m.client.Abort(ctx, id); err != nil {
			m.cfg.logger.Warn("asyncagents: abort on clear", "task", id, "err", err)
			continue
		}
		res.Aborted++
	}
	if err := m.cfg.store.Delete(ctx, ids...); err != nil {
		return res, fmt.Errorf("asyncagents: delete tasks: %w", err)
	}
	res.Removed = len(ids)
	return res, nil
}

// removeLocked forgets a task; a blocked Output on it returns at once.
func (m *Manager) removeLocked(e *entry) {
	delete(m.tasks, e.task.ID)
	delete(m.rq, e.task.ID)
	p := e.task.ParentSessionID
	m.byParent[p] = slices.DeleteFunc(m.byParent[p], func(o *entry) bool { return o == e })
	if len(m.byParent[p]) == 0 {
		delete(m.byParent, p)
	}
	select {
	case <-e.done:
	default:
		close(e.done)
	}
}

// ToolPrefix returns the prefix of the LLM tool names (WithToolPrefix).
func (m *Manager) ToolPrefix() string { return m.cfg.toolPrefix }

// Now returns the Manager clock's time, for durations of the tasks it returns.
func (m *Manager) Now() time.Time { return m.now() }
