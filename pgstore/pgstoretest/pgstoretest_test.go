package pgstoretest_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/asyncagents/asyncagents/pgstore/pgstoretest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestKillStart: a database's rows survive a SIGKILL of the server and a start again on the
// same port.
func TestKillStart(t *testing.T) {
	srv := pgstoretest.Start(t)
	url := srv.NewDatabase(t)
	ctx := t.Context()
	exec := func(sql string) {
		t.Helper()
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	exec("CREATE TABLE kept (n int); INSERT INTO kept VALUES (1)")
	srv.Kill()
	if c, err := pgx.Connect(ctx, url); err == nil {
		c.Close(ctx)
		t.Fatal("connected to a killed server")
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	exec("DO $$ BEGIN IF (SELECT count(*) FROM kept) <> 1 THEN RAISE 'lost the row'; END IF; END $$")
}
