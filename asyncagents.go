package asyncagents

import (
	"cmp"
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/asyncagents/asyncagents/manager"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/worktree"
)

// Manager runs background tasks in child sessions of an OpenCode server and tracks them
// until they end. Create one with [New]; it is safe for concurrent use.
//
// A Manager owns its goroutines, and [Manager.Close] stops them and waits. Their number does
// not grow with the number of tasks, but for two short-lived kinds noted below:
//   - one reading the event stream (GET /global/event, reconnected with backoff) and one
//     applying its events;
//   - one status poll ([WithPollInterval]);
//   - the reconcilers of [WithReconcilers], which read the sessions that went idle; while
//     sessions wait with all of them busy, up to 16 times as many (at most 64 in all), which
//     end when the queue is empty; and up to 16 recording the ends of runs decided together;
//   - one notifier, with up to 32 delivery workers (one parent session each), each posting up
//     to 8 of its parent's merged notifications at once (7 goroutines more);
//   - with a [LeaseStore], one renewing and claiming leases, and, with a [HandoffStore], one
//     short-lived goroutine per task being handed over to another host;
//   - with a [SlotStore] and limits, one granting slots;
//   - right after New, one starting the stored queued tasks and one sending the stored
//     follow-ups;
//   - with [WithPermissionPolicy], one short-lived goroutine per permission request being
//     answered.
//
// The package documentation says what a panic in one of them does.
type Manager struct {
	client opencode.Client
	cfg    config

	bg     *background    // the Manager's goroutines
	ops    sync.WaitGroup // operations that may create or change tasks; Close waits for them
	close1 sync.Once

	// mu guards the tasks and the state of the parts that change with them; the parts with
	// a lock of their own say so. The lock order, outermost first:
	//
	//	entry.save.mu (one task's saves) → mu
	//	slots.granting → mu
	//	mu → mirrors.mu, notes.heads.mu, notes.confirms.mu, stream.q.mu, isolation.mu, progress.mu
	//
	// agents.mu is never held with another.
	//
	// No request to the server or the store is made, and no goroutine waited for, with mu
	// held; a Subscription's channel is sent to without blocking.
	mu    sync.Mutex
	tasks taskSet

	recon     reconciling // sessions waiting to be read, and the goroutines that read them
	notes     notifier    // the parents' notifications waiting for delivery
	slots     *slots      // concurrency limits and the per-parent cap
	hosts     hosts       // leases and hand-overs, with several hosts on one store
	stream    *stream     // the server's events
	feed      feed        // the change feed (Subscribe)
	agents    agentCache  // the servers' agent lists (its own lock)
	mirrors   mirrors     // what the event stream carried of each run (its own lock)
	isolation isolation   // the git worktrees of isolated tasks (its own lock)
	keys      launchKeys  // the launches in flight with an idempotency key (its own lock)
	progress  digests     // the progress digests posted to parents (its own lock)
	starts    starts      // the launched tasks being started (its own lock)

	lossGrace time.Duration // lossGrace, or what a test sets (under mu)
	afterPost func()        // nil, or what a test runs between a notification's post and its outcome
}

// New returns a Manager that runs tasks on the OpenCode server behind client (usually an
// [opencode.HTTPClient]), loads the tasks of the store ([WithStore]) and starts its
// goroutines; call [Manager.Close] to stop them. Loaded tasks that were active are checked
// against the server at once. It returns an error matching [ErrInvalidInput] for a nil
// client or a bad option, or the store's Load error.
//
// A client that also has PostMessage (as [opencode.HTTPClient.PostMessage]: post a message
// and return the id the server answers with, without decoding the rest) is used for the
// messages the Manager posts without reply (notifications, a fork's context), whose answers
// echo what was posted; other clients get [opencode.Client.Prompt] for them. A wrapper of an
// HTTPClient that wants its posts seen must then also wrap PostMessage.
func New(client opencode.Client, opts ...Option) (*Manager, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil opencode.Client", ErrInvalidInput)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	m := &Manager{
		client:    client,
		cfg:       cfg,
		bg:        newBackground(&cfg),
		tasks:     newTaskSet(),
		recon:     reconciling{rq: map[*entry]bool{}, wake: make(chan struct{}, 1), ends: make(chan struct{}, endParallel)},
		slots:     newSlots(&cfg),
		mirrors:   mirrors{logs: map[string]*runLog{}, tried: make(chan struct{})},
		isolation: isolation{root: cfg.worktreeRoot, repos: map[string]*worktree.Repo{}, swept: map[string]bool{}, starting: map[string]bool{}, busy: map[string]bool{}},
		lossGrace: lossGrace,
	}
	m.notes = newNotifier(&cfg, m.slots.active)
	m.hosts = newHosts(m)
	m.stream = newStream(m)
	stored, err := cfg.store.Load(m.bg.ctx)
	if err != nil {
		m.bg.stop()
		return nil, fmt.Errorf("asyncagents: load tasks: %w", err)
	}
	_, shared := cfg.store.(LeaseStore)
	start, followUps, interrupted := m.restore(m.acceptRecords(m.bg.ctx, stored, shared))
	if m.slots.shared != nil {
		m.slots.wakeGranter() // for the stored queued tasks
	}
	m.start()
	if repos := worktreeRepos(stored); len(repos) > 0 { // what crashed launches left there goes
		m.bg.spawn("sweeping worktrees", func() {
			for _, dir := range repos {
				ctx, cancel := context.WithTimeout(m.bg.ctx, worktreeSettle)
				if _, err := m.isolation.repo(ctx, dir, m.liveWorktrees); err != nil {
					m.cfg.logger.Warn("asyncagents: open a repository of isolated tasks", "repo", dir, "err", err)
				}
				cancel()
			}
		})
	}
	if len(start) > 0 {
		m.bg.spawn("starting queued tasks", func() { m.startQueued(start) })
	}
	if len(followUps) > 0 {
		m.bg.spawn("sending queued follow-ups", func() {
			for _, e := range followUps {
				m.sendFollowUp(e)
			}
		})
	}
	if len(interrupted) > 0 {
		m.bg.spawn("ending interrupted starts", func() { m.interruptStarts(interrupted) })
	}
	return m, nil
}

// restore takes the stored tasks in, as the last Manager on the store left them: active
// ones are read at once, queued ones wait for a slot in launch order, pending notifications
// are queued oldest first. It returns the queued tasks that fit their limits now (the limits
// may have changed), the ended tasks with follow-ups queued (the last Manager stopped
// before it sent them), and the tasks it left starting (interruptStarts ends them). It runs
// before the Manager's goroutines start.
func (m *Manager) restore(stored []Task) (start, followUps, interrupted []*entry) {
	sort.SliceStable(stored, func(i, j int) bool { return stored[i].Started.Before(stored[j].Started) })
	var pending, owed []noteRef
	created := map[string]time.Time{}
	for _, t := range stored {
		e := m.restoreTask(t)
		if e == nil {
			continue
		}
		for _, n := range t.Notifications {
			switch {
			case n.State == NotificationPending:
				pending = append(pending, noteRef{e: e, key: n.Key})
			case n.State == NotificationDelivered && n.Turn == TurnOwed && m.cfg.notifyPolicy != NotifyNoReply:
				owed = append(owed, noteRef{e: e, key: n.Key})
			default:
				continue
			}
			created[n.Key] = n.Created
		}
		if t.Status.Terminal() && len(t.FollowUps) > 0 {
			followUps = append(followUps, e)
		}
		if t.Starting && !t.Status.Terminal() {
			interrupted = append(interrupted, e)
		}
	}
	for _, refs := range [][]noteRef{pending, owed} {
		sort.SliceStable(refs, func(i, j int) bool { return created[refs[i].key].Before(created[refs[j].key]) })
	}
	for _, ref := range pending { // what the last Manager did not deliver
		ob := m.notes.queue(ref.e.task.ParentSessionID, ref)
		ob.lastEnd = latest(ob.lastEnd, created[ref.key])
	}
	for _, ref := range owed { // the turns it did not ask for
		parent := ref.e.task.ParentSessionID
		ob := m.notes.outbox(parent)
		ob.owe(ref, created[ref.key])
		ob.lastEnd = latest(ob.lastEnd, created[ref.key])
		m.notes.markReady(parent, ob)
	}
	return m.startedLocked(m.slots.startableAll()), followUps, interrupted
}

// interruptStarts ends the tasks a stopped host left starting (restore) in StatusError.
func (m *Manager) interruptStarts(tasks []*entry) {
	for _, e := range tasks {
		m.finish(e, 0, StatusError, "", startInterrupted)
	}
}

// restoreTask records one stored task (nil for a duplicate id), counts it in its batch and
// its limits, and queues it for a read when it is active.
func (m *Manager) restoreTask(t Task) *entry {
	e := &entry{task: t, done: make(chan struct{}), isolated: t.Worktree != nil}
	e.save.stored = true
	if !m.tasks.add(e) {
		return nil
	}
	if t.Status.Terminal() {
		close(e.done)
	}
	b := m.tasks.batch(t.BatchID)
	b.total++
	if !t.Status.Terminal() {
		b.active++
		m.tasks.open[t.ParentSessionID] = t.BatchID
		m.slots.activeOf[t.ParentSessionID]++
	}
	switch {
	case t.Starting: // ended by interruptStarts: nothing of it runs
	case t.Status.Active():
		m.recon.add(e, false)
		// Its prompt may have been sent a moment before the host stopped: it is taken for
		// lost only a grace after this start (see prompt.go).
		e.run.sentAt = m.cfg.clock.Now()
		if key, limit := m.cfg.limits.keyOf(t.Model); limit > 0 && t.ResumeCount == 0 {
			m.slots.limitOf[key] = limit
			m.slots.running[key]++
			e.slot = key
		}
	case t.Status == StatusQueued: // in launch order, the stored tasks being sorted by start
		key, limit := m.cfg.limits.keyOf(t.Model)
		m.slots.limitOf[key] = limit
		m.slots.waiting[key] = append(m.slots.waiting[key], e)
	}
	return e
}

// start starts the long-lived goroutines of the Manager's parts.
func (m *Manager) start() {
	m.recon.alive, m.recon.limit = m.cfg.reconcilers, min(reconcileBurst*m.cfg.reconcilers, maxReconcilers)
	m.recon.extra = func() bool {
		if m.bg.stopping() {
			return false
		}
		m.bg.spawn("a reconciler", func() { m.reconcileLoop(false) })
		return true
	}
	m.stream.start()
	m.bg.keep("the status poll", m.pollLoop)
	for range m.cfg.reconcilers {
		m.bg.keep("a reconciler", func() { m.reconcileLoop(true) })
	}
	m.bg.keep("the notifier", m.notifyLoop)
	if m.cfg.digestAfter > 0 {
		m.bg.keep("posting progress digests", m.digestLoop)
	}
	m.hosts.start()
	if m.slots.shared != nil {
		m.bg.keep("granting concurrency slots", m.grantLoop)
	}
}

// Close stops the event subscription, the poller, the reconcilers and the notifier. It
// first waits for operations in flight and for the starts of launched tasks under way (their
// sessions are made and recorded, their prompts sent), then stops the goroutines and waits
// for them, or until ctx ends (returning ctx.Err(); they still stop). Notifications still queued get one delivery attempt. Tasks keep running on
// the server and their records stay in the store: a new Manager on a store that outlives the
// process (a [FileStore], or a shared store such as pgstore's) picks them up; the default
// [MemoryStore] goes with the process. Close is idempotent; afterwards every method returns
// [ErrClosed].
func (m *Manager) Close(ctx context.Context) error {
	m.close1.Do(func() {
		m.mu.Lock()
		m.tasks.closed = true
		for s := range m.feed.subs {
			m.feed.end(s, ErrClosed)
		}
		m.mu.Unlock()
	})
	err := waitCtx(ctx, &m.ops)
	if err == nil { // the starts under way end first: their saves need the store open
		err = waitCtx(ctx, &m.starts.wg)
	}
	m.bg.stop()
	if err != nil {
		return err
	}
	return waitCtx(ctx, &m.bg.wg)
}

// begin registers an operation that Close waits for; it fails with ErrClosed after Close.
// The caller calls m.ops.Done.
func (m *Manager) begin() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.tasks.closed {
		return ErrClosed
	}
	m.ops.Add(1)
	return nil
}

// Get returns any task of the Manager, whatever its parent: id is the full task id, the id
// without its prefix, or the id of the task's session (prefixes resolve only among a
// caller's tasks, in the caller's operations). It returns [ErrTaskNotFound] for an unknown id
// and [ErrClosed] after Close.
func (m *Manager) Get(id string) (Task, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.tasks.closed {
		return Task{}, ErrClosed
	}
	for _, full := range manager.Candidates(id) {
		if e := cmp.Or(m.tasks.byID[full], m.tasks.bySession[full]); e != nil {
			return m.viewLocked(e), nil
		}
	}
	return Task{}, fmt.Errorf("%w: %s", ErrTaskNotFound, echo(id))
}

// ToolPrefix returns the prefix of the Manager's tool names ([WithToolPrefix]).
func (m *Manager) ToolPrefix() string { return m.cfg.toolPrefix }
