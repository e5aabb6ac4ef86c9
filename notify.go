package asyncagents

import (
	"strconv"
	"time"

	"github.com/asyncagents/asyncagents/hints"
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
	ob := m.notes.outboxes[parent]
	if ob == nil {
		ob = &outbox{}
		m.notes.outboxes[parent] = ob
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
	m.notes.ready = append(m.notes.ready, parent)
	select {
	case m.notes.wake <- struct{}{}:
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
