package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/pgstore"
	"github.com/asyncagents/asyncagents/pgstore/pgstoretest"
	"github.com/asyncagents/asyncagents/storetest"
)

// pg is the PostgreSQL server the tests share, each with a database of its own.
var pg pgstoretest.Shared

func TestMain(m *testing.M) { testmain.Run(m, pg.Close) }

// holds reports whether s holds id's lease now.
func holds(s *pgstore.Store, id string) bool { return time.Now().Before(s.Held(id)) }

// open opens a store on url and closes it when t ends.
func open(t *testing.T, url string, lease time.Duration) *pgstore.Store {
	t.Helper()
	s, err := pgstore.Open(t.Context(), url, pgstore.Options{Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestConformance runs storetest on the store (T-19): a key is a database.
func TestConformance(t *testing.T) {
	srv := pg.Get(t)
	dbs := map[string]string{}
	storetest.Run(t, func(t *testing.T, key string) asyncagents.Store {
		if dbs[key] == "" {
			dbs[key] = srv.NewDatabase(t)
		}
		s, err := pgstore.Open(t.Context(), dbs[key], pgstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestLeaseConformance runs storetest's checks of the lease, hand-over and slot contracts on
// stores with leases of 1 s (H-2, H-4, H-5): a key is a database, which every store of the
// check opens.
func TestLeaseConformance(t *testing.T) {
	srv := pg.Get(t)
	dbs := map[string]string{}
	storetest.RunLeaseStore(t, func(t *testing.T, key, server string) asyncagents.LeaseStore {
		if dbs[key] == "" {
			dbs[key] = srv.NewDatabase(t)
		}
		s, err := pgstore.Open(t.Context(), dbs[key], pgstore.Options{Lease: time.Second, Server: server})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func task(id string) asyncagents.Task {
	return asyncagents.Task{ID: id, ParentSessionID: "ses_parent", Status: asyncagents.StatusRunning,
		Started: time.Now().UTC().Truncate(time.Millisecond)}
}

// twoStores opens two stores with a lease of 1 s on a new database of the shared server.
func twoStores(t *testing.T) (a, b *pgstore.Store) {
	t.Helper()
	url := pg.Get(t).NewDatabase(t)
	return open(t, url, time.Second), open(t, url, time.Second)
}

// TestLeases: a store holds what it saves; another claims it only after the lease expires,
// with a new fence; the first then loses it on Renew and on Save, and Held ends before
// the lease can expire (H-2).
func TestLeases(t *testing.T) {
	a, b := twoStores(t)
	ctx := t.Context()
	if err := a.Save(ctx, task("ses_1")); err != nil {
		t.Fatal(err)
	}
	if !holds(a, "ses_1") || holds(b, "ses_1") {
		t.Fatalf("Holds after a's save: a %v, b %v; want true, false", holds(a, "ses_1"), holds(b, "ses_1"))
	}
	if got, err := b.Claim(ctx); err != nil || len(got) != 0 {
		t.Fatalf("b claims a held lease: %v, %v", got, err)
	}
	if err := b.Save(ctx, task("ses_1")); !errors.Is(err, asyncagents.ErrLeaseLost) {
		t.Fatalf("b saves a's task: %v, want ErrLeaseLost", err)
	}
	renewing := time.Now() // the lease in the database expires a second after this, or later
	if lost, err := a.Renew(ctx); err != nil || len(lost) != 0 {
		t.Fatalf("a renews: lost %v, %v", lost, err)
	}
	// a stops renewing: Holds turns false before the lease expires in the database.
	deadline := time.Now().Add(time.Second)
	for holds(a, "ses_1") {
		time.Sleep(10 * time.Millisecond)
	}
	got, err := b.Claim(ctx)
	switch {
	case err != nil:
		t.Fatal(err)
	case len(got) != 0 && time.Now().Before(renewing.Add(time.Second)):
		t.Fatalf("b claims when a stopped holding, before the lease expired: %v", got)
	case len(got) != 0: // a machine slow enough that the lease expired meanwhile
		t.Logf("the lease expired before b's first claim")
	default:
		for time.Now().Before(deadline.Add(50 * time.Millisecond)) {
			time.Sleep(10 * time.Millisecond)
		}
		got, err = b.Claim(ctx)
	}
	if err != nil || len(got) != 1 || got[0].ID != "ses_1" {
		t.Fatalf("b claims the expired lease: %v, %v", got, err)
	}
	if !holds(b, "ses_1") {
		t.Fatal("b does not hold what it claimed")
	}
	if err := a.Save(ctx, task("ses_1")); !errors.Is(err, asyncagents.ErrLeaseLost) {
		t.Fatalf("a saves after b claimed: %v, want ErrLeaseLost", err)
	}
	if lost, err := a.Renew(ctx); err != nil || len(lost) != 0 { // Save forgot it already
		t.Fatalf("a renews after losing: lost %v, %v", lost, err)
	}
	if err := b.Save(ctx, task("ses_1")); err != nil {
		t.Fatal(err)
	}
}

// TestRenewReportsLost: a lease claimed away is reported by the next Renew.
func TestRenewReportsLost(t *testing.T) {
	a, b := twoStores(t)
	ctx := t.Context()
	for _, id := range []string{"ses_1", "ses_2"} {
		if err := a.Save(ctx, task(id)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(1100 * time.Millisecond)
	if err := a.Save(ctx, task("ses_2")); err != nil { // renews ses_2 alone
		t.Fatal(err)
	}
	if got, err := b.Claim(ctx); err != nil || len(got) != 1 || got[0].ID != "ses_1" {
		t.Fatalf("b claims %v, %v; want ses_1", got, err)
	}
	lost, err := a.Renew(ctx)
	if err != nil || len(lost) != 1 || lost[0] != "ses_1" {
		t.Fatalf("a renews: lost %v, %v; want [ses_1]", lost, err)
	}
}

// TestSchemaNewer: a database migrated by a newer program is refused.
func TestSchemaNewer(t *testing.T) {
	srv := pg.Get(t)
	url := srv.NewDatabase(t)
	open(t, url, 0)
	ctx := context.Background()
	if err := pgstore.SetSchemaVersion(ctx, url, 99); err != nil {
		t.Fatal(err)
	}
	_, err := pgstore.Open(ctx, url, pgstore.Options{})
	if !errors.Is(err, pgstore.ErrSchemaNewer) {
		t.Fatalf("Open on a newer schema: %v, want ErrSchemaNewer", err)
	}
}

// TestRenewRacesSave: a task saved while a Renew runs is held, not reported lost by it.
func TestRenewRacesSave(t *testing.T) {
	srv := pg.Get(t)
	url := srv.NewDatabase(t)
	ctx := t.Context()
	a := open(t, url, 10*time.Second)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := a.Save(ctx, task(fmt.Sprintf("ses_%06d", i))); err != nil {
				t.Error(err)
				return
			}
		}
	})
	defer func() { close(stop); wg.Wait() }()
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); {
		lost, err := a.Renew(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(lost) > 0 {
			t.Fatalf("Renew reported %v lost, though no other store exists", lost)
		}
	}
}

// TestSlotFreedWithoutRelease: the save of an ended task, and Delete, give the task's slot
// back, even when the Manager never gets to Release it (H-4). The grants themselves are
// storetest's to check.
func TestSlotFreedWithoutRelease(t *testing.T) {
	srv := pg.Get(t)
	for _, tc := range []struct {
		name string
		free func(ctx context.Context, s *pgstore.Store) error
	}{
		{"ended save", func(ctx context.Context, s *pgstore.Store) error {
			ended := task("ses_1")
			ended.Status = asyncagents.StatusCompleted
			return s.Save(ctx, ended)
		}},
		{"delete", func(ctx context.Context, s *pgstore.Store) error { return s.Delete(ctx, "ses_1") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			a := open(t, srv.NewDatabase(t), 0)
			for _, id := range []string{"ses_1", "ses_2"} {
				queued := task(id)
				queued.Status = asyncagents.StatusQueued
				if err := a.Save(ctx, queued); err != nil {
					t.Fatal(err)
				}
			}
			if got, err := a.Slots(ctx, "default", 1, []string{"ses_1", "ses_2"}); err != nil || !slices.Equal(got, []string{"ses_1"}) {
				t.Fatalf("slots: %v, %v", got, err)
			}
			if err := tc.free(ctx, a); err != nil {
				t.Fatal(err)
			}
			if got, err := a.Slots(ctx, "default", 1, []string{"ses_2"}); err != nil || !slices.Equal(got, []string{"ses_2"}) {
				t.Fatalf("slots after ses_1's %s: %v, %v; want [ses_2]", tc.name, got, err)
			}
		})
	}
}
