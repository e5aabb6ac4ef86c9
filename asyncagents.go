package asyncagents

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/asyncagents/asyncagents/manager"
	"github.com/asyncagents/asyncagents/opencode"
)

// Manager runs background tasks in child sessions of an OpenCode server and tracks them
// until they end. Create one with [New]; it is safe for concurrent use.
//
// A Manager owns a bounded number of goroutines, whatever the number of tasks: one event
// subscription (GET /global/event, reconnected with backoff) and one goroutine applying its
// events, one status poller, the reconcilers of [WithReconcilers] (while sessions wait to be
// read with all of them busy, up to 16 times as many, at most 64, which end when the queue is
// empty; and up to 16 more, in all, recording the ends of runs decided together) and one notifier with up to 32 delivery workers, each posting up to 8 of one
// parent's notifications at once (with 7 goroutines of its own); with a [LeaseStore], one
// renewing and claiming leases (and, with a [HandoffStore], one short-lived goroutine per
// task it hands over to another host), and with a [SlotStore] and limits, one granting slots; right
// after New, one starting the stored queued tasks and one sending the stored follow-ups; with
// [WithPermissionPolicy], one short-lived goroutine per request it answers. [Manager.Close] stops them and waits. The
// package documentation says what a panic in one of them does.
type Manager struct {
	client opencode.Client
	cfg    config

	ctx    context.Context // cancelled by Close: ends background I/O
	cancel context.CancelFunc
	stop   chan struct{}
	wg     sync.WaitGroup // the Manager's goroutines (see loops.go)
	ops    sync.WaitGroup // operations that may create or change tasks; Close waits for them
	close1 sync.Once
	stop1  sync.Once

	// mu guards the task records and the state of the parts that change with them; the
	// parts that have a lock of their own say so.
	mu      sync.Mutex
	closed  bool
	tasks   map[string]*entry
	reg     manager.Registry
	batches map[string]*batch // by batch id
	open    map[string]string // parent → its batch with active tasks
	cleared map[string]Usage  // parent → what its tasks removed since New had used

	recon   reconciling // sessions waiting to be read, and the goroutines that read them
	notes   notifier    // the parents' notifications waiting for delivery
	slots   slots       // concurrency limits and the per-parent cap
	feed    feed        // the change feed (Subscribe)
	agents  agentCache  // the servers' agent lists (its own lock)
	mirrors mirrors     // what the event stream carried of each run (its own lock)

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
		stop:      make(chan struct{}),
		tasks:     map[string]*entry{},
		batches:   map[string]*batch{},
		open:      map[string]string{},
		cleared:   map[string]Usage{},
		recon:     reconciling{rq: map[string]bool{}, wake: make(chan struct{}, 1), ends: make(chan struct{}, endParallel)},
		notes:     notifier{outboxes: map[string]*outbox{}, wake: make(chan struct{}, 1), confirms: confirmations{byID: map[string]posted{}, parents: map[string]int{}}},
		slots:     slots{running: map[string]int{}, waiting: map[string][]*entry{}, limitOf: map[string]int{}, activeOf: map[string]int{}, wake: make(chan struct{}, 1)},
		mirrors:   mirrors{logs: map[string]*runLog{}, tried: make(chan struct{})},
		lossGrace: lossGrace,
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	stored, err := cfg.store.Load(m.ctx)
	if err != nil {
		m.cancel()
		return nil, fmt.Errorf("asyncagents: load tasks: %w", err)
	}
	start, followUps := m.restore(stored)
	if m.slotStore() != nil {
		m.wakeGranterLocked() // for the stored queued tasks
	}
	m.start()
	if len(start) > 0 {
		m.spawn("starting queued tasks", func() { m.startQueued(start) })
	}
	if len(followUps) > 0 {
		m.spawn("sending queued follow-ups", func() {
			for _, e := range followUps {
				m.sendFollowUp(e)
			}
		})
	}
	return m, nil
}

// restore takes the stored tasks in, as the last Manager on the store left them: active
// ones are read at once, queued ones wait for a slot in launch order, pending notifications
// are queued oldest first. It returns the queued tasks that fit their limits now (the limits
// may have changed), and the ended tasks with follow-ups queued (the last Manager stopped
// before it sent them). It runs before the Manager's goroutines start.
func (m *Manager) restore(stored []Task) (start, followUps []*entry) {
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
				pending = append(pending, noteRef{task: t.ID, key: n.Key})
			case n.State == NotificationDelivered && n.Turn == TurnOwed && m.cfg.notifyPolicy != NotifyNoReply:
				owed = append(owed, noteRef{task: t.ID, key: n.Key})
			default:
				continue
			}
			created[n.Key] = n.Created
		}
		if t.Status.Terminal() && len(t.FollowUps) > 0 {
			followUps = append(followUps, e)
		}
	}
	for _, refs := range [][]noteRef{pending, owed} {
		sort.SliceStable(refs, func(i, j int) bool { return created[refs[i].key].Before(created[refs[j].key]) })
	}
	for _, ref := range pending { // what the last Manager did not deliver
		ob := m.queueLocked(m.tasks[ref.task].task.ParentSessionID, ref)
		ob.lastEnd = latest(ob.lastEnd, created[ref.key])
	}
	for _, ref := range owed { // the turns it did not ask for
		parent := m.tasks[ref.task].task.ParentSessionID
		ob := m.outboxLocked(parent)
		m.oweTurnLocked(ob, ref, created[ref.key])
		ob.lastEnd = latest(ob.lastEnd, created[ref.key])
		m.readyLocked(parent, ob)
	}
	for key := range m.slots.waiting {
		start = append(start, m.startableLocked(key)...)
	}
	return start, followUps
}

// restoreTask records one stored task (nil for a duplicate id), counts it in its batch and
// its limits, and queues it for a read when it is active.
func (m *Manager) restoreTask(t Task) *entry {
	if !m.reg.Add(t.ParentSessionID, t.ID) {
		return nil
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
		m.slots.activeOf[t.ParentSessionID]++
	}
	switch {
	case t.Status.Active():
		m.recon.rq[t.ID] = false
		m.recon.order = append(m.recon.order, t.ID)
		// Its prompt may have been sent a moment before the host stopped: it is taken for
		// lost only a grace after this start (see prompt.go).
		e.sentAt = m.cfg.clock.Now()
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
		for s := range m.feed.subs {
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

// ToolPrefix returns the prefix of the Manager's tool names ([WithToolPrefix]).
func (m *Manager) ToolPrefix() string { return m.cfg.toolPrefix }

// isClosed reports whether c is closed.
func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// requestCtx bounds one request of the Manager's own goroutines by the request timeout, so
// a server that accepts a connection and never answers cannot hold a goroutine.
func (m *Manager) requestCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(m.ctx, m.cfg.requestTimeout)
}

// quickTimeout bounds a request the server answers at once: the status poll, the list of
// permission requests and the opening of the event stream.
func (m *Manager) quickTimeout() time.Duration { return min(m.cfg.requestTimeout, QuickRequestTimeout) }

// quickCtx is requestCtx for a request the server answers at once.
func (m *Manager) quickCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(m.ctx, m.quickTimeout())
}
