package asyncagents

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/asyncagents/asyncagents/hints"
)

// notifier is the part of the Manager that keeps the parents' notifications until they are
// delivered: an outbox per parent, the parents whose next notification is due (ready, in the
// order they became due), when the earliest retry is, and its wake-up; the notifications
// posted with prompt_async waiting to be confirmed (confirm.go) and the parents' newest
// message ids (heads.go), each with a lock of its own. The delivery itself (deliver.go,
// turn.go) is the Manager's: it posts through the Client and saves through the Store.
//
// Guarded by Manager.mu, but confirms and heads.
type notifier struct {
	outboxes map[string]*outbox // parent → pending notifications
	ready    []string           // parents whose next notification is due, waiting for a worker
	retryAt  time.Time          // the earliest retry of a parent waiting after a failure; zero: none
	wake     chan struct{}
	confirms confirmations
	heads    heads

	policy     NotifyPolicy
	waveWindow time.Duration
	active     func(parent string) int // the parent's active tasks, and launches on their way

	toolPrefix string      // the tools' prefix, named in the texts when the models have them:
	toolHints  bool        // WithToolHints, or
	offered    atomic.Bool // Tools was called
}

func newNotifier(cfg *config, active func(parent string) int) notifier {
	return notifier{outboxes: map[string]*outbox{}, wake: make(chan struct{}, 1),
		confirms: confirmations{byID: map[string]posted{}, parents: map[string]int{}},
		policy:   cfg.notifyPolicy, waveWindow: cfg.waveWindow, active: active, toolPrefix: cfg.toolPrefix, toolHints: cfg.toolHints}
}

// noteRef names a pending notification: the task's entry and the notification's key.
type noteRef struct {
	e   *entry
	key string
}

// live returns the task of r, or nil when it was removed (cleared, or handed over: a
// notification of a task restored again is referred to by its new entry).
func (r noteRef) live() *entry {
	if r.e.removed {
		return nil
	}
	return r.e
}

// note returns the notification r names, or nil when its task was removed or no longer has
// it.
func (r noteRef) note() *Notification {
	if e := r.live(); e != nil {
		return noteLocked(e, r.key)
	}
	return nil
}

// outbox holds one parent's pending notifications, oldest first, and those delivered whose
// turn is owed (turn.go).
type outbox struct {
	queue    []noteRef
	inFlight bool      // a worker delivers them
	ready    bool      // in notifier.ready: due, waiting for a worker
	next     time.Time // no attempt before this (a retry's backoff)

	owed      []noteRef // delivered without reply, not seen by a turn of the parent yet
	firstOwed time.Time // when the first of the owed notifications was created
	lastEnd   time.Time // when the parent's newest notification was created
	turnID    string    // the prompt asking for the owed turn, when posted before
	turnNext  time.Time // no attempt at the owed turn before this (a retry's backoff)
	turnFails int       // failed attempts at the owed turn in a row
}

// outbox returns parent's outbox, created empty when it has none.
func (n *notifier) outbox(parent string) *outbox {
	ob := n.outboxes[parent]
	if ob == nil {
		ob = &outbox{}
		n.outboxes[parent] = ob
	}
	return ob
}

// queue queues ref for delivery to parent and returns parent's outbox.
func (n *notifier) queue(parent string, ref noteRef) *outbox {
	ob := n.outbox(parent)
	ob.queue = append(ob.queue, ref)
	if ob.next.IsZero() {
		n.markReady(parent, ob)
	}
	return ob
}

// markReady queues parent for a worker unless a worker has it or it waits already, and wakes
// the notifier.
func (n *notifier) markReady(parent string, ob *outbox) {
	if ob.inFlight || ob.ready {
		return
	}
	ob.ready = true
	n.ready = append(n.ready, parent)
	n.wakeUp()
}

// wakeUp wakes the notifier's loop.
func (n *notifier) wakeUp() {
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// retryDue readies the parents whose retry or turn has come by now, when the earliest has,
// and returns how long the notifier may sleep: until the next one, or an hour.
func (n *notifier) retryDue(now time.Time) time.Duration {
	if !n.retryAt.IsZero() && !n.retryAt.After(now) {
		n.retryAt = time.Time{}
		for parent, ob := range n.outboxes {
			if ob.inFlight || ob.ready {
				continue
			}
			due, _, ok := n.due(parent, ob, now)
			switch {
			case !ok:
			case !due.After(now):
				n.markReady(parent, ob)
			case n.retryAt.IsZero() || due.Before(n.retryAt):
				n.retryAt = due
			}
		}
	}
	if n.retryAt.IsZero() {
		return time.Hour
	}
	return n.retryAt.Sub(now)
}

// retryAfter records that a parent waits for a retry at next (zero: none).
func (n *notifier) retryAfter(next time.Time) {
	if !next.IsZero() && (n.retryAt.IsZero() || next.Before(n.retryAt)) {
		n.retryAt = next
	}
}

// takeReady takes up to free parents whose next notification is due, in the order they
// became due, and marks their outboxes in flight.
func (n *notifier) takeReady(free int) []string {
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

// due returns when parent's outbox ob has something to do next, as of now, and whether that
// is its owed turn: its oldest notification (after a retry's backoff) comes first, and the
// owed turn when no notification is queued, or when those queued wait for a retry (one that
// keeps failing does not hold up the turn of those delivered); false when it has nothing to
// do.
func (n *notifier) due(parent string, ob *outbox, now time.Time) (at time.Time, turn, ok bool) {
	switch {
	case len(ob.owed) > 0 && (len(ob.queue) == 0 || ob.next.After(now)):
		at = latest(ob.turnNext, n.turnDue(parent, ob))
		if len(ob.queue) > 0 && ob.next.Before(at) {
			return ob.next, false, true
		}
		return at, true, true
	case len(ob.queue) > 0:
		return ob.next, false, true
	}
	return time.Time{}, false, false
}

// waveMaxWindows bounds how long a turn waits for a wave to settle: at most this many wave
// windows after the first notification it covers.
const waveMaxWindows = 5

// turnDue returns when parent's owed turn is due: at once when the parent has no active task
// (none queued, running or resumed, and no launch under way), otherwise a wave window after
// its newest notification, and at most waveMaxWindows windows after the first one the turn
// covers.
func (n *notifier) turnDue(parent string, ob *outbox) time.Time {
	if n.active(parent) == 0 {
		return time.Time{}
	}
	w := n.waveWindow
	return earliest(ob.lastEnd.Add(w), ob.firstOwed.Add(waveMaxWindows*w))
}

// groups returns the notifications of parent's outbox ob that its worker delivers now, one
// group per message, oldest first. A prompt per run end (NotifyPerRun) goes alone.
// Notifications posted without reply are merged: consecutive ones that an earlier attempt
// posted under the same message id (or none did) and that carry the same agent share a
// message, up to notifyMerge of them and mergeBytes of text; up to notifyParallel messages go
// at once when the parent's newest message is known (heads.known on connection live at now:
// no read of it per message), one otherwise. A ref queued twice is taken once.
func (n *notifier) groups(parent string, ob *outbox, live uint64, now time.Time) [][]noteRef {
	if n.policy == NotifyPerRun || len(ob.queue) == 1 {
		return [][]noteRef{{ob.queue[0]}}
	}
	most := 1
	if _, ok := n.heads.known(parent, live, now); ok {
		most = notifyParallel
	}
	type mergeKey struct{ prev, agent string }
	var groups [][]noteRef
	var last mergeKey
	var size int // the text of the last group
	taken := make(map[noteRef]struct{}, min(len(ob.queue), most*notifyMerge))
	for _, ref := range ob.queue {
		if _, dup := taken[ref]; dup { // queued twice: one post
			continue
		}
		taken[ref] = struct{}{}
		var k mergeKey
		var size1 int
		if e := ref.live(); e != nil {
			k.agent = e.task.ParentAgent
			if note := noteLocked(e, ref.key); note != nil {
				k.prev, size1 = note.MessageID, len(note.Visible)+len(note.Hidden)
			}
		}
		if g := len(groups); g > 0 && k == last && len(groups[g-1]) < notifyMerge && size+size1 <= mergeBytes {
			groups[g-1] = append(groups[g-1], ref)
			size += size1
			continue
		}
		if len(groups) == most {
			break
		}
		groups, last, size = append(groups, []noteRef{ref}), k, size1
	}
	return groups
}

// remove drops refs from the queue in one pass: usually the oldest, in order (a message's
// notifications are consecutive), and then it only cuts them off (a later copy of one queued
// twice stays: its next attempt finds it delivered, and drops it).
func (ob *outbox) remove(refs []noteRef) {
	switch n := len(refs); {
	case n == 0:
		return
	case n <= len(ob.queue) && slices.Equal(ob.queue[:n], refs):
		clear(ob.queue[:n])
		ob.queue = ob.queue[n:]
	default:
		drop := make(map[noteRef]struct{}, n)
		for _, r := range refs {
			drop[r] = struct{}{}
		}
		ob.queue = slices.DeleteFunc(ob.queue, func(r noteRef) bool {
			_, ok := drop[r]
			return ok
		})
	}
	if len(ob.queue) == 0 {
		ob.queue = nil // let a burst's backing array go
	}
}

// owe records that ref, a notification whose run ended at ended, was delivered without reply
// and waits for a turn.
func (ob *outbox) owe(ref noteRef, ended time.Time) {
	if len(ob.owed) == 0 || ended.Before(ob.firstOwed) {
		ob.firstOwed = ended
	}
	ob.owed = append(ob.owed, ref)
}

// unowe drops refs from the owed notifications, after an attempt at their turn ended them.
// Others may have been owed again meanwhile (reoweLocked).
func (ob *outbox) unowe(refs []noteRef) {
	done := make(map[noteRef]bool, len(refs))
	for _, r := range refs {
		done[r] = true
	}
	ob.owed = slices.DeleteFunc(ob.owed, func(r noteRef) bool { return done[r] })
	ob.turnID, ob.turnNext, ob.turnFails = "", time.Time{}, 0
	if len(ob.owed) == 0 {
		ob.owed = nil
		return
	}
	ob.firstOwed = time.Time{}
	for _, r := range ob.owed {
		if note := r.note(); note != nil && (ob.firstOwed.IsZero() || note.Created.Before(ob.firstOwed)) {
			ob.firstOwed = note.Created
		}
	}
}

// reowe makes the notifications refs of parent owed again: their turn prompt, message id,
// the server acknowledged and did not store. It forgets the parent's newest message id, which
// was raised to that prompt's, and readies the parent. Refs whose tasks are gone, or whose
// turn another prompt asked for since, are left as they are.
func (n *notifier) reowe(parent string, refs []noteRef, id string) {
	var back []noteRef
	for _, r := range refs {
		if note := r.note(); note != nil && note.Turn == TurnAsked && note.TurnID == id {
			note.Turn, note.TurnID = TurnOwed, ""
			back = append(back, r)
		}
	}
	if len(back) == 0 {
		return
	}
	n.heads.forget(parent)
	ob := n.outbox(parent)
	for _, r := range back {
		ob.owe(r, r.note().Created)
	}
	n.markReady(parent, ob)
}

// waveOver stops following parent's newest message id when the wave is over: the parent has
// no active task (no run end to come) and no notification to deliver.
func (n *notifier) waveOver(parent string) {
	if n.active(parent) == 0 && n.outboxes[parent] == nil {
		n.heads.forget(parent)
	}
}

// postedBefore returns the notifications of refs posted before message id (their message ids
// sort before it: the Manager chose each newer than the parent's newest).
func postedBefore(refs []noteRef, id string) []noteRef {
	var out []noteRef
	for _, r := range refs {
		if note := r.note(); note != nil && note.MessageID < id {
			out = append(out, r)
		}
	}
	return out
}

// turnDone sets the turn state of the notifications refs that are owed (and the prompt's id,
// and an error).
func turnDone(refs []noteRef, state TurnState, id, errMsg string) {
	for _, r := range refs {
		if note := r.note(); note != nil && note.Turn == TurnOwed {
			note.Turn = state
			if id != "" {
				note.TurnID = id
			}
			if errMsg != "" {
				note.Error = errMsg
			}
		}
	}
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// prefix is the tool prefix the notifications and turn prompts name, or hints.NoTools when
// the parents' models have not been given the tools.
func (n *notifier) prefix() string {
	if n.toolHints || n.offered.Load() {
		return n.toolPrefix
	}
	return hints.NoTools
}
