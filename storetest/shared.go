package storetest

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/asyncagents/asyncagents"
)

// SharedMemory is what the stores opened on it, each a [SharedStore], share, as the stores of
// several hosts share a database: the tasks, their leases, the requests to hand them over, and
// the queues and grants of the concurrency slots, the numbered changes and the tombstones of
// removed tasks, and what removed tasks used. Open a store on it for each Manager: the
// stores then behave as pgstore's stores on one database do, and pass [TestLeaseStore] as they
// do. Leases run on the system clock, the one a Manager compares Held with.
//
// It is for fast tests of several Managers sharing a store, of hosts, and of code that uses
// an [asyncagents.SlotStore] or [asyncagents.HandoffStore], without a database. It keeps
// nothing across processes (its tasks live as long as the SharedMemory), its stores never
// lose their database, and it starts no goroutines. It is safe for concurrent use.
type SharedMemory struct {
	// mu guards the shared data and every store's own (held, closed, waited): the one lock.
	mu      sync.Mutex
	tasks   map[string]*sharedTask
	slots   map[string]*slot // by task id
	queued  int64            // the number of the last task queued for a slot
	holders int64            // stores opened; each store's number is its identity

	changes uint64                       // the number of the last change
	removed map[string]tombstone         // by task id
	pruned  uint64                       // the number of the last tombstone pruned
	lastBy  map[int64]uint64             // the number of the last change of a task each store holds
	changed chan struct{}                // closed, and replaced, at every change
	cleared map[string]asyncagents.Usage // what removed tasks used, by the session they counted under
}

// sharedTask is a stored task: what pgstore keeps in a row of asyncagents_tasks.
type sharedTask struct {
	raw      []byte // the task's JSON, so that what comes in and goes out is a copy
	summary  []byte // the JSON of its summary (summarize)
	parent   string
	session  string // Task.SessionID, or the ID of a task recorded before tasks had their own ids
	anchor   string // the session it counts under: Task.AnchorSessionID, or its parent
	status   asyncagents.Status
	usage    asyncagents.Usage
	seq      uint64 // the number of its last change
	started  time.Time
	server   string    // of the store that saved it first
	holder   int64     // the number of the store holding the lease; 0 after Yield
	fence    int64     // incremented by every claim by another store
	until    time.Time // when the lease expires; the zero time after Close
	wantedBy int64     // the number of the store that wants it; 0 for none
}

// slot is a task's place in the queue of a limit key, or its slot of it.
type slot struct {
	key     string
	seq     int64
	granted bool
}

// tombstone is what is kept of a removed task: pgstore's row of asyncagents_removed.
type tombstone struct {
	seq    uint64
	holder int64 // of the task when it was removed
	at     time.Time
}

// NewSharedMemory returns an empty SharedMemory.
func NewSharedMemory() *SharedMemory {
	return &SharedMemory{tasks: map[string]*sharedTask{}, slots: map[string]*slot{}, removed: map[string]tombstone{},
		lastBy: map[int64]uint64{}, changed: make(chan struct{}), cleared: map[string]asyncagents.Usage{}}
}

// change numbers a change of row, held by row.holder now, and wakes WaitChanges.
func (m *SharedMemory) change(row *sharedTask) {
	row.seq = m.number(row.holder)
}

// number returns the number of a new change of a task held by holder, and wakes
// WaitChanges.
func (m *SharedMemory) number(holder int64) uint64 {
	m.changes++
	m.lastBy[holder] = m.changes
	close(m.changed)
	m.changed = make(chan struct{})
	return m.changes
}

// wantedFirst is how long a task that a store wants is left to it after its lease ended.
const wantedFirst = 5 * time.Second

// removedFor is how long the tombstone of a removed task is kept, as pgstore keeps it.
const removedFor = time.Hour

// Open returns a new store on m, with a holder identity of its own. Errors: a lease that is
// not positive (matching [asyncagents.ErrInvalidInput]).
func (m *SharedMemory) Open(opts ...SharedOption) (*SharedStore, error) {
	cfg := defaultSharedConfig()
	for _, o := range opts {
		o.applyShared(&cfg)
	}
	if cfg.lease <= 0 {
		return nil, fmt.Errorf("%w: storetest: lease %v is not positive", asyncagents.ErrInvalidInput, cfg.lease)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.holders++
	return &SharedStore{mem: m, holder: m.holders, server: cfg.server, lease: cfg.lease, held: map[string]heldLease{}}, nil
}

// SharedStore is a store on a [SharedMemory]: an [asyncagents.SlotStore],
// [asyncagents.HandoffStore] and [asyncagents.LimitStore] (and so a LeaseStore and Store) that
// keeps pgstore's semantics in memory. Every task it returns is a copy, decoded from the JSON
// it saved, so DisplayID and QueuePosition are not kept. It holds a lease until two thirds of
// the lease duration after the start of the last call that took or renewed it, and learns
// that it lost one from [SharedStore.Renew] or [SharedStore.Save], as pgstore's stores do. It
// is safe for concurrent use; its methods return an error after [SharedStore.Close].
type SharedStore struct {
	mem    *SharedMemory
	holder int64
	server string
	lease  time.Duration

	// guarded by mem.mu
	held   map[string]heldLease
	closed bool
	waited uint64 // the number of the last change when WaitChanges last returned
	waits  bool   // WaitChanges was called
}

// heldLease is what a store knows of a lease it holds.
type heldLease struct {
	fence int64
	until time.Time // Held's answer
}

var (
	_ asyncagents.SlotStore    = (*SharedStore)(nil)
	_ asyncagents.HandoffStore = (*SharedStore)(nil)
	_ asyncagents.LimitStore   = (*SharedStore)(nil)
	_ io.Closer                = (*SharedStore)(nil)
)

// errClosed is the error of a SharedStore's methods after Close.
var errClosed = errors.New("storetest: shared store closed")

// lock locks the shared data and returns the time, or returns errClosed after Close.
func (s *SharedStore) lock() (time.Time, error) {
	s.mem.mu.Lock()
	if s.closed {
		s.mem.mu.Unlock()
		return time.Time{}, errClosed
	}
	return time.Now(), nil
}

func (s *SharedStore) unlock() { s.mem.mu.Unlock() }

// valid returns until when a lease taken or renewed at now is held.
func (s *SharedStore) valid(now time.Time) time.Time { return now.Add(s.lease * 2 / 3) }

// LeaseDuration returns the lease duration (WithLease).
func (s *SharedStore) LeaseDuration() time.Duration { return s.lease }

// Server returns the name of the store's OpenCode server (WithServer).
func (s *SharedStore) Server() string { return s.server }

// Held returns until when the store holds task id's lease (two thirds of the lease duration
// after the start of the last call that took or renewed it), or the zero time when it does not
// hold it, as far as it knows.
func (s *SharedStore) Held(id string) time.Time {
	s.mem.mu.Lock()
	defer s.mem.mu.Unlock()
	return s.held[id].until
}

// Load returns the tasks this store holds and claims those whose leases expired, as Claim
// does, oldest first.
func (s *SharedStore) Load(context.Context) ([]asyncagents.Task, error) { return s.claim(true) }

// Claim takes the tasks of the store's server whose leases expired and returns them, oldest
// first. A task another store wants ([SharedStore.Want]) is left to that store for 5 s after
// its lease ended. A task that changes holder is a change ([SharedStore.Changes]).
func (s *SharedStore) Claim(context.Context) ([]asyncagents.Task, error) { return s.claim(false) }

// claim is Claim; with own (Load's), the tasks this store holds are returned too.
func (s *SharedStore) claim(own bool) ([]asyncagents.Task, error) {
	now, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer s.unlock()
	var ids []string
	for id, row := range s.mem.tasks {
		if row.server == s.server && (own && row.holder == s.holder || s.claimable(row, now)) {
			ids = append(ids, id)
		}
	}
	s.mem.sortOldestFirst(ids)
	for _, id := range ids {
		row := s.mem.tasks[id]
		if row.holder != s.holder {
			row.fence++
			row.holder = s.holder
			s.mem.change(row)
		}
		row.until, row.wantedBy = now.Add(s.lease), 0
		s.held[id] = heldLease{fence: row.fence, until: s.valid(now)}
	}
	return s.mem.decode(ids)
}

// claimable reports whether s may claim row at now: its lease expired, and it is wanted by
// no other store, or was left to it for wantedFirst.
func (s *SharedStore) claimable(row *sharedTask, now time.Time) bool {
	if row.until.After(now) {
		return false
	}
	return row.wantedBy == 0 || row.wantedBy == s.holder || row.until.Before(now.Add(-wantedFirst))
}

// sortOldestFirst sorts task ids by their tasks' Started, then by id.
func (m *SharedMemory) sortOldestFirst(ids []string) {
	slices.SortFunc(ids, func(a, b string) int {
		return cmp.Or(m.tasks[a].started.Compare(m.tasks[b].started), cmp.Compare(a, b))
	})
}

// decode returns copies of tasks ids, in that order.
func (m *SharedMemory) decode(ids []string) ([]asyncagents.Task, error) {
	out := make([]asyncagents.Task, len(ids))
	for i, id := range ids {
		if err := json.Unmarshal(m.tasks[id].raw, &out[i]); err != nil {
			return nil, fmt.Errorf("storetest: task %s: %w", id, err)
		}
	}
	return out, nil
}

// Renew extends the leases this store holds and returns the ids of those it no longer holds
// (claimed by another store, or deleted by one), sorted.
func (s *SharedStore) Renew(context.Context) ([]string, error) {
	now, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer s.unlock()
	for _, row := range s.mem.tasks {
		if row.holder == s.holder {
			row.until = now.Add(s.lease)
		}
	}
	var lost []string
	for id, l := range s.held {
		if row := s.mem.tasks[id]; row == nil || row.holder != s.holder || row.fence != l.fence {
			lost = append(lost, id)
			delete(s.held, id)
			continue
		}
		s.held[id] = heldLease{fence: l.fence, until: s.valid(now)}
	}
	slices.Sort(lost)
	return lost, nil
}

// Save stores a copy of t (its JSON) with a new lease held by this store, or replaces the task
// when this store holds its lease, and extends the lease. A new task is marked with the
// store's server. The save of an ended task ([asyncagents.Status.Terminal]) gives back its
// concurrency slot. Errors: one matching [asyncagents.ErrLeaseLost] when the task exists and
// this store does not hold its lease, and nothing is changed then; t's JSON encoding's.
func (s *SharedStore) Save(_ context.Context, t asyncagents.Task) error { return s.save(t, nil) }

// save is Save; with a check (Admit's), it saves t only when check, called under mem.mu,
// returns nil.
func (s *SharedStore) save(t asyncagents.Task, check func() error) error {
	raw, err := json.Marshal(t)
	var summary []byte
	if err == nil {
		summary, err = json.Marshal(summarize(t))
	}
	if err != nil {
		return fmt.Errorf("storetest: save %s: %w", t.ID, err)
	}
	now, err := s.lock()
	if err != nil {
		return err
	}
	defer s.unlock()
	if check != nil {
		if err := check(); err != nil {
			return err
		}
	}
	fence := int64(1) // the fence this store knows, as pgstore's Save checks it
	if l, ok := s.held[t.ID]; ok {
		fence = l.fence
	}
	row := s.mem.tasks[t.ID]
	if row == nil {
		row = &sharedTask{server: s.server, holder: s.holder, fence: 1}
		s.mem.tasks[t.ID] = row
	} else if row.holder != s.holder || row.fence != fence {
		delete(s.held, t.ID)
		return fmt.Errorf("%w: %s", asyncagents.ErrLeaseLost, t.ID)
	}
	row.raw, row.summary, row.parent, row.started, row.until = raw, summary, t.ParentSessionID, t.Started, now.Add(s.lease)
	row.anchor, row.status, row.usage = cmp.Or(t.AnchorSessionID, t.ParentSessionID), t.Status, t.Usage
	row.session = t.SessionID
	if row.session == "" && strings.HasPrefix(t.ID, "ses_") {
		row.session = t.ID
	}
	s.mem.change(row)
	if t.Status.Terminal() {
		delete(s.mem.slots, t.ID)
	}
	s.held[t.ID] = heldLease{fence: row.fence, until: s.valid(now)}
	return nil
}

// Delete removes tasks by id, whoever holds them, and their slots; unknown ids are ignored.
// What a task used is added to what the session it counted under ([asyncagents.Task]'s
// AnchorSessionID, or its parent) had cleared, which TreeUsage counts; a tombstone, kept an
// hour, marks it removed for [SharedStore.Changes].
func (s *SharedStore) Delete(_ context.Context, ids ...string) error {
	now, err := s.lock()
	if err != nil {
		return err
	}
	defer s.unlock()
	m := s.mem
	for _, id := range ids {
		if row := m.tasks[id]; row != nil {
			m.removed[id] = tombstone{seq: m.number(row.holder), holder: row.holder, at: now}
			if !row.usage.IsZero() {
				m.cleared[row.anchor] = m.cleared[row.anchor].Add(row.usage)
			}
		}
		delete(m.tasks, id)
		delete(m.slots, id)
		delete(s.held, id)
	}
	for id, ts := range m.removed {
		if ts.at.Before(now.Add(-removedFor)) {
			m.pruned = max(m.pruned, ts.seq)
			delete(m.removed, id)
		}
	}
	return nil
}

// Tasks returns copies of the stored tasks of parent session parent, or of every task for "",
// whoever holds them, oldest first.
func (s *SharedStore) Tasks(_ context.Context, parent string) ([]asyncagents.Task, error) {
	if _, err := s.lock(); err != nil {
		return nil, err
	}
	defer s.unlock()
	var ids []string
	for id, row := range s.mem.tasks {
		if parent == "" || row.parent == parent {
			ids = append(ids, id)
		}
	}
	s.mem.sortOldestFirst(ids)
	return s.mem.decode(ids)
}

// Want asks the holder of task id to hand it over: the holder sees it in
// [SharedStore.Wanted], and this store's next Claim after the holder yields it (or its lease
// expires) takes it; other stores wait 5 s. A store's Want of a task it holds, or that does
// not exist, does nothing.
func (s *SharedStore) Want(_ context.Context, id string) error {
	if _, err := s.lock(); err != nil {
		return err
	}
	defer s.unlock()
	if row := s.mem.tasks[id]; row != nil && row.holder != s.holder {
		row.wantedBy = s.holder
	}
	return nil
}

// Wanted returns the ids of the tasks this store holds that another store wants, sorted.
func (s *SharedStore) Wanted(context.Context) ([]string, error) {
	if _, err := s.lock(); err != nil {
		return nil, err
	}
	defer s.unlock()
	var ids []string
	for id, row := range s.mem.tasks {
		if row.holder == s.holder && row.wantedBy != 0 && row.wantedBy != s.holder {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// Yield gives up this store's leases on tasks ids at once: their leases end now and they have
// no holder, so no renewal or save of this store takes them back. A task given up is a change
// ([SharedStore.Changes]), for every store, this one included.
func (s *SharedStore) Yield(_ context.Context, ids ...string) error {
	now, err := s.lock()
	if err != nil {
		return err
	}
	defer s.unlock()
	for _, id := range ids {
		delete(s.held, id)
		if row := s.mem.tasks[id]; row != nil && row.holder == s.holder {
			row.holder, row.until = 0, now
			s.mem.change(row)
		}
	}
	return nil
}

// holdsNow reports whether the store holds task id now, at now: it is the holder, with the
// fence it knows, and the lease has not expired.
func (s *SharedStore) holdsNow(id string, now time.Time) bool {
	row, l := s.mem.tasks[id], s.held[id]
	return row != nil && row.holder == s.holder && row.fence == l.fence && row.until.After(now)
}

// ended reports whether task id is gone or ended: its slot counts for nothing.
func (m *SharedMemory) ended(id string) bool {
	row := m.tasks[id]
	return row == nil || row.status.Terminal()
}

// Slots queues the tasks of waiting that this store holds now and that are queued
// ([asyncagents.StatusQueued]) for a slot of the limit key, in that order, after those queued
// before by any store on the SharedMemory; gives the free slots of key (at most limit held at
// once by tasks that have not ended) to the oldest tasks queued for it that are still queued
// and whose holders' leases run; and returns the ids of waiting that this store holds now and
// that hold a slot, in the order of waiting. The slots of tasks that ended or are gone count
// for nothing and are given back; a task queued for another key stays there. As pgstore's
// Slots, it is fenced: a store that does not hold a task now (another claimed it) neither
// queues it nor learns its grant.
func (s *SharedStore) Slots(_ context.Context, key string, limit int, waiting []string) ([]string, error) {
	now, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer s.unlock()
	m := s.mem
	for id, sl := range m.slots {
		if sl.key == key && m.ended(id) {
			delete(m.slots, id)
		}
	}
	for _, id := range waiting {
		if m.slots[id] == nil && s.holdsNow(id, now) && m.tasks[id].status == asyncagents.StatusQueued {
			m.queued++
			m.slots[id] = &slot{key: key, seq: m.queued}
		}
	}
	var queued []*slot
	free := limit
	for id, sl := range m.slots {
		row := m.tasks[id]
		switch {
		case sl.key != key:
		case sl.granted:
			free--
		case row.status == asyncagents.StatusQueued && row.holder != 0 && row.until.After(now):
			queued = append(queued, sl)
		}
	}
	slices.SortFunc(queued, func(a, b *slot) int { return cmp.Compare(a.seq, b.seq) })
	for _, sl := range queued[:max(0, min(free, len(queued)))] {
		sl.granted = true
	}
	var granted []string
	for _, id := range waiting {
		if sl := m.slots[id]; sl != nil && sl.granted && s.holdsNow(id, now) && !slices.Contains(granted, id) {
			granted = append(granted, id)
		}
	}
	return granted, nil
}

// Release gives back the slots of tasks ids, or takes them out of their queues: those of the
// tasks this store holds now, and those of tasks that ended or are gone; unknown ids are
// ignored. The slot of a task another store holds, or that no store holds now, is left to its
// holder.
func (s *SharedStore) Release(_ context.Context, ids ...string) error {
	now, err := s.lock()
	if err != nil {
		return err
	}
	defer s.unlock()
	for _, id := range ids {
		if s.mem.ended(id) || s.holdsNow(id, now) {
			delete(s.mem.slots, id)
		}
	}
	return nil
}

// Close gives up the store's leases, so that another store can claim its tasks at once, as
// pgstore's Close does. Later calls of its methods return an error; Close again does nothing.
func (s *SharedStore) Close() error {
	s.mem.mu.Lock()
	defer s.mem.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	close(s.mem.changed) // a WaitChanges of s returns
	s.mem.changed = make(chan struct{})
	for _, row := range s.mem.tasks {
		if row.holder == s.holder {
			row.until = time.Time{}
		}
	}
	clear(s.held)
	return nil
}
