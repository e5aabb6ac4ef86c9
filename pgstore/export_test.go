package pgstore

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SetSchemaVersion sets the schema version a database says it has, as a newer program would.
func SetSchemaVersion(ctx context.Context, url string, v int) error {
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	_, err = c.Exec(ctx, "UPDATE asyncagents_schema_version SET version = $1", v)
	return err
}

// MigrateTo brings the schema of the database at url to version v, as an older program would.
func MigrateTo(ctx context.Context, url string, v int) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	return migrateSchema(ctx, pool, v)
}
