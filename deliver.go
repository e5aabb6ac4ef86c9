package asyncagents

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/asyncagents/asyncagents/opencode"
)

// Delivery: parents are served in parallel, at most notifyWorkers at a time, each attempt
// bounded by the request timeout. The notifications of one parent go oldest first; those
// posted without reply (they start no turn, so their order among themselves does not matter)
// that are due together go in one message, up to notifyMerge of them and mergeBytes of text,
// and up to
// notifyParallel such messages at a time once the parent's newest message is known
// (dueGroupsLocked); a prompt per run end (NotifyPerRun) goes alone, one at a time. A worker
// delivers a parent's notifications one message after the other while they are due; after
// notifyBatch notifications it gives its place to a parent that waits for a worker, if any. A
// failed attempt is retried after a delay doubling from notifyBackoffMin to notifyBackoffMax
// until the horizon (WithNotifyHorizon) has passed since the run ended.
const (
	notifyWorkers    = 32
	notifyBatch      = 16
	notifyMerge      = 128
	mergeBytes       = 64 << 10
	notifyParallel   = 8
	notifyBackoffMin = 500 * time.Millisecond
	notifyBackoffMax = time.Minute
	flushTimeout     = 5 * time.Second
	flushSettle      = 500 * time.Millisecond
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

// outbox holds one parent's pending notifications, oldest first, and those delivered whose
// turn is owed (turn.go).
type outbox struct {
	queue    []noteRef
	inFlight bool      // a worker delivers them
	ready    bool      // in Manager.nready: due, waiting for a worker
	next     time.Time // no attempt before this (a retry's backoff)

	owed      []noteRef // delivered without reply, not seen by a turn of the parent yet
	firstOwed time.Time // when the first of the owed notifications was created
	lastEnd   time.Time // when the parent's newest notification was created
	turnID    string    // the prompt asking for the owed turn, when posted before
	turnNext  time.Time // no attempt at the owed turn before this (a retry's backoff)
	turnFails int       // failed attempts at the owed turn in a row
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

// retryDueLocked readies the parents whose retry or turn has come, when the earliest has, and
// returns how long the notifier may sleep: until the next one, or an hour.
func (m *Manager) retryDueLocked() time.Duration {
	n, now := &m.notes, m.now()
	if !n.retryAt.IsZero() && !n.retryAt.After(now) {
		n.retryAt = time.Time{}
		for parent, ob := range n.outboxes {
			if ob.inFlight || ob.ready {
				continue
			}
			due, _, ok := m.dueLocked(parent, ob)
			switch {
			case !ok:
			case !due.After(now):
				m.readyLocked(parent, ob)
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

// drain delivers parent's due notifications, oldest first, then asks for the parent's owed
// turn when it is due (turn.go), for the worker that has the parent (its outbox is in
// flight), and gives the parent up: when it has nothing left to do, when it must wait for a
// retry or its turn (returning when), when the Manager closes, or after notifyBatch
// notifications while another parent waits for a worker.
func (m *Manager) drain(ctx context.Context, parent string) (retry time.Time) {
	for sent := 0; ; {
		m.mu.Lock()
		ob := m.notes.outboxes[parent]
		due, turn, ok := m.dueLocked(parent, ob)
		switch {
		case !ok:
			ob.inFlight = false
			delete(m.notes.outboxes, parent)
			m.waveOverLocked(parent)
		case due.After(m.now()):
			ob.inFlight = false
			retry = due
		case ctx.Err() != nil:
			ob.inFlight = false // flushNotifications takes it
		case sent >= notifyBatch && len(m.notes.ready) > 0:
			ob.inFlight = false
			m.readyLocked(parent, ob)
		case turn:
			m.mu.Unlock()
			m.askTurn(ctx, parent)
			continue
		default:
			groups := m.dueGroupsLocked(parent, ob)
			m.mu.Unlock()
			for _, g := range groups {
				sent += len(g)
			}
			var wg sync.WaitGroup
			for _, g := range groups[1:] {
				wg.Go(func() { m.deliver(ctx, parent, g) })
			}
			m.deliver(ctx, parent, groups[0])
			wg.Wait()
			continue
		}
		m.mu.Unlock()
		return retry
	}
}

// dueLocked returns when parent's outbox has something to do next, and whether that is its
// owed turn: its oldest notification (after a retry's backoff) comes first, and the owed turn
// when no notification is queued, or when those queued wait for a retry (one that keeps
// failing does not hold up the turn of those delivered); false when it has nothing to do.
func (m *Manager) dueLocked(parent string, ob *outbox) (at time.Time, turn, ok bool) {
	switch {
	case len(ob.owed) > 0 && (len(ob.queue) == 0 || ob.next.After(m.now())):
		at = latest(ob.turnNext, m.turnDueLocked(parent, ob))
		if len(ob.queue) > 0 && ob.next.Before(at) {
			return ob.next, false, true
		}
		return at, true, true
	case len(ob.queue) > 0:
		return ob.next, false, true
	}
	return time.Time{}, false, false
}

// flushNotifications gives each parent's pending notifications, in order, one attempt. A
// notification posted before (its attempt cut short by Close, say) may still be on its way
// into the server, which stores a message before it answers: the flush waits flushSettle
// before it looks such a one up, so that it does not take it for lost and post it twice.
func (m *Manager) flushNotifications() {
	ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	m.mu.Lock()
	parents := make([]string, 0, len(m.notes.outboxes))
	posted := false
	for p, ob := range m.notes.outboxes {
		if len(ob.queue) > 0 {
			ob.next = time.Time{}
			parents = append(parents, p)
			for _, ref := range ob.queue {
				if e := m.tasks[ref.task]; e != nil {
					if note := noteLocked(e, ref.key); note != nil && note.MessageID != "" {
						posted = true
					}
				}
			}
		}
	}
	m.mu.Unlock()
	if posted {
		settle, done := context.WithTimeout(ctx, flushSettle)
		<-settle.Done()
		done()
	}
	for _, p := range parents {
		for ctx.Err() == nil && m.deliverNext(ctx, p) {
		}
	}
}

// dueGroupsLocked returns the notifications of parent's outbox ob that its worker delivers
// now, one group per message, oldest first. A prompt per run end (NotifyPerRun) goes alone.
// Notifications posted without reply are merged: consecutive ones that an earlier attempt
// posted under the same message id (or none did) and that carry the same agent share a
// message, up to notifyMerge of them and mergeBytes of text; up to notifyParallel messages
// go at once when the parent's newest message is known (no read of it per message), one
// otherwise. A ref queued twice is taken once.
func (m *Manager) dueGroupsLocked(parent string, ob *outbox) [][]noteRef {
	if m.cfg.notifyPolicy == NotifyPerRun || len(ob.queue) == 1 {
		return [][]noteRef{{ob.queue[0]}}
	}
	most := 1
	if _, ok := m.notes.heads.known(parent, m.mirrors.live.Load(), m.now()); ok {
		most = notifyParallel
	}
	type mergeKey struct{ prev, agent string }
	var groups [][]noteRef
	var last mergeKey
	var size int // the text of the last group
	taken := make(map[noteRef]struct{}, min(len(ob.queue), most*notifyMerge))
	for _, ref := range ob.queue {
		if _, dup := taken[ref]; dup { // queued twice (a task restored before its stale ref went): one post
			continue
		}
		taken[ref] = struct{}{}
		var k mergeKey
		var n int
		if e := m.tasks[ref.task]; e != nil {
			k.agent = e.task.ParentAgent
			if note := noteLocked(e, ref.key); note != nil {
				k.prev, n = note.MessageID, len(note.Visible)+len(note.Hidden)
			}
		}
		if g := len(groups); g > 0 && k == last && len(groups[g-1]) < notifyMerge && size+n <= mergeBytes {
			groups[g-1] = append(groups[g-1], ref)
			size += n
			continue
		}
		if len(groups) == most {
			break
		}
		groups, last, size = append(groups, []noteRef{ref}), k, n
	}
	return groups
}

// deliverNext makes one attempt at parent's oldest pending notifications (the first message
// dueGroupsLocked would post) and reports whether it is done with them (each delivered,
// failed or gone). The caller has the parent.
func (m *Manager) deliverNext(ctx context.Context, parent string) (done bool) {
	m.mu.Lock()
	ob := m.notes.outboxes[parent]
	if ob == nil || len(ob.queue) == 0 {
		m.mu.Unlock()
		return false
	}
	refs := m.dueGroupsLocked(parent, ob)[0]
	m.mu.Unlock()
	return m.deliver(ctx, parent, refs)
}

// pendingNote is a notification an attempt posts: its reference, its task's entry, and a copy
// taken when the attempt started.
type pendingNote struct {
	ref noteRef
	e   *entry
	n   Notification
}

// deliver makes one attempt at parent's pending notifications refs, in one message, and
// reports whether it is done with them (each delivered, failed or gone). The caller has the
// parent: no goroutine but those it started delivers its notifications meanwhile, and no two
// deliver the same one.
func (m *Manager) deliver(ctx context.Context, parent string, refs []noteRef) (done bool) {
	defer m.recoverAndLog("delivering a notification")
	m.mu.Lock()
	ob := m.notes.outboxes[parent]
	post := make([]pendingNote, 0, len(refs))
	var gone []noteRef
	for _, ref := range refs {
		e := m.tasks[ref.task]
		var note *Notification
		if e != nil {
			note = noteLocked(e, ref.key)
		}
		if note == nil || note.State != NotificationPending { // cleared meanwhile
			gone = append(gone, ref)
			continue
		}
		post = append(post, pendingNote{ref: ref, e: e, n: *note})
	}
	ob.remove(gone)
	m.mu.Unlock()
	if len(post) == 0 {
		return true
	}

	var held []*entry // counted as acted on from the post until its outcome is set below
	confirmed, err := m.attemptSafely(ctx, parent, post, &held)
	if m.afterPost != nil {
		m.afterPost()
	}
	done, next := m.settle(ob, parent, post, held, confirmed, err)
	if err != nil && !done && !lostLease(err) {
		m.cfg.logger.Warn("asyncagents: notification failed, retrying", "key", post[0].n.Key, "notifications", len(post),
			"attempt", post[0].n.Attempts+1, "next", next, "err", err)
	}
	for i, p := range post {
		if i == 0 || p.e != post[i-1].e {
			m.persist(p.e)
		}
	}
	return done
}

// settle sets the outcome of one attempt (confirmed, err) at the notifications post of
// parent's outbox ob, ends the count of held as acted on, and reports whether the outbox is
// done with every one of them, and when its next attempt is. A notification whose task is
// being handed over (ErrLeaseLost: the post was refused before it was sent) waits for a
// retry with the others of its message: by then its task has gone to its new holder, and
// they are posted without it, or it stayed here.
func (m *Manager) settle(ob *outbox, parent string, post []pendingNote, held []*entry, confirmed bool, err error) (done bool, next time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	defer releaseLocked(held)
	now := m.now()
	gone := make([]noteRef, 0, len(post))
	for _, p := range post {
		if m.settleLocked(ob, parent, p, confirmed, err, now) {
			gone = append(gone, p.ref)
		}
		m.changedLocked(p.e)
	}
	ob.remove(gone)
	if !ob.next.After(now) { // not a retry another notification of the parent waits for
		ob.next = time.Time{}
	}
	return len(gone) == len(post), ob.next
}

// settleLocked sets the outcome of one attempt (confirmed, err) at p and reports whether the
// outbox is done with it (delivered, failed or gone: the caller removes it); otherwise it
// waits in ob for a retry.
func (m *Manager) settleLocked(ob *outbox, parent string, p pendingNote, confirmed bool, err error, now time.Time) (done bool) {
	note := noteLocked(p.e, p.ref.key)
	if note == nil || p.e.removed {
		return true
	}
	if lostLease(err) { // not posted: the task is being handed over, or was; its holder delivers
		note.Next = now.Add(notifyBackoffMin)
		ob.next = latest(ob.next, note.Next)
		return false
	}
	note.Attempts++
	switch {
	case err == nil:
		note.State, note.Delivered, note.Error, note.Next = NotificationDelivered, now, "", time.Time{}
		if !confirmed { // a prompt_async (NotifyPerRun), always posted alone: one per message id
			m.awaitPosted(note.MessageID, posted{parent: parent, task: p.e.task.ID, key: note.Key, at: now})
		}
		if m.cfg.notifyPolicy == NotifyPerWave {
			note.Turn = TurnOwed
			m.oweTurnLocked(ob, p.ref, note.Created)
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
		ob.next = latest(ob.next, note.Next)
		return false
	}
	return true
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

// attemptSafely makes one attempt, bounded by twice the request timeout (a lookup or two,
// then the post). A panic (in the Client or the Store) is logged and counts as a failed
// attempt, retried like any other.
func (m *Manager) attemptSafely(ctx context.Context, parent string, post []pendingNote, held *[]*entry) (confirmed bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			m.cfg.logger.Error("asyncagents: panic delivering a notification", "key", post[0].n.Key, "panic", r, "stack", string(debug.Stack()))
			confirmed, err = false, fmt.Errorf("asyncagents: panic delivering a notification: %v", r)
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, 2*m.cfg.requestTimeout)
	defer cancel()
	return m.attempt(ctx, parent, post, held)
}

// attempt delivers the notifications post, in one message, unless an earlier attempt already
// did: notifications posted before (they share their MessageID; dueGroupsLocked merges only
// such) are looked up by that id first. confirmed reports that the server has shown the
// message (found, or answered with it); a prompt_async that was only acknowledged is not.
// Under NotifyPerRun the notification is a prompt; otherwise the message is posted without
// reply, with a visible part and a synthetic hint per notification. The post counts as acting
// on the notifications' tasks from the lease check on, in *held (see postCtx).
func (m *Manager) attempt(ctx context.Context, parent string, post []pendingNote, held *[]*entry) (confirmed bool, err error) {
	ids := make([]string, 0, len(post))
	for _, p := range post {
		ids = append(ids, p.e.task.ID)
	}
	_, confirmed, _, err = m.postOnce(ctx, parent, post[0].n.MessageID, nil, func(id string) error {
		m.mu.Lock()
		for _, p := range post {
			if note := noteLocked(p.e, p.n.Key); note != nil {
				note.MessageID = id
				m.changedLocked(p.e)
			}
		}
		m.mu.Unlock()
		for i, p := range post {
			if i > 0 && p.e == post[i-1].e {
				continue
			}
			if err := m.persist(p.e); err != nil {
				return err
			}
		}
		return nil
	}, func(id string) (bool, error) {
		ctx, cancel, err := m.postCtx(ctx, held, ids...)
		if err != nil {
			return false, err
		}
		defer cancel()
		req := opencode.PromptRequest{MessageID: id, Agent: post[0].e.task.ParentAgent,
			Parts: make([]opencode.TextPartInput, 0, 2*len(post))}
		for _, p := range post {
			req.Parts = append(req.Parts, opencode.NewText(p.n.Visible), opencode.NewSyntheticText(p.n.Hidden))
		}
		if m.cfg.notifyPolicy == NotifyPerRun {
			return false, m.client.PromptAsync(ctx, parent, req)
		}
		err = m.postNoReply(ctx, parent, req)
		return err == nil, err
	})
	return confirmed, err
}
