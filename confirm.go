package asyncagents

import (
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asyncagents/asyncagents/opencode"
)

// A notification posted with prompt_async is delivered when the server answers, and then
// confirmed: OpenCode answers before it stores the message, and right after a restart it was
// seen to answer and never store it. The message shows up in the event stream
// (message.updated of the parent with its id), or, lossGrace after the post, a read finds it
// (GET /session/{parent}/message/{id}); when the read answers 404 the notification is pending
// again and posted anew. At most maxConfirms wait; past that the oldest are trusted.
const maxConfirms = 4096

// confirmations are the notifications posted with prompt_async whose message the server has
// not shown yet, by message id; n counts them for the event reader, which looks only while
// some wait. Guarded by mu, not Manager.mu.
type confirmations struct {
	mu   sync.Mutex
	byID map[string]posted
	n    atomic.Int64
}

// posted is a notification waiting for its message to show up.
type posted struct {
	parent, task, key string
	at                time.Time
}

// awaitPosted records a notification posted as message id.
func (m *Manager) awaitPosted(id string, p posted) {
	m.notes.confirms.mu.Lock()
	defer m.notes.confirms.mu.Unlock()
	if len(m.notes.confirms.byID) >= maxConfirms {
		var oldest string
		for k, o := range m.notes.confirms.byID {
			if oldest == "" || o.at.Before(m.notes.confirms.byID[oldest].at) {
				oldest = k
			}
		}
		delete(m.notes.confirms.byID, oldest)
	}
	m.notes.confirms.byID[id] = p
	m.notes.confirms.n.Store(int64(len(m.notes.confirms.byID)))
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
	m.notes.confirms.mu.Lock()
	defer m.notes.confirms.mu.Unlock()
	if _, ok := m.notes.confirms.byID[ev.Info.ID]; ok {
		delete(m.notes.confirms.byID, ev.Info.ID)
		m.notes.confirms.n.Store(int64(len(m.notes.confirms.byID)))
	}
}

// checkPosted reads the messages of notifications posted lossGrace ago or earlier that the
// stream did not show: found, they are confirmed; not found, they are pending again.
func (m *Manager) checkPosted() {
	now := m.now()
	m.mu.Lock()
	grace := m.lossGrace
	m.mu.Unlock()
	m.notes.confirms.mu.Lock()
	due := map[string]posted{}
	for id, p := range m.notes.confirms.byID {
		if now.Sub(p.at) >= grace {
			due[id] = p
		}
	}
	m.notes.confirms.mu.Unlock()
	for id, p := range due {
		ctx, cancel := m.requestCtx()
		_, err := m.client.Message(ctx, p.parent, id)
		cancel()
		if err != nil && !errors.Is(err, opencode.ErrNotFound) {
			continue // asked again at the next poll
		}
		m.notes.confirms.mu.Lock()
		delete(m.notes.confirms.byID, id)
		m.notes.confirms.n.Store(int64(len(m.notes.confirms.byID)))
		m.notes.confirms.mu.Unlock()
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
