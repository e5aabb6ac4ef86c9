package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/asyncagents/asyncagents"
)

// The per-parent cap and the tree budgets of every Manager on the database
// (asyncagents.LimitStore), counted from the task rows (their parent and anchor columns,
// and the usage in their summaries) and from asyncagents_cleared, what the tasks removed
// used, by the session they counted under.

// activeTasks counts the active tasks (queued, running or resumed) of session $1: those it
// launched and those that count under it, on every store.
const activeTasks = `SELECT count(*) FROM asyncagents_tasks
	WHERE (parent = $1 OR anchor = $1) AND status IN ('queued', 'running', 'resumed')`

// sessionsAbove lists session $1 and the sessions above it, nearest first, through the
// anchors of the tasks they are, $2 steps at most.
const sessionsAbove = `WITH RECURSIVE up(session, depth) AS (
		SELECT $1::text, 0
		UNION ALL
		SELECT t.anchor, u.depth + 1 FROM up u JOIN asyncagents_tasks t ON t.session = u.session WHERE u.depth < $2
	) SELECT session FROM up WHERE session <> '' ORDER BY depth`

// treeUsage sums what the tasks below session $1 used: its own tasks, those that count under
// it, theirs and so on, $2 levels deep, each task once, and what the tasks removed from those
// sessions used.
const treeUsage = `WITH RECURSIVE below(id, session, depth) AS (
		SELECT id, session, 1 FROM asyncagents_tasks WHERE parent = $1 OR anchor = $1
		UNION
		SELECT t.id, t.session, b.depth + 1 FROM below b
			JOIN LATERAL (SELECT id, session FROM asyncagents_tasks WHERE parent = b.session
				UNION SELECT id, session FROM asyncagents_tasks WHERE anchor = b.session) AS t ON true
		WHERE b.depth < $2
	), used(input, output, reasoning, cache_read, cache_write, cost) AS (
		SELECT (u->>'input')::bigint, (u->>'output')::bigint, (u->>'reasoning')::bigint,
			(u->>'cacheRead')::bigint, (u->>'cacheWrite')::bigint, (u->>'cost')::float8
		FROM (SELECT summary->'usage' AS u FROM asyncagents_tasks WHERE id IN (SELECT id FROM below)) AS x
		UNION ALL
		SELECT input, output, reasoning, cache_read, cache_write, cost FROM asyncagents_cleared
		WHERE session = $1 OR session IN (SELECT session FROM below)
	) SELECT coalesce(sum(input), 0)::bigint, coalesce(sum(output), 0)::bigint, coalesce(sum(reasoning), 0)::bigint,
		coalesce(sum(cache_read), 0)::bigint, coalesce(sum(cache_write), 0)::bigint, coalesce(sum(cost), 0)::float8
	FROM used`

// scanUsage reads a row of treeUsage.
func scanUsage(row pgx.Row) (asyncagents.Usage, error) {
	var u asyncagents.Usage
	err := row.Scan(&u.Input, &u.Output, &u.Reasoning, &u.CacheRead, &u.CacheWrite, &u.Cost)
	return u, err
}

// levels is how deep the tree of a session is summed, as a Manager sums it: the tasks of
// the session, and theirs down to MaxNestingDepth levels below them.
const levels = asyncagents.MaxNestingDepth + 1

// TreeUsage returns what the tasks below session used, on every store: its tasks (those it
// launched and those that count under it), theirs and so on down to
// [asyncagents.MaxNestingDepth] levels below, each task once (the usage of its summary), with
// what the tasks removed from those sessions used (asyncagents_cleared, which [Store.Delete]
// adds to). One recursive query:
//
//	WITH RECURSIVE below(id, session, depth) AS (SELECT id, session, 1 FROM asyncagents_tasks WHERE parent = $1 OR anchor = $1
//	    UNION SELECT t.id, t.session, depth + 1 FROM below JOIN asyncagents_tasks t ON t.parent = below.session OR t.anchor = below.session …)
//	SELECT sum(usage) FROM (summary->'usage' of the tasks below
//	    UNION ALL asyncagents_cleared of $1 and the sessions of the tasks below)
func (s *Store) TreeUsage(ctx context.Context, session string) (asyncagents.Usage, error) {
	s.trips.Add(1)
	u, err := scanUsage(s.pool.QueryRow(ctx, treeUsage, session, levels))
	if err != nil {
		return asyncagents.Usage{}, fmt.Errorf("pgstore: tree usage of %s: %w", session, err)
	}
	return u, nil
}

// Admit saves the new task t, or the ended task t resumed, taking its lease as [Store.Save]
// does, unless its parent or the session it counts under (t.AnchorSessionID, when set) has
// perParent or more active tasks (queued, running or resumed) on every store together (an error matching
// [asyncagents.ErrTaskLimit]; perParent 0: no cap), or the tree of that session, or of a
// session above it (through the anchors of the tasks those sessions are, as
// [asyncagents.MaxNestingDepth] bounds them), has used budget ([asyncagents.Budget.Reached]:
// an error matching [asyncagents.ErrBudget]; the zero Budget bounds nothing) as
// [Store.TreeUsage] sums it. The errors say what was counted, for the model that launched.
//
// The check and the save are one transaction, under an advisory lock of each of the two
// sessions (in order), so that launches at once on several stores are counted one after
// the other:
//
//	BEGIN
//	SELECT pg_advisory_xact_lock(hashtext('asyncagents_admit'), hashtext($session))  -- parent, anchor
//	SELECT count(*) FROM asyncagents_tasks WHERE (parent = $session OR anchor = $session)
//	    AND status IN ('queued', 'running', 'resumed')
//	WITH RECURSIVE up(session, depth) AS (SELECT $anchor, 0 UNION ALL
//	    SELECT t.anchor, depth + 1 FROM up JOIN asyncagents_tasks t ON t.session = up.session …) SELECT session FROM up
//	(TreeUsage's query for each of those sessions)
//	(Save's statements)
//	COMMIT
//
// Other errors: a negative perParent or budget (matching [asyncagents.ErrInvalidInput]),
// [asyncagents.ErrLeaseLost] when t's id exists and another store holds it, the queries'.
func (s *Store) Admit(ctx context.Context, t asyncagents.Task, perParent int, budget asyncagents.Budget) error {
	if perParent < 0 || budget.Tokens < 0 || !(budget.Cost >= 0) {
		return fmt.Errorf("%w: pgstore: admit %s: cap %d, budget %v: must not be negative", asyncagents.ErrInvalidInput, t.ID, perParent, budget)
	}
	anchor := cmp.Or(t.AnchorSessionID, t.ParentSessionID)
	sessions := []string{t.ParentSessionID}
	if anchor != t.ParentSessionID {
		sessions = append(sessions, anchor)
	}
	locks := slices.Sorted(slices.Values(sessions))
	start := time.Now()
	s.trips.Add(1)
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgstore: admit %s: %w", t.ID, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if err := s.admit(ctx, tx, locks, sessions, anchor, perParent, budget); err != nil {
		var refused refusal
		if errors.As(err, &refused) {
			return refused.error
		}
		return fmt.Errorf("pgstore: admit %s: %w", t.ID, err)
	}
	fence, err := s.write(ctx, tx, t)
	if err != nil {
		return err
	}
	s.trips.Add(1)
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgstore: admit %s: %w", t.ID, err)
	}
	s.mu.Lock()
	s.held[t.ID] = lease{fence: fence, until: s.valid(start)}
	s.mu.Unlock()
	return nil
}

// refusal is Admit's answer when a limit holds: the error for the caller, as it is.
type refusal struct{ error }

// admit takes the locks of Admit in tx and checks its limits: a refusal when one holds.
func (s *Store) admit(ctx context.Context, tx pgx.Tx, locks, sessions []string, anchor string, perParent int, budget asyncagents.Budget) error {
	b := &pgx.Batch{}
	for _, l := range locks {
		b.Queue(`SELECT pg_advisory_xact_lock(hashtext('asyncagents_admit'), hashtext($1))`, l)
	}
	if perParent > 0 {
		for _, p := range sessions {
			b.Queue(activeTasks, p)
		}
	}
	if !budget.IsZero() {
		b.Queue(sessionsAbove, anchor, asyncagents.MaxNestingDepth)
	}
	s.trips.Add(1)
	br := tx.SendBatch(ctx, b)
	var above []string
	err := func() error {
		for range locks {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		if perParent > 0 {
			for _, p := range sessions {
				var n int
				if err := br.QueryRow().Scan(&n); err != nil {
					return err
				}
				if n >= perParent {
					who := "this session has"
					if p != sessions[0] {
						who = "the session above this one that its tasks count under has"
					}
					return refusal{fmt.Errorf("%w: %s %d active tasks (queued, running or resumed) on every host together, the most allowed; "+
						"wait for one to end (a notification comes) or cancel one", asyncagents.ErrTaskLimit, who, n)}
				}
			}
		}
		if budget.IsZero() {
			return nil
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		above, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	}()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil || len(above) == 0 {
		return err
	}
	return s.withinBudget(ctx, tx, above, budget)
}

// withinBudget returns a refusal when the tree of one of sessions (the anchor, then those
// above it) has used budget.
func (s *Store) withinBudget(ctx context.Context, tx pgx.Tx, sessions []string, budget asyncagents.Budget) error {
	b := &pgx.Batch{}
	for _, session := range sessions {
		b.Queue(treeUsage, session, levels)
	}
	s.trips.Add(1)
	br := tx.SendBatch(ctx, b)
	err := func() error {
		for i := range sessions {
			used, err := scanUsage(br.QueryRow())
			if err != nil {
				return err
			}
			if budget.Reached(used) {
				who := "this session's tasks (with theirs)"
				if i > 0 {
					who = "the tasks of a session above this one (with theirs)"
				}
				return refusal{fmt.Errorf("%w: %s used %s on every host together, the budget is %s; no more tasks can start",
					asyncagents.ErrBudget, who, used, budget)}
			}
		}
		return nil
	}()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return err
}
