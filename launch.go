package asyncagents

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/asyncagents/asyncagents/opencode"
)

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
	// Fork gives the task the caller session's context, in the way ForkMode says: a digest
	// of its messages (sliced at the latest compaction, old tool results cut, the whole within
	// a character budget; see package fork) sent before the prompt, or OpenCode's own copy of
	// the caller session, which keeps the prompt cache.
	Fork bool
	// ForkMode is how a forked task gets the context: [ForkDigest] or [ForkNative]; "" uses
	// the Manager's ([WithForkMode]). Ignored without Fork.
	ForkMode ForkMode
	// Resume must be empty: a follow-up to an existing task is [Manager.Resume]. It exists
	// so a caller's fork-and-resume request is refused with [ErrForkResumeConflict].
	Resume string
	// Deadline bounds each run of the task (see [WithDeadline]); 0 uses the Manager's.
	Deadline time.Duration
	// Budget bounds what each run of the task may use (see [WithTaskBudget]); a zero field
	// uses the Manager's.
	Budget Budget
	// Isolation is where the task works: [IsolationNone] or [IsolationWorktree]; "" uses the
	// Manager's ([WithIsolation]).
	Isolation Isolation
	// IdempotencyKey, when set, makes a retried launch return the task the first one made:
	// a launch of the same caller session with the same key, on this Manager or another host
	// of its store (once this host read that host's changes, within a second), before or
	// after a restart, returns that task (and no error) and creates nothing. The task tool sets it to the tool call's id (Caller.CallID). At most
	// [MaxLaunchKeyChars] printable characters without spaces.
	IdempotencyKey string
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

// Launch records a new task and returns it at once, [StatusRunning] (or [StatusQueued] when
// its model has a concurrency limit, [WithConcurrency]) with Task.Starting set and no session
// yet: the work of its start is done by the Manager after Launch returned, and never waits
// for the model. Its DisplayID is set. The start, in launch order for each caller:
//
//   - for a fork, reads the caller's messages newest first (GET /session/{id}/message?limit=…&before=…),
//     only those up to the launching message (Caller.MessageID, when set: the fork is of the
//     caller as it was at the launch; without it, of the caller as the start finds it) and
//     only as far back as the child's context reaches
//     (the latest compaction summary, or what fits the budget), and runs the fork pipeline;
//   - for an isolated task ([IsolationWorktree]), makes its git worktree;
//   - creates the child session in the caller's directory, or the worktree
//     (POST /session?directory=, with the caller's session as parentID, the title
//     "Background: <description>" or "Background (forked): <description>", and the rules
//     below); a native fork ([ForkNative]) is instead OpenCode's copy of the caller,
//     POST /session/{id}/fork?directory=, cut before the launching message, which gets the
//     rules with PATCH /session/{id} (at the deepest level it is still shown the launch
//     tools, its caller's tool list, so that the prompt cache holds, and its calls of them
//     are refused). The session is recorded as Task.SessionID;
//   - for a digest, sends it as a synthetic part without reply (POST /session/{id}/message
//     with noReply);
//   - takes a slot of the task's concurrency limit, or waits queued for one, unsets
//     Task.Starting, and sends the prompt (POST /session/{id}/prompt_async), each message
//     with an id of the Manager's choosing.
//
// A failure of the start ends the task in [StatusError] with its reason, and the parent is
// notified once, as for any failed task; a task cancelled or cleared while it starts stops
// its start, and what was made for it (its session, its worktree) is deleted. A host that
// stops in the middle leaves the task starting in its store; the next Manager that takes it
// in ends it in [StatusError] ("the host stopped while the task was starting"), with one
// notification, and never leaves it stuck. [Manager.Output] of a task still starting shows
// it so.
//
// A task never has more rights than its caller. Its agent must be one the caller may launch
// as OpenCode's own task tool would let it: the task permission, with the agent's name as the
// pattern, is evaluated against the rules of the caller's agent (Caller.Agent) and then of the
// caller's session, and must not be deny or ask; a primary agent (build, plan) may run only
// when it is the caller's own. The task's session gets the caller's restrictions: the deny
// rules of its agent and of its session, and its session's external_directory rules; at the
// deepest level of [WithNestingDepth], the tools that launch tasks (every bridge's "*_task",
// this Manager's "<prefix>_*", and OpenCode's task) are denied too. A caller the Manager does
// not know (OpenCode's own subagent, or a session under a native fork) counts, for depth,
// [WithMaxActivePerParent] and [WithTreeBudget], under the nearest session above it that is a
// task or has tasks (Task.AnchorSessionID), found through its parentID chain.
//
// Before it records anything, Launch validates, and creates nothing on bad input:
// [ErrForkResumeConflict], [ErrInvalidInput] (an empty description, prompt, agent or caller
// session, a description longer than [MaxDescriptionChars] or of more than one line, a
// prompt longer than [MaxPromptChars], a malformed model, or a caller session the server
// does not know), [ErrNestingDepth], [ErrTaskLimit] (the caller, or the session it counts
// under, has [WithMaxActivePerParent] active tasks), [ErrBudget] (the caller's tasks, or those
// of a session above it, used [WithTreeBudget]), [ErrUnknownAgent] (the message names the
// known agents), [ErrPermissionDenied] (the caller may not launch that agent), [ErrClosed].
// It reads the caller session (GET /session/{id}), and the sessions above it when the Manager
// does not know it, and checks the agent against its directory's (GET /agent?directory=,
// cached). With a [HandoffStore], once the task is recorded it reads the caller's tasks other
// hosts hold, so that its DisplayID is unique among theirs too. A task the [Store] cannot
// record (its Save, or its read of other hosts' tasks, fails: a database out of reach, say)
// is not started: the error's text says so without the store's own words, which it wraps
// ([errors.Unwrap]) and the Manager logs.
//
// A prompt whose answer is lost (the connection broke after the request may have reached
// the server) is not a failure: the task stays running, and the Manager finds out from the
// session whether the prompt arrived (see the package documentation).
func (m *Manager) Launch(ctx context.Context, in LaunchInput) (Task, error) {
	if err := in.check(); err != nil {
		return Task{}, err
	}
	// Right after New, the Manager's first attempt to open the event stream is awaited (at
	// most QuickRequestTimeout), so that the stream follows the task's run from its start.
	m.mirrors.awaitStream(ctx, m.bg.quickTimeout(), m.bg.stopc)
	if err := m.begin(); err != nil {
		return Task{}, err
	}
	defer m.ops.Done()
	if key := in.IdempotencyKey; key != "" {
		end, ok := m.keys.begin(in.Caller.SessionID, key, ctx.Done())
		if !ok {
			return Task{}, ctx.Err()
		}
		defer end()
		if t, ok := m.launchedWith(in.Caller.SessionID, key); ok {
			return t, nil // a retry: the task its first launch made
		}
	}
	caller, err := m.client.GetSession(ctx, in.Caller.SessionID)
	if err != nil {
		return Task{}, callerErr(in.Caller.SessionID, err)
	}
	at, err := m.place(ctx, caller)
	if err != nil {
		return Task{}, err
	}
	m.mu.Lock()
	err = m.overBudgetLocked(at.anchor)
	if err == nil {
		err = m.slots.reserve(in.Caller.SessionID, at.anchor)
	}
	m.mu.Unlock()
	if err != nil {
		return Task{}, err
	}
	var e *entry
	defer func() {
		if e == nil { // the launch failed before its task counted
			m.mu.Lock()
			m.slots.unreserve(in.Caller.SessionID, at.anchor)
			m.mu.Unlock()
		}
	}()
	isolated := cmp.Or(in.Isolation, m.cfg.isolation) == IsolationWorktree
	plan, err := m.planLaunch(ctx, in, caller, at, isolated)
	if err != nil {
		return Task{}, err
	}
	if isolated { // a project that cannot give it a worktree is refused now
		if err := m.isolation.check(ctx, caller.Directory, m.liveWorktrees); err != nil {
			return Task{}, err
		}
	}
	if e, err = m.register(in, plan); err != nil {
		return Task{}, err // e, when set, was counted and taken back
	}
	// The caller's tasks other hosts stored, read once this one is stored: the id shown is
	// unique among them too, and of two launches at once on two hosts the later read sees
	// both, so the two are never shown the same id.
	m.hosts.remote(in.Caller.SessionID)
	launched := m.snapshot(e) // as recorded: its start may be over before this returns
	m.starts.enqueue(m, startJob{e: e, in: in, plan: plan})
	return launched, nil
}

// check validates a launch's input without asking the server.
func (in *LaunchInput) check() error {
	if in.Fork && in.Resume != "" {
		return fmt.Errorf("%w: use fork to start a new task with the parent's context, resume to continue an existing task", ErrForkResumeConflict)
	}
	if in.Resume != "" {
		return fmt.Errorf("%w: resume is not a launch; use Resume to send a follow-up", ErrInvalidInput)
	}
	if err := checkCaller(in.Caller); err != nil {
		return err
	}
	for _, err := range []error{checkText("description", in.Description, MaxDescriptionChars, true),
		checkText("prompt", in.Prompt, MaxPromptChars, false), checkText("agent", in.Agent, maxAgentName, true)} {
		if err != nil {
			return err
		}
	}
	if _, err := parseModel(in.Model); err != nil {
		return err
	}
	if in.Deadline < 0 {
		return fmt.Errorf("%w: deadline %v must not be negative", ErrInvalidInput, in.Deadline)
	}
	if !checkLaunchKey(in.IdempotencyKey) {
		return fmt.Errorf("%w: idempotency key %s: at most %d printable characters, no spaces", ErrInvalidInput, echo(in.IdempotencyKey), MaxLaunchKeyChars)
	}
	if !in.Isolation.valid() {
		return fmt.Errorf("%w: isolation %s: want none or worktree", ErrInvalidInput, echo(string(in.Isolation)))
	}
	if !in.ForkMode.valid() {
		return fmt.Errorf("%w: fork mode %s: want digest or native", ErrInvalidInput, echo(string(in.ForkMode)))
	}
	return in.Budget.check("task")
}

// launchPlan is what a launch learned from the server before recording its task: the parent
// session, where the task counts, and its session's permission rules (those of the deepest
// level are added by the start, which knows the fork mode).
type launchPlan struct {
	parent   *opencode.Session
	at       placement
	rules    []opencode.PermissionRule
	deepest  bool // the task is at the deepest level of WithNestingDepth
	isolated bool // it works in a worktree of its own
}

// planLaunch checks the agent against the caller's directory's agents (GET /agent) and the
// caller's rights to launch it, and works out the task session's permission rules.
func (m *Manager) planLaunch(ctx context.Context, in LaunchInput, parent *opencode.Session, at placement, isolated bool) (launchPlan, error) {
	agent, err := m.agents.check(ctx, m.client, m.bg.clock, parent.Directory, in.Agent)
	if err != nil {
		return launchPlan{}, err
	}
	var callerAgent *opencode.Agent
	if in.Caller.Agent != "" {
		if a, ok, err := m.agents.get(ctx, m.client, m.bg.clock, parent.Directory, in.Caller.Agent); err != nil {
			return launchPlan{}, err
		} else if ok {
			callerAgent = &a
		}
	}
	if err := checkTaskAgent(callerAgent, parent.Permission, agent); err != nil {
		return launchPlan{}, err
	}
	plan := launchPlan{parent: parent, at: at, deepest: at.depth >= m.cfg.nestingDepth, isolated: isolated}
	if callerAgent != nil {
		plan.rules = inheritedRules(callerAgent.Permission, parent.Permission)
	} else {
		plan.rules = inheritedRules(nil, parent.Permission)
	}
	return plan, nil
}

// createChild creates the task's session in dir with the permission rules rules
// (POST /session?directory=).
func (m *Manager) createChild(ctx context.Context, in LaunchInput, dir string, rules []opencode.PermissionRule) (*opencode.Session, error) {
	title := "Background: " + in.Description
	if in.Fork {
		title = "Background (forked): " + in.Description
	}
	m.mirrors.awaitStream(ctx, m.bg.quickTimeout(), m.bg.stopc)
	sess, err := m.client.CreateSession(ctx, opencode.CreateSessionRequest{
		Directory: dir, ParentID: in.Caller.SessionID, Title: title, Permission: rules,
	})
	if err != nil {
		return nil, fmt.Errorf("asyncagents: create task session: %w", err)
	}
	return sess, nil
}

// register records the task of a launch, starting (Task.Starting) and without a session yet,
// in its parent's open batch, and persists it; its reservation becomes its count. It is
// running (holding a slot of its model's concurrency limit, when it has one and a slot is
// free here), or queued: it waits for a slot once its start is done (startTask).
func (m *Manager) register(in LaunchInput, plan launchPlan) (e *entry, err error) {
	status := StatusRunning
	if _, limit := m.cfg.limits.keyOf(in.Model); limit > 0 {
		status = StatusQueued // until slots.take says it may start
	}
	mode := ForkMode("")
	if in.Fork {
		mode = cmp.Or(in.ForkMode, m.cfg.forkMode) // as asked; the start may use a digest instead
	}
	e = &entry{done: make(chan struct{}), isolated: plan.isolated, task: Task{
		ID: newTaskID(m.bg.now()), Starting: true, ParentSessionID: in.Caller.SessionID, ParentMessageID: in.Caller.MessageID,
		ParentAgent: in.Caller.Agent, Directory: plan.parent.Directory, Server: m.hosts.server(), Description: in.Description,
		Prompt: in.Prompt, Agent: in.Agent, Model: in.Model, Status: status,
		Started: m.bg.now(), Forked: in.Fork, ForkMode: mode, Depth: plan.at.depth, AnchorSessionID: anchorOf(in.Caller.SessionID, plan.at.anchor),
		Deadline: cmp.Or(in.Deadline, m.cfg.deadline), Budget: in.Budget.or(m.cfg.taskBudget),
		LaunchKey: in.IdempotencyKey,
	}}
	m.mu.Lock()
	if !m.tasks.add(e) { // an id made twice
		m.mu.Unlock()
		return nil, fmt.Errorf("asyncagents: record the task: the id %s is taken", e.task.ID)
	}
	e.task.BatchID = e.task.ID
	if open, ok := m.tasks.open[in.Caller.SessionID]; ok {
		e.task.BatchID = open // joins the batch of the parent's active tasks
	}
	m.tasks.open[in.Caller.SessionID] = e.task.BatchID
	e.startRun(m.bg.now(), "")
	b := m.tasks.batch(e.task.BatchID)
	b.total++
	b.active++
	if status == StatusQueued && m.slots.takeFree(e) { // else it waits for one once started
		e.task.Status = StatusRunning
	}
	m.changedLocked(e)
	m.mu.Unlock()
	if err := m.persist(e); err != nil {
		// Not stored: a host that stopped now would leave a task no one knows of. It is
		// taken back (its count and slot with it) before anything is made for it.
		var start []*entry
		m.mu.Lock()
		if !e.removed { // a lost lease's save dropped it already
			start = m.removeLocked(e)
		}
		m.mu.Unlock()
		m.startQueued(start)
		if errors.Is(err, ErrTaskLimit) || errors.Is(err, ErrBudget) { // another host's tasks count too
			return e, err
		}
		m.cfg.logger.Error("asyncagents: a launched task could not be recorded; it was not started", "task", e.task.ID, "err", err)
		return e, storeError{"the task could not be recorded", err}
	}
	return e, nil
}

// storeError is a launch's failure to read or write the store: its text, which a model
// reads, says what could not be done without the store's own words (a database's address,
// user and name); the store's error is its cause, and the Manager logs it.
type storeError struct {
	what  string
	cause error
}

func (e storeError) Error() string {
	return "asyncagents: " + e.what + " (the task store failed), so the task was not started; try again later"
}

func (e storeError) Unwrap() error { return e.cause }

// deleteSession deletes a task session that nothing runs in (DELETE /session/{id}) within
// b's request timeout; a failure is logged.
func (b *background) deleteSession(client opencode.Client, id string) {
	ctx, cancel := b.requestCtx()
	defer cancel()
	if err := client.DeleteSession(ctx, id); err != nil {
		b.logger.Warn("asyncagents: delete a task session", "session", id, "err", err)
	}
}

// takeSlot reports whether the run of e, a fork whose context is in its session now, may
// start: it may when it has no concurrency limit, or when a slot of its limit is free (then
// it is running from now); otherwise it is queued until one frees. A task cancelled or
// cleared meanwhile may not.
func (m *Manager) takeSlot(e *entry) bool {
	m.mu.Lock()
	switch {
	case e.stopped():
		m.mu.Unlock()
		return false
	case e.task.Status == StatusRunning:
		m.mu.Unlock()
		return true
	case e.task.Status != StatusQueued || !m.slots.take(e):
		m.mu.Unlock()
		return false
	}
	e.task.Status, e.task.Started = StatusRunning, m.bg.now()
	m.changedLocked(e)
	m.mu.Unlock()
	m.persist(e)
	return true
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

// placement is where a launch counts: anchor is the session whose per-parent cap and tree
// budget it counts under, depth its nesting depth.
type placement struct {
	anchor string
	depth  int
}

// place works out where a launch by caller (its session, as the server gave it) counts. A
// caller the Manager does not know (OpenCode's own subagent, say, or a session its native fork
// started) is attributed through its parentID chain (GET /session/{id} for each step) to the
// nearest session above it that is a task (the launch nests under it) or has tasks (it counts
// there), on this host or another of its store (a session no host of the store is known
// to have as a task or parent yet is looked up in it, HandoffStore.Tasks, so that a task
// another host stored a moment ago counts), so that no session under a task or a parent
// escapes its depth, cap or budget; with none above it, it counts under itself. It returns an error matching ErrNestingDepth when the
// task would nest deeper than WithNestingDepth allows.
func (m *Manager) place(ctx context.Context, caller *opencode.Session) (placement, error) {
	at := placement{anchor: caller.ID, depth: 1}
	for s, hops := caller, 0; ; hops++ {
		m.mu.Lock()
		e, has := m.tasks.inSession(s.ID), m.tasks.reg.Known(s.ID)
		o, other := m.hosts.other(s.ID) // a task another host holds
		m.mu.Unlock()
		if e == nil && !other && !has { // stored by another host since its changes were read?
			var err error
			if o, other, has, err = m.hosts.tree(ctx, s.ID, s.ParentID); err != nil {
				m.cfg.logger.Error("asyncagents: a launch could not read the stored tasks; it was not started", "session", s.ID, "err", err)
				return placement{}, storeError{"the stored tasks could not be read", err}
			}
		}
		if e != nil || other {
			if e != nil {
				o = e.task
			}
			at = placement{anchor: s.ID, depth: max(o.Depth, 1) + 1}
			break
		}
		if has {
			at.anchor = s.ID
			break
		}
		if s.ParentID == "" || hops >= MaxNestingDepth {
			break
		}
		next, err := m.client.GetSession(ctx, s.ParentID)
		if errors.Is(err, opencode.ErrNotFound) {
			break // a parent deleted meanwhile: nothing above counts
		}
		if err != nil {
			return placement{}, fmt.Errorf("asyncagents: read session %s above the caller: %w", s.ParentID, err)
		}
		s = next
	}
	if at.depth > m.cfg.nestingDepth {
		return placement{}, fmt.Errorf("%w: the caller is a task at depth %d, or a session under one, and tasks may nest %d deep", ErrNestingDepth, at.depth-1, m.cfg.nestingDepth)
	}
	return at, nil
}
