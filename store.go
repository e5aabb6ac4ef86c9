package asyncagents

import (
	"context"
	"sync"
	"time"
)

// Store keeps task records so that a new [Manager] (after a host restart) knows the tasks of
// the last one. The Manager saves a task after every change, outside its own lock, one save
// at a time per task and in order, so a later save always carries a newer record; it deletes
// the tasks that [Manager.Clear] removes. Implementations must be safe for concurrent use.
type Store interface {
	// Load returns every stored task; New calls it once.
	Load(ctx context.Context) ([]Task, error)
	// Save inserts or replaces the task with t.ID.
	Save(ctx context.Context, t Task) error
	// Delete removes tasks; unknown ids are ignored.
	Delete(ctx context.Context, ids ...string) error
}

// A LeaseStore is a [Store] that several Managers share, on one host or several: each
// task is held by one store at a time, under a lease that the holder renews and that
// expires when it stops renewing (its host died, or lost the database). A Manager on a
// LeaseStore acts on a task — aborts it, posts its notifications — only before the instant
// [LeaseStore.Held] gives, and bounds those requests by it; it renews every third of
// [LeaseStore.LeaseDuration], claims the tasks whose leases expired every second (or third
// of the lease, when shorter), and drops a task from its memory when the store reports the
// lease lost.
//
// Load returns the tasks that the new store claims (the expired ones, as [LeaseStore.Claim]
// does). Save of a task the store does not hold returns an error matching [ErrLeaseLost]
// and stores nothing; Save of a new task id takes its lease, and Save of a task it holds
// extends the lease. Delete removes tasks whoever holds them. A store that is an [io.Closer]
// gives up its leases when closed, so that another store claims its tasks at once.
type LeaseStore interface {
	Store
	// Claim takes over the tasks of its server whose leases have expired and returns them,
	// now held by this store, oldest first; a store may take a bounded number per call (the
	// rest at the next).
	Claim(ctx context.Context) ([]Task, error)
	// Renew extends every lease this store holds and returns the ids of the tasks it held
	// and no longer does (another store claimed them, or they were deleted).
	Renew(ctx context.Context) (lost []string, err error)
	// Held returns the instant, by the local clock, until which the store holds task id's
	// lease: a safety margin before the lease could expire unrenewed, so that a host cut
	// off from the database stops acting before another can claim its tasks. It returns
	// the zero time for a task the store does not hold.
	Held(id string) time.Time
	// LeaseDuration returns how long a lease lasts unrenewed.
	LeaseDuration() time.Duration
	// Server names the OpenCode server of the Managers on this store: it claims only the
	// tasks of that server, and the Manager records it on the tasks it launches
	// (Task.Server), so that Managers in front of several servers can share one database.
	Server() string
}

// A SlotStore is a [LeaseStore] that also keeps the concurrency slots of [Limits], so that
// a limit bounds the tasks running on every host that shares the store, and queued tasks
// start in launch order across hosts. A Manager on a SlotStore queues a task over a limit
// in the store and starts it when [SlotStore.Slots] grants it a slot; it gives the slot
// back with [SlotStore.Release] when the run ends. A Save of a task in a terminal state, and
// a Delete, give back its slot too, so that a slot is not lost when its host stops between
// the two. Every Manager sharing the store must have the same limits.
type SlotStore interface {
	LeaseStore
	// Slots queues the tasks waiting (in that order, after those queued before, by any
	// store) for a slot of the limit key, gives the free slots of key (at most limit held
	// at once) to the oldest tasks queued for it, whoever holds them, and returns the ids
	// of waiting that hold a slot now.
	Slots(ctx context.Context, key string, limit int, waiting []string) (granted []string, err error)
	// Release gives back the slots of tasks ids, or takes them out of their queues.
	Release(ctx context.Context, ids ...string) error
}

// A HandoffStore is a [LeaseStore] whose tasks a Manager can read whoever holds them, and
// ask to be handed over, so that every operation works on any host: [Manager.List] and
// [Manager.ListAll] include the tasks other hosts hold, and [Manager.Output],
// [Manager.Cancel], [Manager.Resume] and [Manager.Clear] on a task another host holds first
// take it over (the holder stops acting on it and yields its lease, within about a second
// and a half; a dead holder's lease first expires), then act on it here.
type HandoffStore interface {
	LeaseStore
	// Tasks returns the stored tasks of parent session parent ("" for every task),
	// whoever holds them.
	Tasks(ctx context.Context, parent string) ([]Task, error)
	// Want asks the holder of task id to hand it over to this store; this store's next
	// Claim after the holder yields it (or its lease expires) takes it, before others.
	Want(ctx context.Context, id string) error
	// Wanted returns the ids of the tasks this store holds that another store wants.
	Wanted(ctx context.Context) ([]string, error)
	// Yield gives up this store's leases on tasks ids at once.
	Yield(ctx context.Context, ids ...string) error
	// Changes returns, oldest first and at most limit of them, the changes of the tasks that
	// other stores hold made after the change numbered after (0: every such task as it is
	// now), and the number to ask after next time: after itself only when nothing changed (a
	// page of fewer than limit changes, or none, may have more after it). Each store's writes
	// are numbered in one sequence that only grows, so a reader that asks again with the
	// number it got misses no change and reads none twice. A change's Task is a summary: its
	// Prompt, Result, FollowUps and Notifications are left out, and its other text fields
	// bounded as a Manager bounds them; Removed (with the Task's ID) marks a task deleted.
	// Change.Seq is the store's number of the change. It returns an error matching ErrLagged
	// when the store no longer has the changes after after (the reader reads from 0 again),
	// and one matching ErrInvalidInput for a limit under 1.
	Changes(ctx context.Context, after uint64, limit int) ([]Change, uint64, error)
}

// A LimitStore is a [LeaseStore] that admits new tasks under the per-parent cap and tree
// budget of every Manager on it ([WithMaxActivePerParent], [WithTreeBudget]), counting the
// tasks of every store, so that a limit holds whichever host launches. It also keeps what
// deleted tasks used, for the tree budgets.
type LimitStore interface {
	LeaseStore
	// Admit saves the new task t, or the ended task t resumed (the store has it ended),
	// taking its lease as Save does, unless its parent, or the session it counts under
	// (t.AnchorSessionID), has perParent or more active tasks (queued, running or resumed)
	// on any store (an error matching ErrTaskLimit; perParent 0:
	// no cap), or the tasks below that session, or below a session above it (through the
	// tasks' own anchors and parents), used budget (an error matching ErrBudget; a zero budget
	// bounds nothing). Tasks deleted still count for what they used. The check and the save
	// are one transaction: two launches at once on two stores never both pass a cap of one.
	// A refused resume leaves the record and its lease as they were.
	Admit(ctx context.Context, t Task, perParent int, budget Budget) error
	// TreeUsage returns what the tasks below session used, on every store, deleted ones
	// included.
	TreeUsage(ctx context.Context, session string) (Usage, error)
}

// MemoryStore is a [Store] in memory, the default: tasks live as long as the process.
// The zero value is ready; it is safe for concurrent use.
type MemoryStore struct {
	mu    sync.Mutex
	tasks map[string]Task
}

var _ Store = (*MemoryStore)(nil)

// Load returns copies of the stored tasks, in no particular order.
func (s *MemoryStore) Load(context.Context) ([]Task, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Task, 0, len(s.tasks))
	for _, t := range s.tasks {
		out = append(out, t.clone())
	}
	return out, nil
}

// Save stores a copy of t.
func (s *MemoryStore) Save(_ context.Context, t Task) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tasks == nil {
		s.tasks = map[string]Task{}
	}
	s.tasks[t.ID] = t.clone()
	return nil
}

// Delete removes tasks by id.
func (s *MemoryStore) Delete(_ context.Context, ids ...string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		delete(s.tasks, id)
	}
	return nil
}
