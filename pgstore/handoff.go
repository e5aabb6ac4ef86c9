package pgstore

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/asyncagents/asyncagents"
)

// Reading every host's tasks, and handing a task over to the store that wants it
// (asyncagents.HandoffStore).

// Tasks returns the stored tasks of parent session parent, or every task for "", whoever
// holds them, oldest first:
//
//	SELECT task FROM asyncagents_tasks WHERE $1 = '' OR parent = $1 ORDER BY started
func (s *Store) Tasks(ctx context.Context, parent string) ([]asyncagents.Task, error) {
	s.trips.Add(1)
	return queryTasks(ctx, s.pool, `SELECT task FROM asyncagents_tasks WHERE $1 = '' OR parent = $1 ORDER BY started`, parent)
}

// queryTasks runs sql, which selects one column of tasks' JSON, on q (a pool or a
// connection) and decodes the rows.
func queryTasks(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, sql string, args ...any) ([]asyncagents.Task, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("pgstore: read tasks: %w", err)
	}
	tasks, err := pgx.CollectRows(rows, scanTask)
	if err != nil {
		return nil, fmt.Errorf("pgstore: read tasks: %w", err)
	}
	return tasks, nil
}

// scanTask reads a row of one column, a task's JSON.
func scanTask(row pgx.CollectableRow) (asyncagents.Task, error) {
	var raw []byte
	var t asyncagents.Task
	if err := row.Scan(&raw); err != nil {
		return t, err
	}
	return t, json.Unmarshal(raw, &t)
}

// Want asks the holder of task id to hand it over: the holder sees it in [Store.Wanted] and
// yields it, and this store's next Claim takes it (others wait 5 s). It is also how a
// task of a dead holder is taken first by the store that wants it. Errors: the query's.
//
//	UPDATE asyncagents_tasks SET wanted_by = $2 WHERE id = $1 AND holder <> $2
func (s *Store) Want(ctx context.Context, id string) error {
	s.trips.Add(1)
	if _, err := s.pool.Exec(ctx, `UPDATE asyncagents_tasks SET wanted_by = $2 WHERE id = $1 AND holder <> $2`, id, s.holder); err != nil {
		return fmt.Errorf("pgstore: want %s: %w", id, err)
	}
	return nil
}

// Wanted returns the ids of the tasks this store holds that another store wants:
//
//	SELECT id FROM asyncagents_tasks WHERE holder = $1 AND wanted_by <> $1
func (s *Store) Wanted(ctx context.Context) ([]string, error) {
	s.trips.Add(1)
	rows, err := s.pool.Query(ctx, `SELECT id FROM asyncagents_tasks WHERE holder = $1 AND wanted_by <> $1`, s.holder)
	if err != nil {
		return nil, fmt.Errorf("pgstore: wanted: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("pgstore: wanted: %w", err)
	}
	return ids, nil
}

// Yield gives up this store's leases on tasks ids at once (their leases end now and they
// have no holder, so no renewal or save of this store touches them again), and forgets them.
// A task given up is a change ([Store.Changes]), for every store, this one included. One
// batch:
//
//	SELECT pg_advisory_xact_lock_shared(hashtext('asyncagents_changes'), 0)
//	UPDATE asyncagents_tasks SET holder = '', lease_until = now() WHERE id = ANY($1) AND holder = $2
func (s *Store) Yield(ctx context.Context, ids ...string) error {
	s.mu.Lock()
	for _, id := range ids {
		delete(s.held, id)
	}
	s.mu.Unlock()
	b := &pgx.Batch{}
	b.Queue(lockChanges)
	b.Queue(`UPDATE asyncagents_tasks SET holder = '', lease_until = now() WHERE id = ANY($1) AND holder = $2`, ids, s.holder)
	s.trips.Add(1)
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("pgstore: yield: %w", err)
	}
	return nil
}

// ReadTasks reads every task in the database at url, whoever holds it, without taking a
// lease or changing anything (SELECT task FROM asyncagents_tasks ORDER BY started): for
// tools that show the tasks. Errors: a bad url (matching [asyncagents.ErrInvalidInput]),
// the connection's and the query's.
func ReadTasks(ctx context.Context, url string) ([]asyncagents.Task, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("%w: pgstore: %v", asyncagents.ErrInvalidInput, err)
	}
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	defer c.Close(context.Background())
	return queryTasks(ctx, c, `SELECT task FROM asyncagents_tasks ORDER BY started`)
}
