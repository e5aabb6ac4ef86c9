package asyncagents

import (
	"cmp"
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/asyncagents/asyncagents/fork"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/cenkalti/backoff/v5"
)

// A launch records its task and returns; the task's start is the rest of the work, done by
// the Manager after it, in launch order for each parent (starts):
//
//   - for a fork, the pipeline on the caller's messages up to the launching message, and the
//     choice between the digest and OpenCode's native fork;
//   - for an isolated task, its git worktree;
//   - the task's session: created (POST /session) or OpenCode's copy of the caller
//     (POST /session/{id}/fork), recorded as Task.SessionID;
//   - for a digest, the context posted to the session without reply;
//   - the prompt, once the task holds a slot of its concurrency limit.
//
// Task.Starting is set until then. A store that fails to record the start is tried again
// until the start's time runs out (persistStart). A failure ends the task in StatusError with its reason,
// and its parent is notified as for any failed run. A task cancelled or cleared meanwhile
// stops its start: what was made for it (its session, its worktree) is deleted. Close waits
// for the starts under way (each bounded by startTimeout); a host that stops without Close
// leaves the task starting in its store, and the next Manager that takes it in ends it in
// StatusError, saying so (restore).

// startInterrupted is the error of a task whose start a stopped host left undone.
const startInterrupted = "the host stopped while the task was starting; launch it again"

// startJob is the start of a launched task.
type startJob struct {
	e    *entry
	in   LaunchInput
	plan launchPlan
}

// starts queues the starts of each parent's tasks; one goroutine per parent with starts
// queued works through them in order.
type starts struct {
	mu     sync.Mutex
	queues map[string][]startJob // by parent; present while its goroutine runs
	wg     sync.WaitGroup        // the goroutines; Close waits for them before it stops the rest
}

// enqueue queues j behind its parent's earlier starts, and starts the parent's goroutine
// when it has none.
func (s *starts) enqueue(m *Manager, j startJob) {
	parent := j.in.Caller.SessionID
	s.mu.Lock()
	if s.queues == nil {
		s.queues = map[string][]startJob{}
	}
	q, running := s.queues[parent]
	s.queues[parent] = append(q, j)
	s.mu.Unlock()
	if !running {
		s.wg.Add(1)
		m.bg.spawn("starting tasks", func() {
			defer s.wg.Done()
			m.runStarts(parent)
		})
	}
}

// runStarts starts parent's queued tasks, in order, until none is left.
func (m *Manager) runStarts(parent string) {
	for {
		m.starts.mu.Lock()
		q := m.starts.queues[parent]
		if len(q) == 0 {
			delete(m.starts.queues, parent)
			m.starts.mu.Unlock()
			return
		}
		j := q[0]
		m.starts.queues[parent] = q[1:]
		m.starts.mu.Unlock()
		m.startTask(j)
	}
}

// startTask does the start of j's task; a panic in it ends the task in StatusError.
func (m *Manager) startTask(j startJob) {
	e := j.e
	defer func() {
		if r := recover(); r != nil {
			m.cfg.logger.Error("asyncagents: panic while starting a task", "task", e.task.ID, "panic", r)
			m.finish(e, 0, StatusError, "", fmt.Sprintf("asyncagents: panic while starting the task: %v\n%s", r, debug.Stack()))
		}
	}()
	// A Close in the middle does not cut the start off (it would leave the task starting for
	// the next Manager to fail): it is bounded by startTimeout alone, and Close waits for it.
	// With several hosts, a task handed over or lost meanwhile stops its start (stopped): the
	// host that took it ends it, and the session this start made for it is deleted.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(m.bg.ctx), m.startTimeout())
	defer cancel()
	if ok, err := m.prepare(ctx, j); err != nil {
		m.finish(e, 0, StatusError, "", err.Error())
		return
	} else if !ok {
		return // stopped meanwhile
	}
	if !m.takeSlot(e) && m.slots.shared != nil { // the store may grant it a slot at once
		m.startQueued(m.slots.grant(ctx, &m.mu, m.cfg.logger, m.startedLocked))
	}
	// Started: a task running now has its prompt sent here, unless a grant claimed its first
	// send already; a queued one, when a slot frees (startQueued). The first send is claimed
	// with Starting unset, so that a Steer waits for it and nothing sends it twice.
	m.mu.Lock()
	if e.stopped() {
		m.mu.Unlock()
		return
	}
	e.task.Starting = false
	send := e.task.Status == StatusRunning && !e.run.claimed
	e.run.claimed = e.run.claimed || send
	m.changedLocked(e)
	m.mu.Unlock()
	if err := m.persistStart(ctx, e); err != nil {
		// The store still says starting: a prompt sent now would run a task the next host
		// takes for one that never started.
		if !lostLease(err) {
			m.finish(e, 0, StatusError, "", "asyncagents: the task's start could not be recorded (the task store failed); launch it again")
		}
		return
	}
	if !send {
		return
	}
	if err := m.sendPrompt(ctx, e, 0); err != nil && !lostLease(err) {
		m.failLaunch(e, 0, fmt.Errorf("asyncagents: send prompt: %w", err))
	}
}

// startTimeout bounds a task's start: its requests, and its pipeline's reads of the parent.
func (m *Manager) startTimeout() time.Duration { return 4 * m.cfg.requestTimeout }

// stopped reports whether e's task was cancelled, cleared or handed over, so that its start
// goes no further (under Manager.mu).
func (e *entry) stopped() bool {
	return e.removed || e.hold.lost || e.task.Status.Terminal()
}

// prepare makes j's task ready for its prompt: its context chosen, its worktree and session
// made and recorded, a digest posted. It reports false when the task stopped meanwhile, and
// returns the error the task fails with.
func (m *Manager) prepare(ctx context.Context, j startJob) (bool, error) {
	e, in, plan := j.e, j.in, j.plan
	var (
		injection string
		stats     *fork.Stats
		mode      ForkMode
	)
	if in.Fork {
		r, err := m.cfg.pipeline.RunPages(ctx, cutPages(fork.SessionPages(m.client, in.Caller.SessionID), in.Caller.MessageID))
		if err != nil {
			return false, fmt.Errorf("asyncagents: read the parent's messages: %w", err)
		}
		injection, stats, mode = r.Injection(), &r.Stats, ForkDigest
		// An isolated fork gets the digest: OpenCode 1.18.33 puts a native fork in the parent's
		// directory, whatever the request names, where it would work on the parent's files.
		if cmp.Or(in.ForkMode, m.cfg.forkMode) == ForkNative && native(r.Stats) && !plan.isolated {
			injection, mode = "", ForkNative
		}
	}
	rules := plan.rules
	if plan.deepest {
		rules = append(rules, deepestRules(m.cfg.toolPrefix, mode != ForkNative)...)
	}
	if m.isStopped(e) {
		return false, nil
	}
	dir := plan.parent.Directory
	var wt *Worktree
	if plan.isolated {
		var err error
		if wt, err = m.isolation.isolate(ctx, dir, m.liveWorktrees); err != nil {
			return false, err
		}
		dir = wt.Dir
		defer m.isolation.started(wt.ID) // recorded, or removed, by then
	}
	var (
		sess     *opencode.Session
		baseline string
		err      error
	)
	if mode == ForkNative {
		sess, baseline, err = m.forkChild(ctx, in, dir, rules)
	} else {
		sess, err = m.createChild(ctx, in, dir, rules)
	}
	if err != nil {
		m.isolation.unisolate(m.bg.ctx, wt, m.cfg.logger)
		return false, err
	}
	if injection != "" {
		baseline = opencode.NewMessageID(m.bg.now(), "") // the context's message
	}
	m.mu.Lock()
	if e.stopped() || !m.tasks.setSession(e, sess.ID) {
		m.mu.Unlock()
		m.bg.deleteSession(m.client, sess.ID)
		m.isolation.unisolate(m.bg.ctx, wt, m.cfg.logger)
		return false, nil
	}
	t := &e.task
	t.Directory, t.ForkMode, t.ForkStats, t.Worktree = sess.Directory, mode, stats, wt.clone()
	e.startRun(m.bg.now(), baseline)
	m.mirrors.start(e)
	m.changedLocked(e)
	m.mu.Unlock()
	if err := m.persistStart(ctx, e); lostLease(err) {
		m.bg.deleteSession(m.client, sess.ID) // the host that holds it now ends it
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("asyncagents: record the task's session: %w", err)
	}
	if injection != "" {
		if err := injectContext(ctx, m.client, sess.ID, baseline, in.Agent, injection); err != nil {
			return false, fmt.Errorf("asyncagents: inject parent context: %w", err)
		}
	}
	return true, nil
}

// persistStart is persist for a task's start, which retries a store that fails (after
// 250 ms, doubling to 2 s) until ctx ends: a store outage of a few seconds delays a start
// instead of failing its task. It returns a lost lease at once, and else the store's last
// error.
func (m *Manager) persistStart(ctx context.Context, e *entry) error {
	var last error
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		last = m.persist(e)
		if lostLease(last) {
			return struct{}{}, backoff.Permanent(last)
		}
		return struct{}{}, last
	}, backoff.WithBackOff(newBackoff(250*time.Millisecond, 2*time.Second)), backoff.WithMaxElapsedTime(0))
	if err != nil && last != nil {
		return last
	}
	return err
}

// isStopped is stopped under Manager.mu.
func (m *Manager) isStopped(e *entry) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return e.stopped()
}

// cutPages is next without the messages newer than cut (the launching message, whose
// session's messages are read from the newest), so that a fork is of the caller as it was
// when it launched; "" cuts nothing.
func cutPages(next fork.PageFunc, cut string) fork.PageFunc {
	if cut == "" {
		return next
	}
	return func(ctx context.Context) ([]opencode.Message, bool, error) {
		for {
			page, more, err := next(ctx)
			if err != nil {
				return nil, false, err
			}
			i := 0
			for i < len(page) && page[len(page)-1-i].Info.ID > cut {
				i++
			}
			page = page[:len(page)-i]
			if len(page) > 0 || !more {
				return page, more, nil
			}
		}
	}
}
