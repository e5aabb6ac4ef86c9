package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/asyncagents/asyncagents"
)

// Reading other stores' changes incrementally (asyncagents.HandoffStore's Changes), and
// waking up when there are some (WaitChanges).

// Changes returns, oldest first and at most limit of them, the changes of the tasks that
// other stores hold numbered after after (0: every such task as it is now, and no removals),
// and the number to ask after next time. A change's Task is the row's summary (the task
// without its prompt, result, follow-ups and notifications, and with its description, error
// and permission request bounded as a Manager bounds them: [asyncagents.MaxDescriptionChars],
// [asyncagents.MaxErrorChars], [asyncagents.MaxPermissionPatterns] of
// [asyncagents.MaxPatternChars]), made by the database: the prompts and results of other
// stores' tasks never reach this process. Change.Seq is the row's number. A removal's Task
// has only its ID. The next number is that of the last change read, this store's own
// included (they are passed over, not returned), so it may be past after when no change is
// returned; it is after when there is nothing new.
//
// Every write of a task row is numbered by the triggers (see the package comment), in a
// transaction that holds a shared advisory lock from before the number is drawn until it
// commits. A read that finds something new takes that lock exclusively, so no number at or
// below those it reads can commit later: a reader that asks again with the number it got
// misses no change and reads none twice. Nothing new (the usual case) costs one query of
// three index or one-row lookups, and no lock:
//
//	SELECT greatest((SELECT max(seq) FROM asyncagents_tasks), (SELECT max(seq) FROM asyncagents_removed)),
//	    (SELECT last_value FROM asyncagents_changes), (SELECT seq FROM asyncagents_removed_pruned)
//
// and a read with something new, one batch, one transaction:
//
//	SELECT pg_advisory_xact_lock(hashtext('asyncagents_changes'), 0)
//	SELECT seq FROM asyncagents_removed_pruned
//	SELECT seq, id, removed, holder = $me, summary FROM (
//	    (SELECT … FROM asyncagents_tasks WHERE seq > $1 ORDER BY seq LIMIT $3) UNION ALL
//	    (SELECT … FROM asyncagents_removed WHERE $1 > 0 AND seq > $1 ORDER BY seq LIMIT $3)) ORDER BY seq LIMIT $3
//
// Errors: a limit under 1 (matching [asyncagents.ErrInvalidInput]); after numbered past the
// store's last change (another database), or older than the tombstones pruned since (kept an
// hour), matching [asyncagents.ErrLagged]: read again from 0 and replace what was read; the
// queries'.
func (s *Store) Changes(ctx context.Context, after uint64, limit int) ([]asyncagents.Change, uint64, error) {
	if limit < 1 {
		return nil, after, fmt.Errorf("%w: pgstore: changes limit %d is under 1", asyncagents.ErrInvalidInput, limit)
	}
	if after > math.MaxInt64 {
		return nil, after, fmt.Errorf("%w: pgstore: changes after %d: no such number", asyncagents.ErrLagged, after)
	}
	var newest, last, pruned int64
	s.trips.Add(1)
	err := s.pool.QueryRow(ctx, `SELECT coalesce(greatest((SELECT max(seq) FROM asyncagents_tasks), (SELECT max(seq) FROM asyncagents_removed)), 0),
			(SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM asyncagents_changes),
			(SELECT seq FROM asyncagents_removed_pruned)`).Scan(&newest, &last, &pruned)
	switch {
	case err != nil:
		return nil, after, fmt.Errorf("pgstore: changes: %w", err)
	case after > uint64(last):
		return nil, after, fmt.Errorf("%w: pgstore: changes after %d: the store's are numbered up to %d; read again from 0",
			asyncagents.ErrLagged, after, last)
	case after > 0 && after < uint64(pruned):
		return nil, after, prunedErr(after, pruned)
	case uint64(newest) <= after:
		return nil, after, nil
	}
	b := &pgx.Batch{}
	b.Queue(`SELECT pg_advisory_xact_lock(hashtext('asyncagents_changes'), 0)`)
	b.Queue(`SELECT seq FROM asyncagents_removed_pruned`)
	b.Queue(`SELECT seq, id, removed, mine, summary FROM (
			(SELECT seq, id, false AS removed, holder = $2 AS mine, CASE WHEN holder <> $2 THEN summary END AS summary
				FROM asyncagents_tasks WHERE seq > $1 ORDER BY seq LIMIT $3)
			UNION ALL
			(SELECT seq, id, true, holder = $2, NULL FROM asyncagents_removed WHERE $1 > 0 AND seq > $1 ORDER BY seq LIMIT $3)
		) AS c ORDER BY seq LIMIT $3`, int64(after), s.holder, limit)
	s.trips.Add(1)
	br := s.pool.SendBatch(ctx, b)
	changes, next, err := readChanges(br, after)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, after, err
	}
	return changes, next, nil
}

// prunedErr is Changes' error when after is older than the tombstones pruned up to pruned.
func prunedErr(after uint64, pruned int64) error {
	return fmt.Errorf("%w: pgstore: changes after %d: the removals up to %d were pruned (kept %v); read again from 0",
		asyncagents.ErrLagged, after, pruned, removedFor)
}

// readChanges reads the results of Changes' batch.
func readChanges(br pgx.BatchResults, after uint64) ([]asyncagents.Change, uint64, error) {
	if _, err := br.Exec(); err != nil {
		return nil, after, fmt.Errorf("pgstore: changes: %w", err)
	}
	var pruned int64
	if err := br.QueryRow().Scan(&pruned); err != nil {
		return nil, after, fmt.Errorf("pgstore: changes: %w", err)
	}
	if after > 0 && after < uint64(pruned) {
		return nil, after, prunedErr(after, pruned)
	}
	rows, err := br.Query()
	if err != nil {
		return nil, after, fmt.Errorf("pgstore: changes: %w", err)
	}
	defer rows.Close()
	var changes []asyncagents.Change
	next := after
	for rows.Next() {
		var seq int64
		var id string
		var removed, mine bool
		var summary []byte
		if err := rows.Scan(&seq, &id, &removed, &mine, &summary); err != nil {
			return nil, after, fmt.Errorf("pgstore: changes: %w", err)
		}
		next = uint64(seq)
		if mine {
			continue
		}
		c := asyncagents.Change{Seq: next, Task: asyncagents.Task{ID: id}, Removed: removed}
		if !removed {
			if err := json.Unmarshal(summary, &c.Task); err != nil {
				return nil, after, fmt.Errorf("pgstore: changes: task %s: %w", id, err)
			}
		}
		changes = append(changes, c)
	}
	if err := rows.Err(); err != nil {
		return nil, after, fmt.Errorf("pgstore: changes: %w", err)
	}
	return changes, next, nil
}

// coalesceWakeups is how long WaitChanges goes on taking notifications after the first, so
// that a burst of writes wakes its caller once.
const coalesceWakeups = 10 * time.Millisecond

// errStoreClosed is the error of WaitChanges after Close.
var errStoreClosed = errors.New("pgstore: store closed")

// WaitChanges blocks until another store has changed a task (a change [Store.Changes] would
// return) since the previous WaitChanges returned, or since this one began for the first, and
// returns nil; or until ctx ends (ctx.Err()), or the store is closed. The triggers notify
// every change on channel asyncagents_changes (pg_notify, with the task's holder as the
// payload, delivered when the write commits); WaitChanges listens on a connection of its own
// (LISTEN asyncagents_changes), opened by the first call and kept until Close, and returns
// 10 ms after the first notification of another store's change, having taken those that came
// meanwhile. Calls wait for each other: one listens at a time.
//
// It is a wake-up, not a feed: a notification is lost when the listening connection drops
// (WaitChanges then returns the connection's error, and the next call connects again), so a
// reader calls Changes when WaitChanges returns, and every few seconds anyway.
func (s *Store) WaitChanges(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.closing, cancel)()
	select {
	case s.listen <- struct{}{}:
	case <-ctx.Done():
		return s.waitErr(ctx)
	}
	defer func() { <-s.listen }()
	if s.listener == nil {
		c, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig)
		if err == nil {
			if _, err = c.Exec(ctx, `LISTEN asyncagents_changes`); err != nil {
				closeConn(c)
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return s.waitErr(ctx)
			}
			return fmt.Errorf("pgstore: wait for changes: listen: %w", err)
		}
		s.listener = c
	}
	wait, woken := ctx, false
	for {
		n, err := s.listener.WaitForNotification(wait)
		switch {
		case err == nil && !woken && n.Payload != s.holder:
			var stop context.CancelFunc
			wait, stop = context.WithTimeout(ctx, coalesceWakeups)
			defer stop()
			woken = true
		case err == nil:
		case woken:
			if wait.Err() == nil { // the connection failed: the next call opens another
				closeConn(s.listener)
				s.listener = nil
			}
			return nil
		case ctx.Err() != nil:
			return s.waitErr(ctx)
		default:
			closeConn(s.listener)
			s.listener = nil
			return fmt.Errorf("pgstore: wait for changes: %w", err)
		}
	}
}

// waitErr is WaitChanges' error when ctx ended: ctx's, or errStoreClosed.
func (s *Store) waitErr(ctx context.Context) error {
	if s.closing.Err() != nil {
		return errStoreClosed
	}
	return ctx.Err()
}

// closeConn closes c, waiting at most a second for the server.
func closeConn(c *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c.Close(ctx)
}

// closeListener ends WaitChanges, waits for it to return, and closes its connection; later
// calls return at once.
func (s *Store) closeListener() {
	s.closeOnce.Do(func() {
		s.stopListening()
		s.listen <- struct{}{} // kept: WaitChanges never listens again
		if s.listener != nil {
			closeConn(s.listener)
			s.listener = nil
		}
	})
}
