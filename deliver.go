package asyncagents

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/asyncagents/asyncagents/opencode"
)

// Delivery: parents are served in parallel, at most notifyWorkers at a time, each attempt
// bounded by the request timeout; the notifications of one parent go one at a time, oldest
// first. A worker delivers a parent's notifications one after the other while they are due;
// after notifyBatch of them it gives its place to a parent that waits for a worker, if any. A
// failed attempt is retried after a delay doubling from notifyBackoffMin to notifyBackoffMax
// until the horizon (WithNotifyHorizon) has passed since the run ended.
const (
	notifyWorkers    = 32
	notifyBatch      = 16
	notifyBackoffMin = 500 * time.Millisecond
	notifyBackoffMax = time.Minute
	flushTimeout     = 5 * time.Second
)

// notifier is the part of the Manager that delivers the parents' notifications: an outbox per
// parent, the parents whose next notification is due (ready, in the order they became due),
// the notifier's wake-up, and the notifications waiting to be confirmed (their own lock).
// Under Manager.mu but confirms.
type notifier struct {
	outboxes map[string]*outbox // parent → pending notifications
	ready    []string           // parents whose next notification is due, waiting for a worker
	retryAt  time.Time          // the earliest retry of a parent waiting after a failure; zero: none
	wake     chan struct{}
	confirms confirmations
	heads    heads // the parents' newest message ids (heads.go)
}

// outbox holds one parent's pending notifications, oldest first.
type outbox struct {
	queue    []noteRef
	inFlight bool      // a worker delivers them
	ready    bool      // in Manager.nready: due, waiting for a worker
	next     time.Time // no attempt before this
}

// notifyLoop hands the parents whose next notification is due to delivery goroutines, in the
// order they became due, at most notifyWorkers at a time. On Close it waits for them and
// gives every parent's pending notifications one more attempt; what is still pending stays in
// the store.
func (m *Manager) notifyLoop() {
	var workers sync.WaitGroup
	sem := make(chan struct{}, notifyWorkers)
	for {
		m.mu.Lock()
		wait := m.retryDueLocked()
		start := m.takeReadyLocked(cap(sem) - len(sem))
		m.mu.Unlock()
		for _, parent := range start {
			sem <- struct{}{}
			workers.Add(1)
			go m.notifyWorker(parent, sem, &workers)
		}
		select {
		case <-m.stop:
			workers.Wait()
			m.flushNotifications()
			return
		case <-m.notes.wake:
		case <-m.cfg.clock.After(wait):
		}
	}
}

// retryDueLocked readies the parents whose retry has come, when the earliest has, and returns
// how long the notifier may sleep: until the next retry, or an hour.
func (m *Manager) retryDueLocked() time.Duration {
	n, now := &m.notes, m.now()
	if !n.retryAt.IsZero() && !n.retryAt.After(now) {
		n.retryAt = time.Time{}
		for parent, ob := range n.outboxes {
			switch {
			case ob.inFlight || ob.ready || len(ob.queue) == 0:
			case !ob.next.After(now):
				m.readyLocked(parent, ob)
			case n.retryAt.IsZero() || ob.next.Before(n.retryAt):
				n.retryAt = ob.next
			}
		}
	}
	if n.retryAt.IsZero() {
		return time.Hour
	}
	return n.retryAt.Sub(now)
}

// takeReadyLocked takes up to free parents whose next notification is due, in the order they
// became due, and marks their outboxes in flight.
func (m *Manager) takeReadyLocked(free int) []string {
	n := &m.notes
	var start []string
	for len(n.ready) > 0 && len(start) < free {
		parent := n.ready[0]
		n.ready[0] = ""
		n.ready = n.ready[1:]
		ob := n.outboxes[parent]
		ob.ready, ob.inFlight = false, true
		start = append(start, parent)
	}
	if len(n.ready) == 0 {
		n.ready = nil // let a burst's backing array go
	}
	return start
}

// notifyWorker delivers parent's due notifications, records when its next retry is, and
// wakes the notifier; it holds a place of sem, which it gives back.
func (m *Manager) notifyWorker(parent string, sem chan struct{}, workers *sync.WaitGroup) {
	defer workers.Done()
	defer func() { <-sem }()
	defer m.recoverAndLog("a notification worker")
	next := m.drain(m.ctx, parent)
	m.mu.Lock()
	if n := &m.notes; !next.IsZero() && (n.retryAt.IsZero() || next.Before(n.retryAt)) {
		n.retryAt = next
	}
	m.mu.Unlock()
	select {
	case m.notes.wake <- struct{}{}:
	default:
	}
}

// drain delivers parent's due notifications, oldest first, for the worker that has the
// parent (its outbox is in flight), and gives the parent up: when its queue is empty, when it
// must wait for a retry (returning when), when the Manager closes, or after notifyBatch
// notifications while another parent waits for a worker.
func (m *Manager) drain(ctx context.Context, parent string) (retry time.Time) {
	for n := 1; ; n++ {
		m.deliverNext(ctx, parent)
		m.mu.Lock()
		ob := m.notes.outboxes[parent]
		switch {
		case len(ob.queue) == 0:
			ob.inFlight = false
			delete(m.notes.outboxes, parent)
			m.waveOverLocked(parent)
		case ob.next.After(m.now()):
			ob.inFlight = false
			retry = ob.next
		case ctx.Err() != nil:
			ob.inFlight = false // flushNotifications takes it
		case n >= notifyBatch && len(m.notes.ready) > 0:
			ob.inFlight = false
			m.readyLocked(parent, ob)
		default:
			m.mu.Unlock()
			continue
		}
		m.mu.Unlock()
		return retry
	}
}

// flushNotifications gives each parent's pending notifications, in order, one attempt.
func (m *Manager) flushNotifications() {
	ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	m.mu.Lock()
	parents := make([]string, 0, len(m.notes.outboxes))
	for p, ob := range m.notes.outboxes {
		if len(ob.queue) > 0 {
			ob.next = time.Time{}
			parents = append(parents, p)
		}
	}
	m.mu.Unlock()
	for _, p := range parents {
		for ctx.Err() == nil && m.deliverNext(ctx, p) {
		}
	}
}

// deliverNext makes one attempt at parent's oldest pending notification and reports
// whether it is done with it (delivered, failed or gone). The caller has the parent: no
// other goroutine delivers its notifications meanwhile.
func (m *Manager) deliverNext(ctx context.Context, parent string) (done bool) {
	defer m.recoverAndLog("delivering a notification")
	m.mu.Lock()
	ob := m.notes.outboxes[parent]
	if ob == nil || len(ob.queue) == 0 {
		m.mu.Unlock()
		return false
	}
	ref := ob.queue[0]
	e := m.tasks[ref.task]
	var note *Notification
	if e != nil {
		note = noteLocked(e, ref.key)
	}
	if note == nil || note.State != NotificationPending { // cleared meanwhile
		ob.pop()
		m.mu.Unlock()
		return true
	}
	n, agent := *note, e.task.ParentAgent
	m.mu.Unlock()

	confirmed, err := m.attemptSafely(ctx, e, parent, agent, n)

	m.mu.Lock()
	defer func() {
		m.changedLocked(e)
		m.mu.Unlock()
		m.persist(e)
	}()
	note = noteLocked(e, ref.key)
	if note == nil || e.removed {
		ob.pop()
		return true
	}
	now := m.now()
	note.Attempts++
	switch {
	case err == nil:
		note.State, note.Delivered, note.Error, note.Next = NotificationDelivered, now, "", time.Time{}
		if !confirmed {
			m.awaitPosted(note.MessageID, posted{parent: parent, task: e.task.ID, key: note.Key, at: now})
		}
	case errors.Is(err, opencode.ErrNotFound):
		note.State, note.Error = NotificationFailed, "the parent session no longer exists"
		m.cfg.logger.Error("asyncagents: notification not delivered: the parent session no longer exists", "key", note.Key)
	case now.Sub(note.Created) >= m.cfg.notifyHorizon:
		note.State, note.Error = NotificationFailed, err.Error()
		m.cfg.logger.Error("asyncagents: notification not delivered; giving up", "key", note.Key,
			"attempts", note.Attempts, "horizon", m.cfg.notifyHorizon, "err", err)
	default:
		note.Error = err.Error()
		d := notifyBackoffMin << min(max(note.Attempts-1, 0), 16)
		note.Next = now.Add(min(d, notifyBackoffMax))
		ob.next = note.Next
		m.cfg.logger.Warn("asyncagents: notification failed, retrying", "key", note.Key, "attempt", note.Attempts, "next", note.Next, "err", err)
		return false
	}
	ob.pop()
	ob.next = time.Time{}
	return true
}

// pop drops the oldest notification of the queue.
func (ob *outbox) pop() {
	ob.queue[0] = noteRef{}
	ob.queue = ob.queue[1:]
	if len(ob.queue) == 0 {
		ob.queue = nil // let a burst's backing array go
	}
}

// attemptSafely makes one attempt, bounded by twice the request timeout (a lookup or two,
// then the post). A panic (in the Client or the Store) is logged and counts as a failed
// attempt, retried like any other.
func (m *Manager) attemptSafely(ctx context.Context, e *entry, parent, agent string, n Notification) (confirmed bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			m.cfg.logger.Error("asyncagents: panic delivering a notification", "key", n.Key, "panic", r, "stack", string(debug.Stack()))
			confirmed, err = false, fmt.Errorf("asyncagents: panic delivering a notification: %v", r)
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, 2*m.cfg.requestTimeout)
	defer cancel()
	return m.attempt(ctx, e, parent, agent, n)
}

// attempt delivers n unless an earlier attempt already did: a notification that was posted
// before (Attempts > 0) is looked up by its message id first. confirmed reports that the
// server has shown the message (found, or answered with it); a prompt_async that was only
// acknowledged is not.
func (m *Manager) attempt(ctx context.Context, e *entry, parent, agent string, n Notification) (confirmed bool, err error) {
	if n.MessageID != "" { // posted before: did it land?
		_, err := m.client.Message(ctx, parent, n.MessageID)
		if err == nil {
			return true, nil // it landed; the answer was lost
		}
		if !errors.Is(err, opencode.ErrNotFound) {
			return false, fmt.Errorf("asyncagents: check notification %s: %w", n.MessageID, err)
		}
		if _, err := m.client.GetSession(ctx, parent); err != nil {
			return false, err // NotFound here: the parent is gone
		}
	}
	after, err := m.newestBefore(ctx, parent)
	if err != nil {
		return false, err
	}
	id := opencode.NewMessageID(m.now(), after)
	m.notes.heads.raise(parent, id, 0)
	// Record the id before posting: if the answer is lost, or the host stops, the next
	// attempt finds the message by it.
	m.mu.Lock()
	if note := noteLocked(e, n.Key); note != nil {
		note.MessageID = id
		m.changedLocked(e)
	}
	m.mu.Unlock()
	m.persist(e)

	req := opencode.PromptRequest{
		MessageID: id, Agent: agent,
		Parts: []opencode.TextPartInput{opencode.NewText(n.Visible), opencode.NewSyntheticText(n.Hidden)},
	}
	if m.cfg.notifyNoReply {
		req.NoReply = true
		_, err = m.client.Prompt(ctx, parent, req)
		return err == nil, err
	}
	return false, m.client.PromptAsync(ctx, parent, req)
}
