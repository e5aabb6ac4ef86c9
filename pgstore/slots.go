package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// The concurrency slots of asyncagents.Limits, shared by every store on the database
// (asyncagents.SlotStore): a row of asyncagents_slots per task that waits for a slot
// (granted false, in seq order) or holds one (granted true).

// Slots queues the tasks waiting for a slot of the limit key, grants the free slots of key
// to the oldest tasks queued for it by any store, and returns the ids of waiting that hold
// a slot. It runs in one transaction, under an advisory lock of key:
//
//	INSERT INTO asyncagents_slots (task, key) SELECT … unnest($waiting) ON CONFLICT DO NOTHING
//	UPDATE asyncagents_slots SET granted = true WHERE task IN (SELECT task … WHERE key = $1
//	    AND NOT granted ORDER BY seq LIMIT $limit − (granted slots of key))
//	SELECT task FROM asyncagents_slots WHERE granted AND task = ANY($waiting)
func (s *Store) Slots(ctx context.Context, key string, limit int, waiting []string) ([]string, error) {
	if waiting == nil {
		waiting = []string{}
	}
	// One batch, one round trip: PostgreSQL runs it as one implicit transaction, which
	// holds the advisory lock to its end.
	b := &pgx.Batch{}
	b.Queue(`SELECT pg_advisory_xact_lock(hashtext('asyncagents_slots'), hashtext($1))`, key)
	b.Queue(`INSERT INTO asyncagents_slots (task, key)
		SELECT w.task, $1 FROM unnest($2::text[]) WITH ORDINALITY AS w(task, n) ORDER BY w.n
		ON CONFLICT (task) DO NOTHING`, key, waiting)
	b.Queue(`UPDATE asyncagents_slots SET granted = true WHERE task IN (
		SELECT task FROM asyncagents_slots WHERE key = $1 AND NOT granted ORDER BY seq
		LIMIT greatest(0, $2 - (SELECT count(*) FROM asyncagents_slots WHERE key = $1 AND granted)))`, key, limit)
	b.Queue(`SELECT task FROM asyncagents_slots WHERE granted AND task = ANY($1)`, waiting)
	s.trips.Add(1)
	br := s.pool.SendBatch(ctx, b)
	var granted []string
	err := func() error {
		for range 3 {
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

// Release gives back the slots of tasks ids, or takes them out of their queues:
//
//	DELETE FROM asyncagents_slots WHERE task = ANY($1)
func (s *Store) Release(ctx context.Context, ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	s.trips.Add(1)
	if _, err := s.pool.Exec(ctx, `DELETE FROM asyncagents_slots WHERE task = ANY($1)`, ids); err != nil {
		return fmt.Errorf("pgstore: release slots: %w", err)
	}
	return nil
}
