package asyncagents

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/asyncagents/asyncagents/manager"
)

// sharedHosts is the hosts part of a Manager on a [LeaseStore]: it acts on a task only while
// its store holds the task's lease; its lease loop renews the leases every third of the lease
// duration, claims expired ones every second, and, with a [HandoffStore], hands over the tasks
// other hosts ask for and publishes their tasks' changes to the Manager's subscribers. A task
// whose lease is lost (reported by Renew, or by a Save) is dropped from memory (dropLost), and
// claimed tasks are taken in as New takes stored ones (adopt). It acts on the Manager's tasks
// under Manager.mu, through m.
type sharedHosts struct {
	m  *Manager
	ls LeaseStore
	hs HandoffStore // nil when the store hands nothing over

	// others are the tasks other hosts hold, as summaries (HandoffStore.Changes): their ids
	// are foreign ids of the task set's registry, and the change feed and ListAll show them.
	// Guarded by Manager.mu.
	others    map[string]Task
	inSession map[string]string // the ids of others by their sessions

	following sync.Mutex // one follow at a time (never under Manager.mu)
	after     uint64     // the number of the last change read (under following)
}

func (h *sharedHosts) server() string { return h.ls.Server() }

func (h *sharedHosts) start() {
	h.m.bg.keep("renewing and claiming leases", h.leaseLoop)
	if h.hs != nil {
		h.m.bg.keep("following other hosts' tasks", h.followLoop)
	}
}

func (h *sharedHosts) other(session string) (Task, bool) {
	t, ok := h.others[h.inSession[session]]
	return t, ok
}

func (h *sharedHosts) launched(parent, key string) (Task, bool) {
	for _, t := range h.others {
		if t.ParentSessionID == parent && t.LaunchKey == key {
			return t, true
		}
	}
	return Task{}, false
}

func (h *sharedHosts) tree(ctx context.Context, s, parent string) (task Task, isTask, hasTasks bool, err error) {
	if h.hs == nil {
		return Task{}, false, false, nil
	}
	if parent != "" {
		siblings, err := h.hs.Tasks(ctx, parent)
		if err != nil {
			return Task{}, false, false, err
		}
		for _, t := range siblings {
			if t.upgrade(); t.SessionID == s {
				return t, true, false, nil
			}
		}
	}
	children, err := h.hs.Tasks(ctx, s)
	return Task{}, false, len(children) > 0, err
}

// heldUntil returns until when the Manager may act on task id, and false when it holds no
// lease on it.
func (h *sharedHosts) heldUntil(id string) (time.Time, bool) {
	until := h.ls.Held(id)
	return until, !until.IsZero() && time.Now().Before(until)
}

// act returns the entries of ids, each counted once more as acted on (hold.acting), and a
// context that ends when the first lease could lapse.
func (h *sharedHosts) act(ctx context.Context, ids []string) (context.Context, context.CancelFunc, []*entry, error) {
	m := h.m
	var first time.Time
	m.mu.Lock()
	defer m.mu.Unlock()
	var acting []*entry
	for _, id := range ids {
		until, ok := h.heldUntil(id)
		e := m.tasks.byID[id]
		if !ok || e == nil || e.hold.lost { // gone here (cleared, handed over): not ours to act on
			releaseLocked(acting)
			return nil, nil, nil, fmt.Errorf("%w: %s", ErrLeaseLost, id)
		}
		e.hold.acting++
		acting = append(acting, e)
		if first.IsZero() || until.Before(first) {
			first = until
		}
	}
	ctx, cancel := context.WithDeadline(ctx, first)
	return ctx, cancel, acting, nil
}

// claimEvery bounds the time between two claims of expired leases, so that a dead host's
// tasks are claimed within a second of their leases' expiry.
const claimEvery = time.Second

// leaseLoop renews the leases every third of the lease duration and claims expired ones
// every claimEvery (or third of the lease, when shorter) until the Manager closes.
func (h *sharedHosts) leaseLoop() {
	m, ls := h.m, h.ls
	renewEvery, every := h.every()
	renewed := m.bg.now()
	for m.bg.wait(every) {
		ctx, cancel := context.WithTimeout(m.bg.ctx, renewEvery)
		if m.bg.now().Sub(renewed) >= renewEvery-every/2 {
			renewed = m.bg.now()
			lost, err := ls.Renew(ctx)
			if err != nil {
				m.cfg.logger.Warn("asyncagents: renew leases", "err", err)
			}
			if len(lost) > 0 {
				m.dropLost(lost...)
			}
		}
		if hs := h.hs; hs != nil {
			wanted, err := hs.Wanted(ctx)
			if err != nil {
				m.cfg.logger.Warn("asyncagents: tasks wanted by other hosts", "err", err)
			}
			for _, id := range wanted {
				m.mu.Lock()
				e := m.tasks.byID[id]
				// A task that starts is handed over once its start is over: the host that took it
				// would take it for one a stopped host left starting.
				handing := e != nil && !e.hold.lost && !e.task.Starting && !m.bg.now().Before(e.hold.retryAt)
				if handing {
					e.hold.lost = true // stops new requests on it; handOver waits for the others
				}
				m.mu.Unlock()
				if handing { // on a goroutine of its own: the renewals must go on meanwhile
					m.bg.spawn("handing a task over", func() { h.handOver(e) })
				}
			}
		}
		claimed, err := ls.Claim(ctx)
		cancel()
		if err != nil {
			m.cfg.logger.Warn("asyncagents: claim expired leases", "err", err)
		}
		if len(claimed) > 0 {
			m.adopt(claimed)
		}
	}
}

// every returns how often the leases are renewed, and how often the lease loop looks (renews
// when due, hands over the tasks other hosts want, claims expired leases).
func (h *sharedHosts) every() (renew, look time.Duration) {
	renew = h.ls.LeaseDuration() / 3
	return renew, min(renew, claimEvery)
}

// maxHandoverWaits bounds the wait before a failed handover is tried again, in looks of the
// lease loop: well within the time a pull waits (pullTimeout).
const maxHandoverWaits = 8

// handOver gives task e, marked lost, to the host that wants it: it waits for the requests in
// flight on it (each bounded by the lease), stores its newest record, forgets it and yields
// its lease. When the record cannot be stored (the database is unreachable), it keeps the
// task and acts on it again; the other host's request, still in the store, is taken up again
// at a later look of the lease loop: the next one after the first failure, then one twice as
// long after each further failure, up to maxHandoverWaits looks' time.
func (h *sharedHosts) handOver(e *entry) {
	m := h.m
	for {
		m.mu.Lock()
		n := e.hold.acting
		m.mu.Unlock()
		if n == 0 {
			break
		}
		if !m.bg.wait(10 * time.Millisecond) {
			return // closing: the lease expires
		}
	}
	if err := m.persist(e); err != nil {
		m.mu.Lock()
		kept := !lostLease(err) && !e.removed // lost: persist dropped it, and its new holder has it
		if kept {
			e.hold.lost = false // renewed with the others: marked lost, no one would act on it
			_, look := h.every()
			if m.bg.now().Sub(e.hold.retryAt) > maxHandoverWaits*look { // the last failure is long past
				e.hold.retryWait = 0
			}
			e.hold.retryWait = min(max(2*e.hold.retryWait, look), maxHandoverWaits*look)
			e.hold.retryAt = m.bg.now().Add(e.hold.retryWait - look/2) // due at the look that comes then
		}
		m.mu.Unlock()
		if kept {
			m.sendFollowUp(e) // one kept while it was being handed over
		}
		return
	}
	e.save.mu.Lock()
	m.mu.Lock()
	if e.removed { // cleared meanwhile: its row is deleted
		m.mu.Unlock()
		e.save.mu.Unlock()
		return
	}
	id := e.task.ID
	start := m.removeLocked(e) // no save after this one: persist now says ErrLeaseLost
	m.mu.Unlock()
	e.save.mu.Unlock()
	m.startQueued(start)
	ctx, cancel := m.bg.requestCtx()
	defer cancel()
	if err := h.hs.Yield(ctx, id); err != nil {
		m.cfg.logger.Warn("asyncagents: yield a task's lease", "task", id, "err", err)
	}
	m.cfg.logger.Info("asyncagents: task handed over to another host", "task", id)
}

// pullTimeout bounds how long an operation waits for a task another host holds.
const pullTimeout = 15 * time.Second

// pull takes over the caller's task id (a full id or a prefix) from the host that holds it,
// when the Manager does not have it and its store is a HandoffStore: it asks for it and
// claims it once the holder yields it (or its lease expires), for at most pullTimeout or
// until ctx ends. It does nothing when the task is here, or is none of the caller's.
func (h *sharedHosts) pull(ctx context.Context, caller Caller, id string) {
	m, hs := h.m, h.hs
	if hs == nil {
		return
	}
	m.mu.Lock()
	_, err := m.tasks.lookup(caller, id)
	m.mu.Unlock()
	if !errors.Is(err, ErrTaskNotFound) {
		return
	}
	qctx, cancel := m.bg.quickCtx()
	tasks, err := hs.Tasks(qctx, caller.SessionID)
	cancel()
	if err != nil {
		return
	}
	var matched []Task
	for _, t := range tasks {
		if t.Server != h.server() {
			continue // a host of its own server must act on it
		}
		if t.ID == id || slices.ContainsFunc(manager.Candidates(id), func(full string) bool { return strings.HasPrefix(t.ID, full) }) {
			matched = append(matched, t)
		}
	}
	switch len(matched) {
	case 0:
	case 1:
		h.pullIDs(ctx, []string{matched[0].ID})
	default:
		// A prefix of several: taskSet.lookup says so, once it knows them all. A task another
		// host launched a moment ago may not have reached this one's feed yet, and the prefix
		// would name the one task this host knows.
		m.mu.Lock()
		for i := range matched {
			m.addForeignLocked(&matched[i])
		}
		m.mu.Unlock()
	}
}

// addForeignLocked records t, a stored task another host holds, as a foreign task of the
// registry, unless this Manager holds it or the record fails its checks (the shared store is
// input: such a record is not shown). It reports whether t is known as foreign now.
func (m *Manager) addForeignLocked(t *Task) bool {
	if m.tasks.byID[t.ID] != nil || checkRecord(t) != nil || checkSeal(t, m.cfg.recordKey) != nil {
		return false
	}
	m.tasks.reg.AddForeign(t.ParentSessionID, t.ID)
	return true
}

// pullIDs takes over tasks ids from the hosts that hold them (see pull).
func (h *sharedHosts) pullIDs(ctx context.Context, ids []string) {
	m, hs := h.m, h.hs
	ctx, cancel := context.WithTimeout(ctx, pullTimeout)
	defer cancel()
	for _, id := range ids {
		if err := hs.Want(ctx, id); err != nil {
			m.cfg.logger.Warn("asyncagents: ask for a task", "task", id, "err", err)
			return
		}
	}
	for {
		claimed, err := hs.Claim(ctx)
		if err == nil && len(claimed) > 0 {
			m.adopt(claimed)
		}
		m.mu.Lock()
		here := true
		for _, id := range ids {
			here = here && m.tasks.byID[id] != nil
		}
		m.mu.Unlock()
		if here {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-m.bg.stopc:
			return
		case <-m.bg.clock.After(100 * time.Millisecond):
		}
	}
}

// pullAll takes over every task of the caller that another host of the same server holds
// (those of other servers are their hosts' to act on).
func (h *sharedHosts) pullAll(ctx context.Context, caller Caller) {
	if h.hs == nil {
		return
	}
	var ids []string
	for _, t := range h.remote(caller.SessionID) {
		if t.Server == h.server() {
			ids = append(ids, t.ID)
		}
	}
	if len(ids) > 0 {
		h.pullIDs(ctx, ids)
	}
}

// remote returns the stored tasks of parent ("" for all) that other hosts hold, read from a
// HandoffStore (nil without one, or when the read fails: it is logged), with their DisplayID
// set to their id.
func (h *sharedHosts) remote(parent string) []Task {
	m, hs := h.m, h.hs
	if hs == nil {
		return nil
	}
	if parent == "" { // every host's: the summaries the follow loop keeps, brought up to date
		h.follow()
		m.mu.Lock()
		defer m.mu.Unlock()
		out := make([]Task, 0, len(h.others))
		for _, t := range h.others {
			t.DisplayID = m.tasks.reg.DisplayID(t.ID)
			out = append(out, t)
		}
		return out
	}
	ctx, cancel := m.bg.quickCtx()
	defer cancel()
	stored, err := hs.Tasks(ctx, parent)
	if err != nil {
		m.cfg.logger.Warn("asyncagents: read other hosts' tasks", "err", err)
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Task
	for _, t := range stored {
		if m.addForeignLocked(&t) { // known now: display ids are unique among them
			t.upgrade()
			out = append(out, t)
		}
	}
	for i := range out {
		out[i].DisplayID = m.tasks.reg.DisplayID(out[i].ID)
	}
	return out
}

// followBatch bounds the changes of other hosts' tasks one read takes.
const followBatch = 500

// followLoop follows the tasks other hosts hold until the Manager closes: every claimEvery it
// reads what changed since its last read (HandoffStore.Changes: other hosts' rows only,
// summaries, at most followBatch a read), on a goroutine of its own, so that renewals and
// claims never wait for it. (pgstore's WaitChanges could wake it sooner; it is not used yet: a
// listening connection stuck behind a cut network kept a cut-off host from dropping its tasks
// in time.)
func (h *sharedHosts) followLoop() {
	for {
		h.follow()
		if !h.m.bg.wait(claimEvery) {
			return
		}
	}
}

// follow reads the changes since its last read, until it has them all, and takes them in; one
// at a time. A reader that fell too far behind (ErrLagged: the store no longer has the changes
// it missed) reads every task again and replaces what it kept.
func (h *sharedHosts) follow() {
	m := h.m
	h.following.Lock()
	defer h.following.Unlock()
	for {
		ctx, cancel := m.bg.quickCtx()
		changes, next, err := h.hs.Changes(ctx, h.after, followBatch)
		cancel()
		if errors.Is(err, ErrLagged) && h.after != 0 {
			m.mu.Lock()
			for id := range h.others {
				m.tasks.reg.RemoveForeign(id)
			}
			h.others, h.inSession = nil, nil
			m.mu.Unlock()
			h.after = 0
			continue
		}
		if err != nil {
			if m.bg.ctx.Err() == nil {
				m.cfg.logger.Warn("asyncagents: read other hosts' task changes", "err", err)
			}
			return
		}
		m.mu.Lock()
		for _, c := range changes {
			h.takeChangeLocked(c)
		}
		m.mu.Unlock()
		if next == h.after {
			return
		}
		h.after = next
	}
}

// takeChangeLocked takes in one change of a task another host holds: it is kept (a foreign id
// of its parent, a summary for ListAll) or forgotten (deleted, or a record out of shape), and
// published to the subscribers. A task held here is the Manager's own to publish. A summary's
// seal is the whole record's: it is checked when the task is claimed, never for a summary,
// which is only shown.
func (h *sharedHosts) takeChangeLocked(c Change) {
	m, t := h.m, c.Task
	if m.tasks.has(t.ID) {
		return
	}
	if h.others == nil {
		h.others, h.inSession = map[string]Task{}, map[string]string{}
	}
	was, known := h.others[t.ID]
	if known && h.inSession[was.SessionID] == t.ID {
		delete(h.inSession, was.SessionID)
	}
	if c.Removed || checkRecord(&t) != nil {
		if known {
			delete(h.others, t.ID)
			m.tasks.reg.RemoveForeign(t.ID)
			was.DisplayID = t.ID
			m.feed.publish(was, true, true)
		}
		return
	}
	t.upgrade()
	h.others[t.ID] = t
	if t.SessionID != "" {
		h.inSession[t.SessionID] = t.ID
	}
	m.tasks.reg.AddForeign(t.ParentSessionID, t.ID)
	if len(m.feed.subs) > 0 {
		t.DisplayID = m.tasks.reg.DisplayID(t.ID)
		m.feed.publish(t, false, true)
	}
}
