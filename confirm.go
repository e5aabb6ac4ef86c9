package asyncagents

import (
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asyncagents/asyncagents/internal/scan"
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
// not shown yet: by message id, in the order they were posted (order, which may still hold ids
// confirmed since), and counted per parent session; n counts them all for the event reader,
// which looks only while some wait. Guarded by mu, not Manager.mu.
type confirmations struct {
	mu      sync.Mutex
	byID    map[string]posted
	order   []string
	parents map[string]int
	n       atomic.Int64
}

// posted is a notification, or a turn prompt (turn: the notifications it covers), waiting
// for its message to show up.
type posted struct {
	parent string
	ref    noteRef   // the notification
	turn   []noteRef // or the notifications the turn prompt covers
	at     time.Time
}

// add records a notification posted as message id; beyond maxConfirms the oldest is trusted.
func (c *confirmations) add(id string, p posted) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.byID) >= maxConfirms && len(c.order) > 0 {
		c.removeLocked(c.order[0])
		c.order = c.order[1:]
	}
	c.byID[id] = p
	c.order = append(c.order, id)
	c.parents[p.parent]++
	c.n.Store(int64(len(c.byID)))
}

// removeLocked forgets message id, if it waits.
func (c *confirmations) removeLocked(id string) (posted, bool) {
	p, ok := c.byID[id]
	if !ok {
		return posted{}, false
	}
	delete(c.byID, id)
	if c.parents[p.parent]--; c.parents[p.parent] <= 0 {
		delete(c.parents, p.parent)
	}
	if len(c.byID) == 0 {
		c.order = nil // the ids confirmed meanwhile go with it
	}
	c.n.Store(int64(len(c.byID)))
	return p, true
}

// remove forgets message id.
func (c *confirmations) remove(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removeLocked(id)
}

// waitsIn reports whether a notification posted to session sid waits.
func (c *confirmations) waitsIn(sid []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.parents[string(sid)] > 0
}

// due returns the notifications posted grace ago or earlier.
func (c *confirmations) due(now time.Time, grace time.Duration) map[string]posted {
	c.mu.Lock()
	defer c.mu.Unlock()
	due := map[string]posted{}
	for id, p := range c.byID {
		if now.Sub(p.at) >= grace {
			due[id] = p
		}
	}
	return due
}

// confirm takes a message.updated event: a message a notification was posted as is
// confirmed. Only the events of parents with notifications waiting are read further than
// their session id.
func (c *confirmations) confirm(ev opencode.Event) {
	if sid := eventSession(ev); sid == nil || !c.waitsIn(sid) {
		return
	}
	if id := messageID(ev); id != "" {
		c.remove(id)
	}
}

// messageID returns the id of the message of a message.updated event, "" when it has none.
func messageID(ev opencode.Event) string {
	if id := scan.LeadingInfoID(ev.Properties); id != nil {
		return string(id)
	}
	var p struct {
		Info struct {
			ID string `json:"id"`
		} `json:"info"`
	}
	if json.Unmarshal(ev.Properties, &p) != nil {
		return ""
	}
	return p.Info.ID
}

// checkPosted reads the messages of notifications posted lossGrace ago or earlier that the
// stream did not show: found, they are confirmed; not found, they are pending again.
func (m *Manager) checkPosted() {
	now := m.bg.now()
	m.mu.Lock()
	grace := m.lossGrace
	m.mu.Unlock()
	for id, p := range m.notes.confirms.due(now, grace) {
		ctx, cancel := m.bg.requestCtx()
		_, err := m.client.Message(ctx, p.parent, id)
		cancel()
		if err != nil && !errors.Is(err, opencode.ErrNotFound) {
			continue // asked again at the next poll
		}
		m.notes.confirms.remove(id)
		if err == nil {
			continue
		}
		m.mu.Lock()
		if p.turn != nil {
			m.cfg.logger.Warn("asyncagents: the server acknowledged a turn prompt and did not store it; asking again",
				"parent", p.parent, "message", id)
			m.notes.reowe(p.parent, p.turn, id)
			changed := m.entriesLocked(p.turn) // those made owed again, and the others
			m.mu.Unlock()
			for _, e := range changed {
				m.persist(e)
			}
			continue
		}
		e, note := p.ref.live(), p.ref.note()
		if note == nil || note.State != NotificationDelivered || note.MessageID != id {
			m.mu.Unlock()
			continue
		}
		m.cfg.logger.Warn("asyncagents: the server acknowledged a notification and did not store it; posting it again",
			"key", p.ref.key, "message", id)
		note.State, note.Delivered, note.Error = NotificationPending, time.Time{}, "the server acknowledged the notification and did not store it"
		m.notes.heads.forget(p.parent) // it was raised to the id that is not there
		m.changedLocked(e)
		m.notes.queue(p.parent, p.ref)
		m.mu.Unlock()
		m.persist(e)
	}
}
