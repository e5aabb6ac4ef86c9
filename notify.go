package asyncagents

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/asyncagents/asyncagents/hints"
	"github.com/asyncagents/asyncagents/opencode"
)

// NotificationState is where a parent notification stands.
type NotificationState string

// Notification states.
const (
	NotificationPending   NotificationState = "pending"   // waiting for delivery, or retried
	NotificationDelivered NotificationState = "delivered" // the parent session has it
	NotificationFailed    NotificationState = "failed"    // given up; Error says why
)

// Notification is the message a task's parent session receives when a run of the task
// ends: a visible text part and a synthetic hint for the parent's model, posted as one user
// message. Notifications are part of the task's record, so a notification still pending when
// the Manager closes or the host crashes is delivered by the next Manager on the same
// [Store].
//
// Each is posted with a message id chosen by the Manager (MessageID, newer than the parent's
// last message). Before a retry the Manager asks the server for that message
// (GET /session/{parent}/message/{id}): when an earlier attempt landed although its answer
// was lost, it is not posted again, so the parent never gets a notification twice.
type Notification struct {
	// Key names the run end: "<task id>/<resume count>/<status>".
	Key     string            `json:"key"`
	State   NotificationState `json:"state"`
	Visible string            `json:"visible"` // the visible part
	Hidden  string            `json:"hidden"`  // the synthetic hint
	// MessageID is the id of the parent's message that carries the notification, set before
	// it is first posted.
	MessageID string    `json:"messageID,omitempty"`
	Attempts  int       `json:"attempts,omitempty"` // delivery attempts so far
	Created   time.Time `json:"created"`            // when the run ended
	Next      time.Time `json:"next,omitzero"`      // the next attempt, while pending
	Delivered time.Time `json:"delivered,omitzero"` // when the parent got it
	Error     string    `json:"error,omitempty"`    // the last failure
}

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

// outbox holds one parent's pending notifications, oldest first.
type outbox struct {
	queue    []noteRef
	inFlight bool      // a worker delivers them
	ready    bool      // in Manager.nready: due, waiting for a worker
	next     time.Time // no attempt before this
}

type noteRef struct{ task, key string }

// notifyLocked records the notification of e's run end and queues it. m.mu is held.
func (m *Manager) notifyLocked(e *entry) {
	t := &e.task
	n := hints.Notice{Description: t.Description, Duration: t.Duration(m.now()), DisplayID: m.reg.DisplayID(t.ID), Resume: t.ResumeCount}
	switch t.Status {
	case StatusCompleted:
		n.Outcome = hints.Completed
	case StatusError:
		n.Outcome, n.Error = hints.Failed, t.Error
	default:
		n.Outcome = hints.Cancelled
	}
	if b := m.batches[t.BatchID]; b != nil {
		n.Total, n.Running, n.Completed = b.total, b.active, b.total-b.active
	}
	m.queueNoteLocked(e, Notification{
		Key:     t.ID + "/" + strconv.Itoa(t.ResumeCount) + "/" + string(t.Status),
		Visible: hints.Visible(n, m.cfg.debugHints), Hidden: hints.Hidden(n, m.cfg.toolPrefix),
	})
}

// queueNoteLocked adds a pending notification to e's record and queues it for e's parent.
func (m *Manager) queueNoteLocked(e *entry, note Notification) {
	t := &e.task
	note.State, note.Created = NotificationPending, m.now()
	// Keep the undelivered ones and the last delivered one.
	kept := t.Notifications[:0]
	for i, o := range t.Notifications {
		if o.State != NotificationDelivered || i == len(t.Notifications)-1 {
			kept = append(kept, o)
		}
	}
	t.Notifications = append(kept, note)
	m.changedLocked(e)
	m.queueLocked(t.ParentSessionID, noteRef{task: t.ID, key: note.Key})
}

func (m *Manager) queueLocked(parent string, ref noteRef) {
	ob := m.outboxes[parent]
	if ob == nil {
		ob = &outbox{}
		m.outboxes[parent] = ob
	}
	ob.queue = append(ob.queue, ref)
	if ob.next.IsZero() {
		m.readyLocked(parent, ob)
	}
}

// readyLocked queues parent for a worker unless a worker has it or it waits already, and
// wakes the notifier.
func (m *Manager) readyLocked(parent string, ob *outbox) {
	if ob.inFlight || ob.ready {
		return
	}
	ob.ready = true
	m.nready = append(m.nready, parent)
	select {
	case m.nqWake <- struct{}{}:
	default:
	}
}

// noteLocked returns the notification key of e, or nil.
func noteLocked(e *entry, key string) *Notification {
	for i := range e.task.Notifications {
		if e.task.Notifications[i].Key == key {
			return &e.task.Notifications[i]
		}
	}
	return nil
}

// notifyLoop hands the parents whose next notification is due to delivery goroutines, in the
// order they became due, at most notifyWorkers at a time. On Close it waits for them and
// gives every parent's pending notifications one more attempt; what is still pending stays in
// the store.
func (m *Manager) notifyLoop() {
	var workers sync.WaitGroup
	sem := make(chan struct{}, notifyWorkers)
	// retryAt is the earliest next attempt of a parent waiting after a failure (zero: none),
	// under m.mu; the outboxes are scanned only when it has come.
	var retryAt time.Time
	for {
		wait := time.Hour
		m.mu.Lock()
		now := m.now()
		if !retryAt.IsZero() && !retryAt.After(now) {
			retryAt = time.Time{}
			for parent, ob := range m.outboxes {
				switch {
				case ob.inFlight || ob.ready || len(ob.queue) == 0:
				case !ob.next.After(now):
					m.readyLocked(parent, ob)
				case retryAt.IsZero() || ob.next.Before(retryAt):
					retryAt = ob.next
				}
			}
		}
		if !retryAt.IsZero() {
			wait = retryAt.Sub(now)
		}
		var start []string
		for len(m.nready) > 0 && len(sem)+len(start) < cap(sem) {
			parent := m.nready[0]
			m.nready[0] = ""
			m.nready = m.nready[1:]
			ob := m.outboxes[parent]
			ob.ready, ob.inFlight = false, true
			start = append(start, parent)
		}
		if len(m.nready) == 0 {
			m.nready = nil // let a burst's backing array go
		}
		m.mu.Unlock()
		for _, parent := range start {
			sem <- struct{}{}
			workers.Add(1)
			go func() {
				defer workers.Done()
				defer func() { <-sem }()
				next := m.drain(m.ctx, parent)
				m.mu.Lock()
				if !next.IsZero() && (retryAt.IsZero() || next.Before(retryAt)) {
					retryAt = next
				}
				m.mu.Unlock()
				select {
				case m.nqWake <- struct{}{}:
				default:
				}
			}()
		}
		select {
		case <-m.stop:
			workers.Wait()
			m.flushNotifications()
			return
		case <-m.nqWake:
		case <-m.cfg.clock.After(wait):
		}
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
		ob := m.outboxes[parent]
		switch {
		case len(ob.queue) == 0:
			ob.inFlight = false
			delete(m.outboxes, parent)
		case ob.next.After(m.now()):
			ob.inFlight = false
			retry = ob.next
		case ctx.Err() != nil:
			ob.inFlight = false // flushNotifications takes it
		case n >= notifyBatch && len(m.nready) > 0:
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
	parents := make([]string, 0, len(m.outboxes))
	for p, ob := range m.outboxes {
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
	ob := m.outboxes[parent]
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
	last, err := m.client.Messages(ctx, parent, 1)
	if err != nil {
		return false, err
	}
	after := ""
	if len(last) > 0 {
		after = last[0].Info.ID
	}
	id := opencode.NewMessageID(m.now(), after)
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

// A notification posted with prompt_async is delivered when the server answers, and then
// confirmed: OpenCode answers before it stores the message, and right after a restart it was
// seen to answer and never store it. The message shows up in the event stream
// (message.updated of the parent with its id), or, lossGrace after the post, a read finds it
// (GET /session/{parent}/message/{id}); when the read answers 404 the notification is pending
// again and posted anew. At most maxConfirms wait; past that the oldest are trusted.
const maxConfirms = 4096

// posted is a notification waiting for its message to show up.
type posted struct {
	parent, task, key string
	at                time.Time
}

// awaitPosted records a notification posted as message id.
func (m *Manager) awaitPosted(id string, p posted) {
	m.confirmMu.Lock()
	defer m.confirmMu.Unlock()
	if len(m.confirms) >= maxConfirms {
		var oldest string
		for k, o := range m.confirms {
			if oldest == "" || o.at.Before(m.confirms[oldest].at) {
				oldest = k
			}
		}
		delete(m.confirms, oldest)
	}
	m.confirms[id] = p
	m.nconfirm.Store(int64(len(m.confirms)))
}

// confirmPosted takes a message.updated event's properties: a message a notification was
// posted as is confirmed.
func (m *Manager) confirmPosted(props []byte) {
	var ev struct {
		Info struct {
			ID string `json:"id"`
		} `json:"info"`
	}
	if json.Unmarshal(props, &ev) != nil || ev.Info.ID == "" {
		return
	}
	m.confirmMu.Lock()
	defer m.confirmMu.Unlock()
	if _, ok := m.confirms[ev.Info.ID]; ok {
		delete(m.confirms, ev.Info.ID)
		m.nconfirm.Store(int64(len(m.confirms)))
	}
}

// checkPosted reads the messages of notifications posted lossGrace ago or earlier that the
// stream did not show: found, they are confirmed; not found, they are pending again.
func (m *Manager) checkPosted() {
	now := m.now()
	m.mu.Lock()
	grace := m.lossGrace
	m.mu.Unlock()
	m.confirmMu.Lock()
	due := map[string]posted{}
	for id, p := range m.confirms {
		if now.Sub(p.at) >= grace {
			due[id] = p
		}
	}
	m.confirmMu.Unlock()
	for id, p := range due {
		ctx, cancel := m.requestCtx()
		_, err := m.client.Message(ctx, p.parent, id)
		cancel()
		if err != nil && !errors.Is(err, opencode.ErrNotFound) {
			continue // asked again at the next poll
		}
		m.confirmMu.Lock()
		delete(m.confirms, id)
		m.nconfirm.Store(int64(len(m.confirms)))
		m.confirmMu.Unlock()
		if err == nil {
			continue
		}
		m.mu.Lock()
		e := m.tasks[p.task]
		var note *Notification
		if e != nil {
			note = noteLocked(e, p.key)
		}
		if note == nil || note.State != NotificationDelivered || note.MessageID != id {
			m.mu.Unlock()
			continue
		}
		m.cfg.logger.Warn("asyncagents: the server acknowledged a notification and did not store it; posting it again",
			"key", p.key, "message", id)
		note.State, note.Delivered, note.Error = NotificationPending, time.Time{}, "the server acknowledged the notification and did not store it"
		m.changedLocked(e)
		m.queueLocked(p.parent, noteRef{task: p.task, key: p.key})
		m.mu.Unlock()
		m.persist(e)
	}
}
