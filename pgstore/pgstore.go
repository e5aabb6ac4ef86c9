// Package pgstore is an [asyncagents.LeaseStore] on PostgreSQL: several Managers, in one
// process or on several hosts, share one database, and each task is acted on by the one
// Manager that holds its lease.
//
// # Records and leases
//
// A task is one row of the table asyncagents_tasks: its id, parent session, status and
// start time as columns, the whole [asyncagents.Task] as JSON (its notifications, and so
// the notification outbox, included: a state change and the notifications it creates are
// one row written in one statement), and the lease: the holder (a name unique to each
// [Store]), a fencing counter that every claim increments, and the lease's expiry, in the
// database's clock.
//
// Every write of a task checks the holder and the fencing counter in its WHERE clause, so a
// store that lost a lease (another store claimed the task) changes nothing and gets
// [asyncagents.ErrLeaseLost]. [Store.Renew] extends the leases of a store's tasks by the
// lease duration in one UPDATE; [Store.Claim] takes the tasks whose leases expired, up to
// 500 at a time, with SELECT … FOR UPDATE SKIP LOCKED, so that two stores claiming at once
// take different tasks. [Store.Held] answers from the store's memory: a lease is taken as
// held until two thirds of the lease duration after the start of the last statement that
// renewed it, so a store cut off from the database stops acting well before the lease can
// expire in the database.
//
// # Changes, slots and limits
//
// Every write of a task's record or holder (a save, a claim, a yield, a removal) is
// numbered from one sequence, so that a Manager reads only what other hosts changed since
// its last read, as summaries without prompts and results ([Store.Changes], woken by
// [Store.WaitChanges]). The concurrency slots ([Store.Slots]) are fenced as saves are: a
// store whose lease is gone queues, learns and gives back no slot. The per-parent cap and the
// tree budgets are counted from the rows of every store, in the transaction that saves a new
// task ([Store.Admit], [Store.TreeUsage]), and a removed task's usage stays counted.
//
// # Schema
//
// [Open] creates the tables, or migrates them to this version's schema, under an advisory
// lock (tern's migrator, version table asyncagents_schema_version). A database whose schema
// is newer than this package knows is refused with [ErrSchemaNewer], changing nothing.
//
// Version 6 adds the column session (Task.SessionID: a task recorded before tasks had ids of
// their own has its session's id as its id; indexed), through which the tree queries go from
// a task to the tasks it launched, and which the summary trigger below sets.
//
// Version 5 adds to asyncagents_tasks the columns seq (the row's change number, from the
// sequence asyncagents_changes; indexed), anchor (the session the task counts under:
// Task.AnchorSessionID, or its parent; indexed) and summary (the task's JSON as jsonb without
// prompt, result, followUps and notifications, its description, error and permission request
// cut to the Manager's bounds: the function asyncagents_summary), which triggers set on every
// write, whatever program makes it:
//
//	BEFORE INSERT OR UPDATE OF task, parent: summary := asyncagents_summary(task::jsonb);
//	    anchor := coalesce(nullif(summary->>'anchorSessionID', ''), parent)
//	BEFORE INSERT OR UPDATE OF task, status, parent, server, and UPDATE OF holder when it changes:
//	    PERFORM pg_advisory_xact_lock_shared(hashtext('asyncagents_changes'), 0);
//	    seq := nextval('asyncagents_changes'); PERFORM pg_notify('asyncagents_changes', holder)
//	    session := coalesce(nullif(summary->>'sessionID', ''), id when it starts with "ses_")
//	AFTER DELETE: the same lock; INSERT INTO asyncagents_removed (id, seq, holder)
//	    VALUES (id, nextval('asyncagents_changes'), holder) (a tombstone); the same notification
//
// A renewal (lease_until alone), a Want (wanted_by) and a Close are not changes. The
// tombstones (asyncagents_removed: id, seq, holder, removed) are kept an hour and pruned by
// Delete, which records the last number pruned in asyncagents_removed_pruned; what removed
// tasks used is summed by session in asyncagents_cleared (session, input, output, reasoning,
// cache_read, cache_write, cost). The statements of this package that change task records
// (Save, Admit, Claim, Yield, Delete) take the changes lock first, before any row lock, so
// that no lock is awaited while a row is held. Hosts that share a database run the same
// version: a program of schema 4 still running on it writes rows that are numbered and
// summarized (the triggers), but takes the lock only in the triggers, and fences no slot.
package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/asyncagents/asyncagents"
)

// DefaultLease is the lease duration of [Open] when [Options.Lease] is zero: a dead host's
// tasks are claimed about 10 s after its last renewal, and a live host renews every 3.3 s
// (one UPDATE for all its tasks).
const DefaultLease = 10 * time.Second

// claimBatch bounds the tasks one Claim takes.
const claimBatch = 500

// wantedFirst is how long a task that a store wants is left to it after its lease ended.
const wantedFirst = 5 * time.Second

// removedFor is how long the tombstone of a removed task is kept: a reader of [Store.Changes]
// that asks after a number older than the tombstones pruned since gets an error matching
// [asyncagents.ErrLagged].
const removedFor = time.Hour

// ErrSchemaNewer is the error of [Open] when the database's schema is of a newer version of
// this package than the running one.
var ErrSchemaNewer = errors.New("pgstore: database schema is newer than this program")

// Options configure [Open]; the zero value is ready.
type Options struct {
	// Lease is how long a task's lease lasts unrenewed: DefaultLease when zero; at least
	// one second.
	Lease time.Duration
	// Holder names the store in the database's rows (for people reading them); a random
	// suffix is added so that every Store is unique. Default: the host name and process id.
	Holder string
	// Server names the OpenCode server of the Manager on this store, for a database that
	// Managers in front of several servers share: the store claims only the tasks of its
	// server. Default "": one server. At most 200 bytes.
	Server string
}

// Store is an [asyncagents.LeaseStore] on a PostgreSQL database. Create one with [Open],
// pass it to [asyncagents.WithStore], and Close it after the Manager. It is safe for
// concurrent use.
type Store struct {
	pool   *pgxpool.Pool
	holder string
	server string
	lease  time.Duration

	trips atomic.Int64 // round trips to the database

	mu   sync.Mutex
	held map[string]lease // the tasks this store holds

	// WaitChanges' connection: listen holds a token while a call uses listener; closing
	// ends when Close begins (stopListening).
	listen        chan struct{}
	listener      *pgx.Conn
	closing       context.Context
	stopListening context.CancelFunc
	closeOnce     sync.Once
}

// lease is what a store knows of a lease it holds.
type lease struct {
	fence int64
	until time.Time // Holds is true before this instant (local clock)
}

var (
	_ asyncagents.SlotStore    = (*Store)(nil)
	_ asyncagents.HandoffStore = (*Store)(nil)
	_ asyncagents.LimitStore   = (*Store)(nil)
)

// Open connects to the database at url (a PostgreSQL URL or key=value string, as pgx
// reads it), creates or migrates the schema, and returns the store. Errors: a bad url or
// options (matching [asyncagents.ErrInvalidInput]), the connection's, [ErrSchemaNewer].
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	if opts.Lease == 0 {
		opts.Lease = DefaultLease
	}
	if opts.Lease < time.Second {
		return nil, fmt.Errorf("%w: pgstore lease %v is under 1s", asyncagents.ErrInvalidInput, opts.Lease)
	}
	if len(opts.Server) > 200 {
		return nil, fmt.Errorf("%w: pgstore server name of %d bytes (at most 200)", asyncagents.ErrInvalidInput, len(opts.Server))
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("%w: pgstore: %v", asyncagents.ErrInvalidInput, err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	if err := migrateSchema(ctx, pool, len(migrations)); err != nil {
		pool.Close()
		return nil, err
	}
	if opts.Holder == "" {
		host, _ := os.Hostname()
		opts.Holder = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	b := make([]byte, 6)
	rand.Read(b)
	s := &Store{pool: pool, holder: opts.Holder + "-" + hex.EncodeToString(b), server: opts.Server, lease: opts.Lease,
		held: map[string]lease{}, listen: make(chan struct{}, 1)}
	s.closing, s.stopListening = context.WithCancel(context.Background())
	return s, nil
}

// Close releases the store's leases, so that another store can claim its tasks at once
// (UPDATE asyncagents_tasks SET lease_until = '-infinity' WHERE holder = $1), ends a
// [Store.WaitChanges] that waits, and closes its connections. Call it after the Manager's
// Close. A store that cannot reach the database leaves its leases to expire.
func (s *Store) Close() error {
	s.closeListener()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.trips.Add(1)
	_, err := s.pool.Exec(ctx, `UPDATE asyncagents_tasks SET lease_until = '-infinity' WHERE holder = $1`, s.holder)
	s.mu.Lock()
	clear(s.held)
	s.mu.Unlock()
	s.pool.Close()
	if err != nil {
		return fmt.Errorf("pgstore: release leases: %w", err)
	}
	return nil
}

// RoundTrips returns how many round trips to the database the store has made: one per
// statement, or per batch of statements sent together.
func (s *Store) RoundTrips() int64 { return s.trips.Load() }

// Holder returns the name of the store in the database's rows.
func (s *Store) Holder() string { return s.holder }

// Server returns the name of the OpenCode server whose tasks the store claims (Options.Server).
func (s *Store) Server() string { return s.server }

// LeaseDuration returns the lease duration.
func (s *Store) LeaseDuration() time.Duration { return s.lease }

// valid returns until when a lease renewed by a statement started at start is held.
func (s *Store) valid(start time.Time) time.Time { return start.Add(s.lease * 2 / 3) }

// Load returns the tasks this store holds and claims those whose leases expired, as
// Claim does, all of them (500 at a time), oldest first.
func (s *Store) Load(ctx context.Context) ([]asyncagents.Task, error) {
	var all []asyncagents.Task
	seen := []string{} // not nil: id <> ALL(NULL) is never true
	for {
		tasks, err := s.claim(ctx, seen)
		if err != nil {
			return nil, err
		}
		all = append(all, tasks...)
		for _, t := range tasks {
			seen = append(seen, t.ID)
		}
		if len(tasks) < claimBatch {
			break
		}
	}
	slices.SortStableFunc(all, func(a, b asyncagents.Task) int { return a.Started.Compare(b.Started) })
	return all, nil
}

// Claim takes up to 500 tasks of its server whose leases expired, oldest first, and returns
// them. A task another store wants ([Store.Want]) is left to that store for 5 s after its
// lease ended. A task that changes holder is a change ([Store.Changes]). One batch:
//
//	SELECT pg_advisory_xact_lock_shared(hashtext('asyncagents_changes'), 0)
//	UPDATE asyncagents_tasks SET holder = $1, fence = fence + 1, lease_until = now() + $2, wanted_by = NULL
//	WHERE id IN (SELECT id FROM asyncagents_tasks WHERE lease_until < now()
//	             AND (wanted_by IS NULL OR wanted_by = $1 OR lease_until < now() - '5 s')
//	             AND server = $server
//	             ORDER BY started LIMIT 500 FOR UPDATE SKIP LOCKED)
//	RETURNING fence, task
func (s *Store) Claim(ctx context.Context) ([]asyncagents.Task, error) { return s.claim(ctx, nil) }

// claim is Claim; with a non-nil skip (Load's), the tasks this store holds are returned too
// (their fences unchanged), but for those in skip.
func (s *Store) claim(ctx context.Context, skip []string) ([]asyncagents.Task, error) {
	start := time.Now()
	own := skip != nil
	if !own {
		skip = []string{}
	}
	b := &pgx.Batch{}
	b.Queue(lockChanges)
	b.Queue(`UPDATE asyncagents_tasks SET holder = $1,
			fence = CASE WHEN holder = $1 THEN fence ELSE fence + 1 END,
			lease_until = now() + $2::interval,
			wanted_by = NULL
		WHERE id IN (SELECT id FROM asyncagents_tasks
			WHERE (lease_until < now() AND (wanted_by IS NULL OR wanted_by = $1 OR lease_until < now() - $6::interval)
				OR ($4 AND holder = $1)) AND id <> ALL($5) AND server = $7
			ORDER BY started LIMIT $3 FOR UPDATE SKIP LOCKED)
		RETURNING fence, task`, s.holder, s.lease, claimBatch, own, skip, wantedFirst, s.server)
	s.trips.Add(1)
	br := s.pool.SendBatch(ctx, b)
	tasks, fences, err := scanClaimed(br)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("pgstore: claim: %w", err)
	}
	s.mu.Lock()
	for i, t := range tasks {
		s.held[t.ID] = lease{fence: fences[i], until: s.valid(start)}
	}
	s.mu.Unlock()
	slices.SortStableFunc(tasks, func(a, b asyncagents.Task) int { return a.Started.Compare(b.Started) })
	return tasks, nil
}

// scanClaimed reads the results of claim's batch: the tasks claimed and their fences.
func scanClaimed(br pgx.BatchResults) ([]asyncagents.Task, []int64, error) {
	if _, err := br.Exec(); err != nil {
		return nil, nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	var tasks []asyncagents.Task
	var fences []int64
	for rows.Next() {
		var fence int64
		var raw []byte
		if err := rows.Scan(&fence, &raw); err != nil {
			return nil, nil, err
		}
		var t asyncagents.Task
		if err := json.Unmarshal(raw, &t); err != nil {
			return nil, nil, fmt.Errorf("task: %w", err)
		}
		tasks = append(tasks, t)
		fences = append(fences, fence)
	}
	return tasks, fences, rows.Err()
}

// Renew extends the leases this store holds, in one statement, and returns the ids it no
// longer holds:
//
//	UPDATE asyncagents_tasks SET lease_until = now() + $2 WHERE holder = $1 RETURNING id, fence
func (s *Store) Renew(ctx context.Context) ([]string, error) {
	// Only what was held before the statement can be found lost by it: a task saved or
	// claimed while it runs is not in its result, and is held all the same.
	s.mu.Lock()
	before := make(map[string]int64, len(s.held))
	for id, l := range s.held {
		before[id] = l.fence
	}
	s.mu.Unlock()
	start := time.Now()
	s.trips.Add(1)
	rows, err := s.pool.Query(ctx, `UPDATE asyncagents_tasks SET lease_until = now() + $2::interval
		WHERE holder = $1 RETURNING id, fence`, s.holder, s.lease)
	if err != nil {
		return nil, fmt.Errorf("pgstore: renew: %w", err)
	}
	renewed := map[string]int64{}
	for rows.Next() {
		var id string
		var fence int64
		if err := rows.Scan(&id, &fence); err != nil {
			rows.Close()
			return nil, fmt.Errorf("pgstore: renew: %w", err)
		}
		renewed[id] = fence
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgstore: renew: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var lost []string
	for id, fence := range before {
		l, ok := s.held[id]
		if !ok || l.fence != fence {
			continue // deleted, yielded or claimed again meanwhile: not this statement's to judge
		}
		if f, ok := renewed[id]; ok && f == fence {
			s.held[id] = lease{fence: fence, until: later(l.until, s.valid(start))}
			continue
		}
		lost = append(lost, id)
		delete(s.held, id)
	}
	slices.Sort(lost)
	return lost, nil
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Held returns until when the store holds task id's lease by the local clock (two thirds of
// the lease duration after the start of the last statement that renewed it), or the zero
// time when it does not hold it.
func (s *Store) Held(id string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held[id].until
}

// Save inserts t with a new lease held by this store, or replaces the task when this store
// holds its lease (and extends it); the row is marked with the store's server
// (Options.Server), whose stores alone claim it. The save of an ended task gives back its
// concurrency slot in the same statement, so no slot outlives its run. One batch, one
// transaction (the triggers number the row and summarize it: see the package comment):
//
//	SELECT pg_advisory_xact_lock_shared(hashtext('asyncagents_changes'), 0)
//	WITH saved AS (INSERT INTO asyncagents_tasks (…) VALUES (…, holder = $1, fence = 1, lease_until = now() + lease)
//	               ON CONFLICT (id) DO UPDATE SET … WHERE holder = $1 AND fence = $fence RETURNING fence),
//	     freed AS (DELETE FROM asyncagents_slots WHERE task = $id AND $ended AND EXISTS (SELECT 1 FROM saved))
//	SELECT fence FROM saved
//
// It returns an error matching [asyncagents.ErrLeaseLost] when the task exists and this
// store does not hold its lease; nothing is changed then.
func (s *Store) Save(ctx context.Context, t asyncagents.Task) error {
	start := time.Now()
	fence, err := s.write(ctx, s.pool, t)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.held[t.ID] = lease{fence: fence, until: s.valid(start)}
	s.mu.Unlock()
	return nil
}

// lockChanges is the first statement of every transaction that writes task rows: the lock
// that the triggers take, taken before any row is (see the package comment).
const lockChanges = `SELECT pg_advisory_xact_lock_shared(hashtext('asyncagents_changes'), 0)`

// batcher is a pool or a transaction.
type batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// write runs Save's statements on q and returns the task's fence, or an error matching
// ErrLeaseLost, having forgotten the lease, when the store does not hold it.
func (s *Store) write(ctx context.Context, q batcher, t asyncagents.Task) (int64, error) {
	raw, err := json.Marshal(t)
	if err != nil {
		return 0, fmt.Errorf("pgstore: save %s: %w", t.ID, err)
	}
	s.mu.Lock()
	l, ok := s.held[t.ID]
	s.mu.Unlock()
	if !ok {
		l.fence = 1
	}
	b := &pgx.Batch{}
	b.Queue(lockChanges)
	b.Queue(`WITH saved AS (
			INSERT INTO asyncagents_tasks AS t
				(id, parent, status, started, holder, fence, lease_until, task, server)
			VALUES ($1, $2, $3, $4, $5, 1, now() + $6::interval, $7, $9)
			ON CONFLICT (id) DO UPDATE SET parent = excluded.parent, status = excluded.status,
				started = excluded.started, task = excluded.task, lease_until = excluded.lease_until
			WHERE t.holder = $5 AND t.fence = $8
			RETURNING t.fence),
		freed AS (DELETE FROM asyncagents_slots WHERE task = $1 AND $10 AND EXISTS (SELECT 1 FROM saved))
		SELECT fence FROM saved`,
		t.ID, t.ParentSessionID, string(t.Status), t.Started, s.holder, s.lease, raw, l.fence, s.server,
		t.Status.Terminal())
	var fence int64
	s.trips.Add(1)
	br := q.SendBatch(ctx, b)
	_, err = br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(&fence)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, pgx.ErrNoRows) {
		s.mu.Lock()
		delete(s.held, t.ID)
		s.mu.Unlock()
		return 0, fmt.Errorf("%w: %s", asyncagents.ErrLeaseLost, t.ID)
	}
	if err != nil {
		return 0, fmt.Errorf("pgstore: save %s: %w", t.ID, err)
	}
	return fence, nil
}

// Delete removes tasks by id, whoever holds them (a Clear is the user's word), and their
// slots; what the tasks used is added to the usage of the sessions they counted under
// (their anchors), which [Store.TreeUsage] and [Store.Admit] count, and each leaves a
// tombstone ([Store.Changes] reports it removed). Tombstones older than an hour are pruned
// (removedFor). One batch, one transaction, the rows locked in id order:
//
//	SELECT pg_advisory_xact_lock_shared(hashtext('asyncagents_changes'), 0)
//	WITH gone AS (DELETE FROM asyncagents_tasks WHERE id IN (SELECT id … WHERE id = ANY($1) ORDER BY id FOR UPDATE)
//	              RETURNING anchor, summary->'usage' AS u)
//	INSERT INTO asyncagents_cleared … SELECT anchor, sum(input), … FROM gone GROUP BY anchor ORDER BY anchor
//	    ON CONFLICT (session) DO UPDATE SET input = input + excluded.input, …
//	DELETE FROM asyncagents_slots WHERE task = ANY($1)
//	WITH pruned AS (DELETE FROM asyncagents_removed WHERE removed < now() - '1 hour' RETURNING seq)
//	UPDATE asyncagents_removed_pruned SET seq = greatest(seq, (SELECT max(seq) FROM pruned))
func (s *Store) Delete(ctx context.Context, ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	b.Queue(lockChanges)
	b.Queue(`WITH gone AS (
			DELETE FROM asyncagents_tasks WHERE id IN (
				SELECT id FROM asyncagents_tasks WHERE id = ANY($1) ORDER BY id FOR UPDATE)
			RETURNING anchor, summary->'usage' AS u)
		INSERT INTO asyncagents_cleared AS c (session, input, output, reasoning, cache_read, cache_write, cost)
		SELECT anchor, coalesce(sum((u->>'input')::bigint), 0), coalesce(sum((u->>'output')::bigint), 0),
			coalesce(sum((u->>'reasoning')::bigint), 0), coalesce(sum((u->>'cacheRead')::bigint), 0),
			coalesce(sum((u->>'cacheWrite')::bigint), 0), coalesce(sum((u->>'cost')::float8), 0)
		FROM gone WHERE u IS NOT NULL GROUP BY anchor ORDER BY anchor
		ON CONFLICT (session) DO UPDATE SET input = c.input + excluded.input, output = c.output + excluded.output,
			reasoning = c.reasoning + excluded.reasoning, cache_read = c.cache_read + excluded.cache_read,
			cache_write = c.cache_write + excluded.cache_write, cost = c.cost + excluded.cost`, ids)
	b.Queue(`DELETE FROM asyncagents_slots WHERE task = ANY($1)`, ids)
	b.Queue(`WITH pruned AS (DELETE FROM asyncagents_removed WHERE removed < now() - $1::interval RETURNING seq)
		UPDATE asyncagents_removed_pruned SET seq = greatest(seq, (SELECT max(seq) FROM pruned))
		WHERE EXISTS (SELECT 1 FROM pruned)`, removedFor)
	s.trips.Add(1)
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("pgstore: delete: %w", err)
	}
	s.mu.Lock()
	for _, id := range ids {
		delete(s.held, id)
	}
	s.mu.Unlock()
	return nil
}
