package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/tern/v2/migrate"
)

// migrations are the schema's versions, in order; a new version appends one.
var migrations = []string{
	`CREATE TABLE asyncagents_tasks (
		id          text PRIMARY KEY,
		parent      text NOT NULL,
		status      text NOT NULL,
		started     timestamptz NOT NULL,
		holder      text NOT NULL,
		fence       bigint NOT NULL,
		lease_until timestamptz NOT NULL,
		task        json NOT NULL
	);
	CREATE INDEX asyncagents_tasks_lease ON asyncagents_tasks (lease_until);
	CREATE INDEX asyncagents_tasks_holder ON asyncagents_tasks (holder);
	CREATE INDEX asyncagents_tasks_parent ON asyncagents_tasks (parent);`,
	`CREATE TABLE asyncagents_slots (
		task    text PRIMARY KEY,
		key     text NOT NULL,
		seq     bigserial NOT NULL,
		granted boolean NOT NULL DEFAULT false
	);
	CREATE INDEX asyncagents_slots_key ON asyncagents_slots (key, granted, seq);`,
	`ALTER TABLE asyncagents_tasks ADD COLUMN wanted_by text;`,
	`ALTER TABLE asyncagents_tasks ADD COLUMN server text NOT NULL DEFAULT '';`,
	changesSchema,
	sessionSchema,
}

// sessionSchema is version 6: the session a task runs in (Task.SessionID; a task recorded
// before tasks had ids of their own has its session's id as its id), kept by the summary
// trigger, so that the trees of sessions are walked through the sessions of their tasks.
const sessionSchema = `ALTER TABLE asyncagents_tasks ADD COLUMN session text;
	CREATE OR REPLACE FUNCTION asyncagents_task_summary() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		NEW.summary := asyncagents_summary(NEW.task::jsonb);
		NEW.anchor := coalesce(nullif(NEW.summary->>'anchorSessionID', ''), NEW.parent);
		NEW.session := coalesce(nullif(NEW.summary->>'sessionID', ''), CASE WHEN NEW.id LIKE 'ses\_%' THEN NEW.id END);
		RETURN NEW;
	END $$;
	UPDATE asyncagents_tasks SET session = coalesce(nullif(summary->>'sessionID', ''), CASE WHEN id LIKE 'ses\_%' THEN id END);
	CREATE INDEX asyncagents_tasks_session ON asyncagents_tasks (session);`

// changesSchema is version 5: the change numbers, summaries and anchors of the tasks, the
// tombstones of removed tasks, and the usage of removed tasks (see the package comment).
// Every task row is numbered again, and summarized, by an UPDATE that fires the triggers.
const changesSchema = `CREATE SEQUENCE asyncagents_changes;
	CREATE FUNCTION asyncagents_summary(t jsonb) RETURNS jsonb LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
		SELECT s
			|| CASE WHEN jsonb_typeof(s->'description') = 'string'
				THEN jsonb_build_object('description', left(s->>'description', 200)) ELSE '{}'::jsonb END
			|| CASE WHEN jsonb_typeof(s->'error') = 'string'
				THEN jsonb_build_object('error', left(s->>'error', 4000)) ELSE '{}'::jsonb END
			|| CASE WHEN jsonb_typeof(s->'permission') = 'object' THEN jsonb_build_object('permission', s->'permission'
				|| CASE WHEN jsonb_typeof(s->'permission'->'permission') = 'string'
					THEN jsonb_build_object('permission', left(s->'permission'->>'permission', 200)) ELSE '{}'::jsonb END
				|| CASE WHEN jsonb_typeof(s->'permission'->'patterns') = 'array'
					THEN jsonb_build_object('patterns', coalesce((SELECT jsonb_agg(CASE WHEN jsonb_typeof(p) = 'string'
						THEN to_jsonb(left(p #>> '{}', 200)) ELSE p END ORDER BY n)
						FROM jsonb_array_elements(s->'permission'->'patterns') WITH ORDINALITY AS a(p, n) WHERE n <= 10), '[]'::jsonb))
					ELSE '{}'::jsonb END)
				ELSE '{}'::jsonb END
		FROM (SELECT t - 'prompt' - 'result' - 'followUps' - 'notifications' AS s) AS x
	$$;
	CREATE FUNCTION asyncagents_task_summary() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		NEW.summary := asyncagents_summary(NEW.task::jsonb);
		NEW.anchor := coalesce(nullif(NEW.summary->>'anchorSessionID', ''), NEW.parent);
		RETURN NEW;
	END $$;
	CREATE FUNCTION asyncagents_task_changed() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		PERFORM pg_advisory_xact_lock_shared(hashtext('asyncagents_changes'), 0);
		NEW.seq := nextval('asyncagents_changes');
		PERFORM pg_notify('asyncagents_changes', NEW.holder);
		RETURN NEW;
	END $$;
	CREATE FUNCTION asyncagents_task_removed() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		PERFORM pg_advisory_xact_lock_shared(hashtext('asyncagents_changes'), 0);
		INSERT INTO asyncagents_removed (id, seq, holder) VALUES (OLD.id, nextval('asyncagents_changes'), OLD.holder)
			ON CONFLICT (id) DO UPDATE SET seq = excluded.seq, holder = excluded.holder, removed = now();
		PERFORM pg_notify('asyncagents_changes', OLD.holder);
		RETURN OLD;
	END $$;
	CREATE TABLE asyncagents_removed (
		id      text PRIMARY KEY,
		seq     bigint NOT NULL,
		holder  text NOT NULL,
		removed timestamptz NOT NULL DEFAULT now()
	);
	CREATE INDEX asyncagents_removed_seq ON asyncagents_removed (seq);
	CREATE INDEX asyncagents_removed_removed ON asyncagents_removed (removed);
	CREATE TABLE asyncagents_removed_pruned (seq bigint NOT NULL);
	INSERT INTO asyncagents_removed_pruned VALUES (0);
	CREATE TABLE asyncagents_cleared (
		session     text PRIMARY KEY,
		input       bigint NOT NULL,
		output      bigint NOT NULL,
		reasoning   bigint NOT NULL,
		cache_read  bigint NOT NULL,
		cache_write bigint NOT NULL,
		cost        double precision NOT NULL
	);
	ALTER TABLE asyncagents_tasks ADD COLUMN seq bigint, ADD COLUMN anchor text, ADD COLUMN summary jsonb;
	CREATE TRIGGER asyncagents_tasks_1_summary BEFORE INSERT OR UPDATE OF task, parent ON asyncagents_tasks
		FOR EACH ROW EXECUTE FUNCTION asyncagents_task_summary();
	CREATE TRIGGER asyncagents_tasks_2_changed BEFORE INSERT OR UPDATE OF task, status, parent, server ON asyncagents_tasks
		FOR EACH ROW EXECUTE FUNCTION asyncagents_task_changed();
	CREATE TRIGGER asyncagents_tasks_3_held BEFORE UPDATE OF holder ON asyncagents_tasks
		FOR EACH ROW WHEN (OLD.holder IS DISTINCT FROM NEW.holder) EXECUTE FUNCTION asyncagents_task_changed();
	CREATE TRIGGER asyncagents_tasks_4_removed AFTER DELETE ON asyncagents_tasks
		FOR EACH ROW EXECUTE FUNCTION asyncagents_task_removed();
	UPDATE asyncagents_tasks SET task = task;
	ALTER TABLE asyncagents_tasks ALTER COLUMN seq SET NOT NULL, ALTER COLUMN anchor SET NOT NULL,
		ALTER COLUMN summary SET NOT NULL;
	CREATE INDEX asyncagents_tasks_seq ON asyncagents_tasks (seq);
	CREATE INDEX asyncagents_tasks_anchor ON asyncagents_tasks (anchor);`

// migrateSchema brings the schema to version to (len(migrations) but in tests), refusing a
// newer one.
func migrateSchema(ctx context.Context, pool *pgxpool.Pool, to int) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("pgstore: %w", err)
	}
	defer conn.Release()
	m, err := migrate.NewMigrator(ctx, conn.Conn(), "asyncagents_schema_version")
	if err != nil {
		return fmt.Errorf("pgstore: schema: %w", err)
	}
	for i, sql := range migrations {
		m.AppendMigration(fmt.Sprintf("%03d", i+1), sql, "")
	}
	v, err := m.GetCurrentVersion(ctx)
	if err != nil {
		return fmt.Errorf("pgstore: schema version: %w", err)
	}
	if int(v) > len(migrations) {
		return fmt.Errorf("%w: version %d, this program knows up to %d", ErrSchemaNewer, v, len(migrations))
	}
	if err := m.MigrateTo(ctx, int32(to)); err != nil {
		var bad migrate.BadVersionError
		if errors.As(err, &bad) {
			return fmt.Errorf("%w: %v", ErrSchemaNewer, err)
		}
		return fmt.Errorf("pgstore: migrate schema: %w", err)
	}
	return nil
}
