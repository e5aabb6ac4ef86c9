package asyncagents

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/asyncagents/asyncagents/fork"
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
// (the caller has [WithMaxActivePerParent] active tasks), [ErrBudget] (the caller's tasks,
// or those of a session above it, used [WithTreeBudget]), [ErrUnknownAgent] (the message
// names the known agents), [ErrClosed]. It reads the caller session (GET /session/{id}) and
// checks the agent against its directory's (GET /agent?directory=). A launch right after
// [New] then waits until the Manager's first attempt to open the event stream is over (at most
// [QuickRequestTimeout]), so that the stream follows the task's run from its start. Then it
// creates the child session in the caller's directory (POST /session?directory=, with the caller's
// session as parentID, the title "Background: <description>" or
// "Background (forked): <description>", and a rule denying the LLM tools at the deepest
// level of [WithNestingDepth]; a native fork ([ForkNative]) is instead OpenCode's copy of
// the caller, POST /session/{id}/fork?directory=); for a fork it reads the caller's messages newest first
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
	if err := in.check(); err != nil {
		return Task{}, err
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
	err = m.overBudgetLocked(in.Caller.SessionID)
	if err == nil {
		err = m.slots.reserve(in.Caller.SessionID)
	}
	m.mu.Unlock()
	if err != nil {
		return Task{}, err
	}
	var e *entry
	defer func() {
		if e == nil { // the launch failed before its task counted
			m.mu.Lock()
			m.slots.unreserve(in.Caller.SessionID)
			m.mu.Unlock()
		}
	}()
	plan, err := m.planLaunch(ctx, in)
	if err != nil {
		return Task{}, err
	}
	var sess *opencode.Session
	if plan.mode == ForkNative {
		sess, plan.baseline, err = m.forkChild(ctx, in, plan.parent.Directory)
	} else {
		sess, err = m.createChild(ctx, in, plan.parent.Directory, depth)
	}
	if err != nil {
		return Task{}, err
	}
	start := false
	if e, start, err = m.register(in, sess, plan, depth); err != nil {
		return Task{}, err
	}
	if plan.injection != "" {
		if err := m.injectContext(ctx, sess.ID, e.run.baseline, in.Agent, plan.injection); err != nil {
			return m.failLaunch(e, 0, fmt.Errorf("asyncagents: inject parent context: %w", err))
		}
		start = m.takeSlot(e) // the context is there: the run may take its slot now
	}
	if !start {
		if m.slots.shared != nil { // the store may grant it a slot at once
			m.startQueued(m.slots.grant(ctx, &m.mu, m.cfg.logger, m.startedLocked))
		}
		return m.snapshot(e), nil // queued: it starts when a slot frees (or was cancelled meanwhile)
	}
	if err := m.sendPrompt(ctx, e, 0); err != nil {
		return m.failLaunch(e, 0, fmt.Errorf("asyncagents: send prompt: %w", err))
	}
	return m.snapshot(e), nil
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
	if !in.ForkMode.valid() {
		return fmt.Errorf("%w: fork mode %s: want digest or native", ErrInvalidInput, echo(string(in.ForkMode)))
	}
	return in.Budget.check("task")
}

// launchPlan is what a launch learned from the server before creating anything: the parent
// session and, for a fork, the context to inject.
type launchPlan struct {
	parent    *opencode.Session
	injection string
	stats     *fork.Stats
	mode      ForkMode // for a fork: the mode used
	baseline  string   // a native fork's newest copied message
}

// planLaunch reads the caller session (GET /session/{id}), checks the agent against its
// directory's agents, and for a fork runs the pipeline on the caller's messages, newest first,
// only as far back as the child's context reaches.
func (m *Manager) planLaunch(ctx context.Context, in LaunchInput) (launchPlan, error) {
	parent, err := m.client.GetSession(ctx, in.Caller.SessionID)
	if err != nil {
		return launchPlan{}, callerErr(in.Caller.SessionID, err)
	}
	if err := m.agents.check(ctx, m.client, m.bg.clock, parent.Directory, in.Agent); err != nil {
		return launchPlan{}, err
	}
	plan := launchPlan{parent: parent}
	if in.Fork {
		r, err := m.cfg.pipeline.RunPages(ctx, fork.SessionPages(m.client, in.Caller.SessionID))
		if err != nil {
			return launchPlan{}, callerErr(in.Caller.SessionID, err)
		}
		plan.injection, plan.stats, plan.mode = r.Injection(), &r.Stats, ForkDigest
		if cmp.Or(in.ForkMode, m.cfg.forkMode) == ForkNative && native(r.Stats) {
			plan.injection, plan.mode = "", ForkNative
		}
	}
	return plan, nil
}

// createChild creates the task's session in dir (POST /session?directory=).
func (m *Manager) createChild(ctx context.Context, in LaunchInput, dir string, depth int) (*opencode.Session, error) {
	title := "Background: " + in.Description
	if in.Fork {
		title = "Background (forked): " + in.Description
	}
	m.mirrors.awaitStream(ctx, m.bg.quickTimeout(), m.bg.stopc)
	sess, err := m.client.CreateSession(ctx, opencode.CreateSessionRequest{
		Directory: dir, ParentID: in.Caller.SessionID, Title: title, Permission: m.childRules(depth),
	})
	if err != nil {
		return nil, fmt.Errorf("asyncagents: create task session: %w", err)
	}
	return sess, nil
}

// register records the task of a launch in session sess, in its parent's open batch, with
// the message ids of its context (for a fork) and prompt, and persists it; its reservation
// becomes its count. It is running, unless its concurrency limit is full: then it is queued
// and starts when a slot frees. A fork is queued until its context is in its session
// (takeSlot). start reports whether Launch sends the prompt now.
func (m *Manager) register(in LaunchInput, sess *opencode.Session, plan launchPlan, depth int) (e *entry, start bool, err error) {
	status := StatusRunning
	if _, limit := m.cfg.limits.keyOf(in.Model); limit > 0 {
		status = StatusQueued // until slots.take says it may start
	}
	e = &entry{done: make(chan struct{}), task: Task{
		ID: sess.ID, ParentSessionID: in.Caller.SessionID, ParentMessageID: in.Caller.MessageID,
		ParentAgent: in.Caller.Agent, Directory: sess.Directory, Server: m.hosts.server(), Description: in.Description,
		Prompt: in.Prompt, Agent: in.Agent, Model: in.Model, Status: status,
		Started: m.bg.now(), Forked: in.Fork, ForkMode: plan.mode, ForkStats: plan.stats, Depth: depth,
		Deadline: cmp.Or(in.Deadline, m.cfg.deadline), Budget: in.Budget.or(m.cfg.taskBudget),
	}}
	m.mu.Lock()
	if !m.tasks.reg.Add(in.Caller.SessionID, sess.ID) { // the server handed out an id twice
		m.mu.Unlock()
		return nil, false, fmt.Errorf("asyncagents: create task session: the server returned the existing session %s", sess.ID)
	}
	e.task.BatchID = sess.ID
	if open, ok := m.tasks.open[in.Caller.SessionID]; ok {
		e.task.BatchID = open // joins the batch of the parent's active tasks
	}
	m.tasks.open[in.Caller.SessionID] = e.task.BatchID
	baseline := ""
	switch {
	case plan.injection != "":
		baseline = opencode.NewMessageID(m.bg.now(), "") // the context's message
	case plan.mode == ForkNative:
		baseline = plan.baseline // the caller's messages, copied
	}
	e.startRun(m.bg.now(), baseline)
	b := m.tasks.batch(e.task.BatchID)
	b.total++
	b.active++
	m.tasks.byID[sess.ID] = e
	start = status == StatusRunning
	if !start && plan.injection == "" && m.slots.take(e) { // else it waits in the queue
		e.task.Status, start = StatusRunning, true
	}
	m.mirrors.start(e)
	m.changedLocked(e)
	m.mu.Unlock()
	m.persist(e)
	return e, start, nil
}

// takeSlot reports whether the run of e, a fork whose context is in its session now, may
// start: it may when it has no concurrency limit, or when a slot of its limit is free (then
// it is running from now); otherwise it is queued until one frees. A task cancelled or
// cleared meanwhile may not.
func (m *Manager) takeSlot(e *entry) bool {
	m.mu.Lock()
	switch {
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

// depth returns the depth of a task launched for the caller session, or ErrNestingDepth.
func (m *Manager) depth(caller string) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := 1
	if p := m.tasks.byID[caller]; p != nil {
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
