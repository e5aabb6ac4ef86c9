package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// The concurrency slots of asyncagents.Limits, shared by every store on the database
// (asyncagents.SlotStore): a row of asyncagents_slots per task that waits for a slot
// (granted false, in seq order) or holds one (granted true).
//
// Slots are fenced as saves are: a store queues, and learns the grants of, only the tasks it
// holds now (its holder name and the fence it knows on the row, the lease not expired), and
// gives back only their slots, so that a store whose lease is gone (its host paused past
// it, and another store claimed its tasks) changes no slot. A slot of a task that ended or was
// deleted counts for nothing and goes at the next Slots of its key, whoever queued it. A
// slot granted to a task that has not ended is kept while another store takes the task over:
// its run may go on in the server, and its new holder's Manager counts it as running there.

// fences returns the fence this store knows of each of ids: 0 (no fence) for those it does
// not hold.
func (s *Store) fences(ids []string) []int64 {
	out := make([]int64, len(ids))
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, id := range ids {
		out[i] = s.held[id].fence
	}
	return out
}

// Slots queues the tasks of waiting that this store holds now and that are queued (status
// queued) for a slot of the limit key, after those queued before by any store; grants the
// free slots of key (at most limit held at once by tasks that have not ended) to the oldest
// tasks queued for it whose holders' leases run, whoever holds them; and returns the ids of
// waiting that this store holds now and that hold a slot. A task of waiting that this store
// does not hold now, or that is not queued, is not queued. One batch, one transaction,
// under an advisory lock of key:
//
//	SELECT pg_advisory_xact_lock(hashtext('asyncagents_slots'), hashtext($key))
//	DELETE FROM asyncagents_slots s WHERE key = $key AND NOT EXISTS (SELECT 1 FROM asyncagents_tasks t
//	    WHERE t.id = s.task AND t.status NOT IN ('completed', 'error', 'cancelled'))
//	INSERT INTO asyncagents_slots (task, key) SELECT w.task, $key FROM unnest($waiting, $fences) WITH ORDINALITY AS w
//	    JOIN asyncagents_tasks t ON t.id = w.task AND t.holder = $me AND t.fence = w.fence
//	        AND t.lease_until > now() AND t.status = 'queued'
//	    ORDER BY w.n ON CONFLICT (task) DO NOTHING
//	UPDATE asyncagents_slots SET granted = true WHERE task IN (SELECT s.task … JOIN asyncagents_tasks t …
//	    WHERE s.key = $key AND NOT s.granted AND t.status = 'queued' AND t.holder <> '' AND t.lease_until > now()
//	    ORDER BY s.seq LIMIT $limit − (granted slots of key))
//	SELECT s.task FROM asyncagents_slots s JOIN unnest($waiting, $fences) AS w … JOIN asyncagents_tasks t
//	    ON t.id = s.task AND t.holder = $me AND t.fence = w.fence AND t.lease_until > now() WHERE s.granted
func (s *Store) Slots(ctx context.Context, key string, limit int, waiting []string) ([]string, error) {
	if waiting == nil {
		waiting = []string{}
	}
	fences := s.fences(waiting)
	// One batch, one round trip: PostgreSQL runs it as one implicit transaction, which
	// holds the advisory lock to its end.
	b := &pgx.Batch{}
	b.Queue(`SELECT pg_advisory_xact_lock(hashtext('asyncagents_slots'), hashtext($1))`, key)
	b.Queue(`DELETE FROM asyncagents_slots s WHERE s.key = $1 AND NOT EXISTS (SELECT 1 FROM asyncagents_tasks t
		WHERE t.id = s.task AND t.status NOT IN ('completed', 'error', 'cancelled'))`, key)
	b.Queue(`INSERT INTO asyncagents_slots (task, key)
		SELECT w.task, $1 FROM unnest($2::text[], $3::bigint[]) WITH ORDINALITY AS w(task, fence, n)
		JOIN asyncagents_tasks t ON t.id = w.task AND t.holder = $4 AND t.fence = w.fence
			AND t.lease_until > now() AND t.status = 'queued'
		ORDER BY w.n
		ON CONFLICT (task) DO NOTHING`, key, waiting, fences, s.holder)
	b.Queue(`UPDATE asyncagents_slots SET granted = true WHERE task IN (
		SELECT s.task FROM asyncagents_slots s JOIN asyncagents_tasks t ON t.id = s.task
		WHERE s.key = $1 AND NOT s.granted AND t.status = 'queued' AND t.holder <> '' AND t.lease_until > now()
		ORDER BY s.seq
		LIMIT greatest(0, $2 - (SELECT count(*) FROM asyncagents_slots WHERE key = $1 AND granted)))`, key, limit)
	b.Queue(`SELECT s.task FROM asyncagents_slots s
		JOIN unnest($1::text[], $2::bigint[]) AS w(task, fence) ON w.task = s.task
		JOIN asyncagents_tasks t ON t.id = s.task AND t.holder = $3 AND t.fence = w.fence AND t.lease_until > now()
		WHERE s.granted`, waiting, fences, s.holder)
	s.trips.Add(1)
	br := s.pool.SendBatch(ctx, b)
	var granted []string
	err := func() error {
		for range 4 {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		granted, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	}()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("pgstore: slots of %s: %w", key, err)
	}
	return granted, nil
}

// Release gives back the slots of tasks ids, or takes them out of their queues: those of the
// tasks this store holds now, and those of tasks that ended or are gone, whoever queued them.
// The slot of a task another store holds (or that no store holds now, its lease expired) is
// left to its holder:
//
//	DELETE FROM asyncagents_slots s USING unnest($ids, $fences) AS r(task, fence)
//	WHERE s.task = r.task AND NOT EXISTS (SELECT 1 FROM asyncagents_tasks t WHERE t.id = s.task
//	    AND t.status NOT IN ('completed', 'error', 'cancelled')
//	    AND NOT (t.holder = $me AND t.fence = r.fence AND t.lease_until > now()))
func (s *Store) Release(ctx context.Context, ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	s.trips.Add(1)
	if _, err := s.pool.Exec(ctx, `DELETE FROM asyncagents_slots s USING unnest($1::text[], $2::bigint[]) AS r(task, fence)
		WHERE s.task = r.task AND NOT EXISTS (SELECT 1 FROM asyncagents_tasks t WHERE t.id = s.task
			AND t.status NOT IN ('completed', 'error', 'cancelled')
			AND NOT (t.holder = $3 AND t.fence = r.fence AND t.lease_until > now()))`,
		ids, s.fences(ids), s.holder); err != nil {
		return fmt.Errorf("pgstore: release slots: %w", err)
	}
	return nil
}
