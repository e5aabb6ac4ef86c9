package asyncagents

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
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
// (notifier.groups); a prompt per run end (NotifyPerRun) goes alone, one at a time. A worker
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
)

// notifyLoop hands the parents whose next notification is due to delivery goroutines, in the
// order they became due, at most notifyWorkers at a time. On Close it waits for them and
// gives every parent's pending notifications one more attempt; what is still pending stays in
// the store.
func (m *Manager) notifyLoop() {
	var workers sync.WaitGroup
	sem := make(chan struct{}, notifyWorkers)
	for {
		m.mu.Lock()
		wait := m.notes.retryDue(m.bg.now())
		start := m.notes.takeReady(cap(sem) - len(sem))
		m.mu.Unlock()
		for _, parent := range start {
			sem <- struct{}{}
			workers.Add(1)
			go m.notifyWorker(parent, sem, &workers)
		}
		select {
		case <-m.bg.stopc:
			workers.Wait()
			m.flushNotifications()
			return
		case <-m.notes.wake:
		case <-m.bg.clock.After(wait):
		}
	}
}

// notifyWorker delivers parent's due notifications, records when its next retry is, and
// wakes the notifier; it holds a place of sem, which it gives back.
func (m *Manager) notifyWorker(parent string, sem chan struct{}, workers *sync.WaitGroup) {
	defer workers.Done()
	defer func() { <-sem }()
	defer m.bg.recoverAndLog("a notification worker")
	next := m.drain(m.bg.ctx, parent)
	m.mu.Lock()
	m.notes.retryAfter(next)
	m.mu.Unlock()
	m.notes.wakeUp()
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
		due, turn, ok := m.notes.due(parent, ob, m.bg.now())
		switch {
		case !ok:
			ob.inFlight = false
			delete(m.notes.outboxes, parent)
			m.notes.waveOver(parent)
		case due.After(m.bg.now()):
			ob.inFlight = false
			retry = due
		case ctx.Err() != nil:
			ob.inFlight = false // flushNotifications takes it
		case sent >= notifyBatch && len(m.notes.ready) > 0:
			ob.inFlight = false
			m.notes.markReady(parent, ob)
		case turn:
			m.mu.Unlock()
			m.askTurn(ctx, parent)
			continue
		default:
			groups := m.notes.groups(parent, ob, m.mirrors.live.Load(), m.bg.now())
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

// flushNotifications gives each parent's pending notifications, in order, one attempt. One
// posted before (its attempt cut short by Close, say) may still be on its way into the
// server: it is posted again under its id (postOnce), which leaves one message.
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

// deliverNext makes one attempt at parent's oldest pending notifications (the first message
// notifier.groups would post) and reports whether it is done with them (each delivered,
// failed or gone). The caller has the parent.
func (m *Manager) deliverNext(ctx context.Context, parent string) (done bool) {
	m.mu.Lock()
	ob := m.notes.outboxes[parent]
	if ob == nil || len(ob.queue) == 0 {
		m.mu.Unlock()
		return false
	}
	refs := m.notes.groups(parent, ob, m.mirrors.live.Load(), m.bg.now())[0]
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
	defer m.bg.recoverAndLog("delivering a notification")
	m.mu.Lock()
	ob := m.notes.outboxes[parent]
	post := make([]pendingNote, 0, len(refs))
	var gone []noteRef
	for _, ref := range refs {
		e, note := ref.live(), ref.note()
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
	now := m.bg.now()
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
			m.notes.confirms.add(note.MessageID, posted{parent: parent, ref: p.ref, at: now})
		}
		if m.cfg.notifyPolicy == NotifyPerWave {
			note.Turn = TurnOwed
			ob.owe(p.ref, note.Created)
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
// did: notifications posted before (they share their MessageID; notifier.groups merges only
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
	parts := func(id string) []string {
		ids := make([]string, 0, len(post))
		for _, p := range post {
			visible, _ := notePartIDs(id, &p.n)
			ids = append(ids, visible)
		}
		return ids
	}
	_, confirmed, _, err = m.postOnce(ctx, parent, post[0].n.MessageID, parts, nil, func(id string) error {
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
			visible, hidden := opencode.NewText(p.n.Visible), opencode.NewSyntheticText(p.n.Hidden)
			visible.ID, hidden.ID = notePartIDs(id, &p.n)
			req.Parts = append(req.Parts, visible, hidden)
		}
		if m.cfg.notifyPolicy == NotifyPerRun {
			return false, m.client.PromptAsync(ctx, parent, req)
		}
		err = postNoReply(ctx, m.client, parent, req)
		return err == nil, err
	})
	return confirmed, err
}

// postOnce posts a message to parent, as the Manager posts notifications and turn prompts,
// so that a lost answer, a post that lands late or a host that stops never makes two
// messages: its id is chosen once, newer than the parent's newest message, and recorded
// (record) before it is posted (post); when record fails (the store could not keep the id),
// nothing is posted. prev is the id an earlier attempt recorded: found in the parent
// (GET /session/{parent}/message/{prev}) with every part id in parts (or with none made from
// prev: an older version's post), it landed, and nothing is posted (confirmed); otherwise it
// is posted again under prev, with the same part ids, which OpenCode stores in place of the
// first post's should that one land after all (an earlier attempt may have posted some of the
// message's notifications under prev: one that was handed over went without the others).
// skip, when not nil, is given the parent's newest message id and may end the attempt with
// nothing posted (skipped). It returns the id posted, or prev.
func (m *Manager) postOnce(ctx context.Context, parent, prev string, parts func(id string) []string, skip func(newest string) bool,
	record func(id string) error, post func(id string) (confirmed bool, err error)) (id string, confirmed, skipped bool, err error) {
	if prev != "" { // posted before: did it land?
		msg, err := m.client.Message(ctx, parent, prev)
		if err == nil && landed(msg, prev, parts(prev)) {
			return prev, true, false, nil // it landed; the answer was lost
		}
		if err != nil && !errors.Is(err, opencode.ErrNotFound) { // (NotFound for a parent that is gone too: the post says which)
			return "", false, false, fmt.Errorf("asyncagents: check message %s: %w", prev, err)
		}
	}
	id = prev
	if id == "" || skip != nil {
		after, err := m.notes.heads.newestBefore(ctx, m.client, parent, m.mirrors.live.Load(), m.bg.now())
		if err != nil {
			return "", false, false, err
		}
		if skip != nil && skip(after) {
			return "", false, true, nil
		}
		if id == "" {
			id = opencode.NewMessageID(m.bg.now(), after)
		}
	}
	if err := record(id); err != nil {
		return "", false, false, err
	}
	confirmed, err = post(id)
	if err != nil {
		// Not stored, or not known to be: the parent's newest message is read again before
		// the next post (were it raised to id, a retry would take its own failed prompt for a
		// newer message than the notifications it covers, and skip the turn).
		m.notes.heads.forget(parent)
	} else {
		m.notes.heads.raise(parent, id, 0)
	}
	return id, confirmed, false, err
}

// landed reports whether msg, the message posted as id, holds what a post with the part ids
// ids would: a part of each id, or no part with an id made from id at all (posted before
// parts had such ids, by an older version).
func landed(msg *opencode.Message, id string, ids []string) bool {
	ours := opencode.PartID(id, "")
	if !slices.ContainsFunc(msg.Parts, func(p opencode.Part) bool { return strings.HasPrefix(p.ID, ours) }) {
		return true
	}
	for _, id := range ids {
		if !slices.ContainsFunc(msg.Parts, func(p opencode.Part) bool { return p.ID == id }) {
			return false
		}
	}
	return true
}

// messagePoster is a Client that posts a message without decoding the answer
// (opencode.HTTPClient.PostMessage).
type messagePoster interface {
	PostMessage(ctx context.Context, sessionID string, req opencode.PromptRequest) (string, error)
}

// postNoReply posts req to session without reply (POST /session/{id}/message with noReply)
// and discards the answer, which echoes the message posted: with a client that can skip
// decoding it (a messagePoster, as opencode.HTTPClient is) it does, otherwise it is Prompt.
func postNoReply(ctx context.Context, client opencode.Client, session string, req opencode.PromptRequest) error {
	req.NoReply = true
	if p, ok := client.(messagePoster); ok {
		_, err := p.PostMessage(ctx, session, req)
		return err
	}
	_, err := client.Prompt(ctx, session, req)
	return err
}
