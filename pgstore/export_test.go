package pgstore

import (
	"context"

	"github.com/jackc/pgx/v5"
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
