package asyncagents

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asyncagents/asyncagents/opencode"
)

// A notification's message id is chosen newer than every message of its parent session:
// OpenCode 1.18.33 orders messages by the time it created them and by id only within one
// millisecond, where an older id would list the notification before a reply written in the
// same millisecond (older servers ordered by id alone; see NewMessageID). The Manager reads
// the parent's newest message (GET /session/{id}/message?limit=1) before the first
// notification of a wave only: the read is made while a connection of the event stream
// delivers events, and from then on that connection delivers every later message of the
// parent (its message.updated events), and the Manager knows the ids it posts itself. So the
// newest id stays known without a read until the connection changes, until the parent has
// no active task and its notifications are all delivered (the wave is over), or for headTTL
// after the read: a message the server creates in the parent while its event is on its way is
// as unknown to the Manager as one created between a read and a post, and the way is longer
// while the stream has a backlog.

// headTTL is how long after a read of a parent's newest message the parent's head is known
// without another.
const headTTL = time.Second

// heads are the newest message ids known of the parents whose notifications are being
// delivered. The event reader looks only while some parent is tracked (n > 0). Guarded by
// mu, not Manager.mu.
type heads struct {
	mu sync.Mutex
	by map[string]head
	n  atomic.Int64
}

// head is what is known of one parent's messages: the newest id seen on connection epoch,
// complete once a read made on that connection has answered (at, the time it was made).
type head struct {
	id    string
	epoch uint64
	at    time.Time
}

// known returns the newest message id of parent when it is known on connection live at now.
func (h *heads) known(parent string, live uint64, now time.Time) (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	hd, ok := h.by[parent]
	return hd.id, ok && !hd.at.IsZero() && now.Sub(hd.at) < headTTL && live != 0 && hd.epoch == live
}

// track starts following parent on connection live, before a read of its newest message:
// the events that arrive during the read are kept. It reports whether it follows (a
// connection delivers events).
func (h *heads) track(parent string, live uint64) bool {
	if live == 0 {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.by == nil {
		h.by = map[string]head{}
	}
	if hd, ok := h.by[parent]; !ok || hd.epoch != live {
		h.by[parent] = head{epoch: live}
	} else {
		hd.at = time.Time{} // read again
		h.by[parent] = hd
	}
	h.n.Store(int64(len(h.by)))
	return true
}

// read records the answer of a read of parent's newest message (id, "" for none) started at
// on connection live after track.
func (h *heads) read(parent, id string, live uint64, at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if hd, ok := h.by[parent]; ok && hd.epoch == live {
		hd.id, hd.at = max(hd.id, id), at
		h.by[parent] = hd
	}
}

// raise records message id of parent: seen on connection epoch, or posted by the Manager
// (epoch 0). An event of another connection than the one followed forgets the parent.
func (h *heads) raise(parent, id string, epoch uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	hd, ok := h.by[parent]
	switch {
	case !ok:
	case epoch != 0 && epoch != hd.epoch:
		delete(h.by, parent)
		h.n.Store(int64(len(h.by)))
	default:
		hd.id = max(hd.id, id)
		h.by[parent] = hd
	}
}

// forget stops following parent.
func (h *heads) forget(parent string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.by, parent)
	h.n.Store(int64(len(h.by)))
}

// event takes a message.updated event of connection epoch: a followed parent's message raises
// its head. Only the events of followed parents are read further than their session id.
func (h *heads) event(ev opencode.Event, epoch uint64) {
	sid := eventSession(ev)
	if sid == nil {
		return
	}
	h.mu.Lock()
	_, ok := h.by[string(sid)]
	h.mu.Unlock()
	if !ok {
		return
	}
	if id := messageID(ev); id != "" {
		h.raise(string(sid), id, epoch)
	}
}

// newestBefore returns the id a notification to parent must sort after: the parent's newest
// message, known on connection live at now (see above) or read from client.
func (h *heads) newestBefore(ctx context.Context, client opencode.Client, parent string, live uint64, now time.Time) (string, error) {
	if id, ok := h.known(parent, live, now); ok {
		return id, nil
	}
	tracked := h.track(parent, live)
	last, err := client.Messages(ctx, parent, 1)
	if err != nil {
		return "", err
	}
	after := ""
	if len(last) > 0 {
		after = last[0].Info.ID
	}
	if tracked {
		h.read(parent, after, live, now)
	}
	return after, nil
}
