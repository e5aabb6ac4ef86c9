package pgstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/pgstore"
	"github.com/asyncagents/asyncagents/storetest"
)

// connect opens a connection of its own to url, closed when t ends.
func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// exec runs sql on c and fails t on an error.
func exec(t *testing.T, c interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, sql string, args ...any) {
	t.Helper()
	if _, err := c.Exec(t.Context(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// changeIDs returns the ids of changes, in order.
func changeIDs(cs []asyncagents.Change) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Task.ID
	}
	return out
}

// readCase opens two stores with leases of 10 s on a new database: a holds ses_1 and ses_2,
// which the reader has read; after is the number to read after.
func readCase(t *testing.T) (url string, a, reader *pgstore.Store, after uint64) {
	t.Helper()
	url = pg.Get(t).NewDatabase(t)
	a, reader = open(t, url, 10*time.Second), open(t, url, 10*time.Second)
	for _, id := range []string{"ses_1", "ses_2"} {
		if err := a.Save(t.Context(), task(id)); err != nil {
			t.Fatal(err)
		}
	}
	_, after, err := reader.Changes(t.Context(), 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	return url, a, reader, after
}

// A change numbered before another but committed after it is not skipped: a reader that
// finds the later one waits for the earlier to commit (the changes lock), so that a reader
// asking again with the number it got misses nothing (issue 35: other hosts' changes are read
// incrementally).
func TestChangesWaitForEarlierNumbers(t *testing.T) {
	url, a, reader, after := readCase(t)
	ctx := t.Context()
	// A transaction numbers a change of ses_1 and stays open; a's save of ses_2, numbered
	// after it, commits first.
	tx, err := connect(t, url).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	exec(t, tx, `UPDATE asyncagents_tasks SET status = 'completed' WHERE id = 'ses_1'`)
	done := task("ses_2")
	done.Status = asyncagents.StatusCompleted
	if err := a.Save(ctx, done); err != nil {
		t.Fatal(err)
	}
	type read struct {
		changes []asyncagents.Change
		next    uint64
		err     error
	}
	first := make(chan read, 1)
	go func() {
		c, n, err := reader.Changes(ctx, after, 100)
		first <- read{c, n, err}
	}()
	locks := connect(t, url)
	testmain.Eventually(10*time.Second, func() bool { // the reader waits for the lock, or returned
		var waiting int
		err := locks.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`).Scan(&waiting)
		return err != nil || waiting > 0 || len(first) > 0
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-first
	if r.err != nil {
		t.Fatal(r.err)
	}
	rest, _, err := reader.Changes(ctx, r.next, 100)
	if err != nil {
		t.Fatal(err)
	}
	if got := changeIDs(append(r.changes, rest...)); !slices.Equal(got, []string{"ses_1", "ses_2"}) {
		t.Errorf("changes read before and after the earlier change committed: %v, want [ses_1 ses_2]", got)
	}
}

// A reader that asks after a number older than the tombstones pruned since, or after a number
// the store never gave, is told to read again from 0 (ErrLagged).
func TestChangesLagged(t *testing.T) {
	url, a, reader, after := readCase(t)
	ctx := t.Context()
	if err := a.Delete(ctx, "ses_1"); err != nil {
		t.Fatal(err)
	}
	// The tombstone is older than an hour at the next Delete, which prunes it.
	exec(t, connect(t, url), `UPDATE asyncagents_removed SET removed = now() - interval '2 hours'`)
	if err := a.Delete(ctx, "ses_unknown"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := reader.Changes(ctx, after, 100); !errors.Is(err, asyncagents.ErrLagged) {
		t.Errorf("Changes after a number older than a pruned tombstone: %v, want ErrLagged", err)
	}
	if got, _, err := reader.Changes(ctx, 0, 100); err != nil || !slices.Equal(changeIDs(got), []string{"ses_2"}) {
		t.Errorf("Changes(0) after the prune: %v, %v; want [ses_2]", changeIDs(got), err)
	}
	if _, _, err := reader.Changes(ctx, 1<<40, 100); !errors.Is(err, asyncagents.ErrLagged) {
		t.Errorf("Changes after a number the store never gave: %v, want ErrLagged", err)
	}
	if _, _, err := reader.Changes(ctx, 0, 0); !errors.Is(err, asyncagents.ErrInvalidInput) {
		t.Errorf("Changes with limit 0: %v, want ErrInvalidInput", err)
	}
}

// WaitChanges returns when another store changes a task, not when its own store does, and
// Close ends it.
func TestWaitChanges(t *testing.T) {
	url := pg.Get(t).NewDatabase(t)
	ctx := t.Context()
	a := open(t, url, 10*time.Second)
	b, err := pgstore.Open(ctx, url, pgstore.Options{Lease: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	wait := func() chan error {
		c := make(chan error, 1)
		go func() { c <- b.WaitChanges(ctx) }()
		return c
	}
	// a saves until b, which begins listening meanwhile, is woken.
	woken := wait()
	if !testmain.Eventually(10*time.Second, func() bool {
		if err := a.Save(ctx, task("ses_a")); err != nil {
			t.Fatal(err)
		}
		return len(woken) > 0
	}) {
		t.Fatal("WaitChanges did not return within 10 s of another store's saves")
	}
	if err := <-woken; err != nil {
		t.Fatalf("WaitChanges after another store's save: %v", err)
	}
	// The notifications of a's last saves, sent while the test looked, wake b once more at
	// most: it takes them.
	for drained := false; !drained; {
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err := b.WaitChanges(short)
		cancel()
		if drained = errors.Is(err, context.DeadlineExceeded); !drained && err != nil {
			t.Fatal(err)
		}
	}
	// b's own save does not wake it; a's does.
	woken = wait()
	if err := b.Save(ctx, task("ses_b")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-woken:
		t.Fatalf("WaitChanges returned %v after its own store's save", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := a.Save(ctx, task("ses_a")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-woken:
		if err != nil {
			t.Fatalf("WaitChanges after another store's save: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitChanges did not return within 10 s of another store's save")
	}
	// Close ends a WaitChanges that waits, and later ones at once.
	woken = wait()
	b.Close()
	for range 2 {
		select {
		case err := <-woken:
			if err == nil {
				t.Fatal("WaitChanges ended by Close returned nil")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("WaitChanges did not return within 10 s of Close")
		}
		woken = wait()
	}
}

// A database of schema 4, with a task saved by a program of that version, is migrated: the
// task is numbered and summarized, and counts for the limits.
func TestMigrationNumbersTasks(t *testing.T) {
	url := pg.Get(t).NewDatabase(t)
	ctx := t.Context()
	if err := pgstore.MigrateTo(ctx, url, 4); err != nil {
		t.Fatal(err)
	}
	old := storetest.FullTask("ses_old", 1)
	raw, err := json.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	exec(t, connect(t, url), `INSERT INTO asyncagents_tasks (id, parent, status, started, holder, fence, lease_until, task)
		VALUES ($1, $2, $3, $4, 'old-host', 1, now() + interval '1 minute', $5)`,
		old.ID, old.ParentSessionID, string(old.Status), old.Started, raw)
	reader := open(t, url, 10*time.Second)
	got, _, err := reader.Changes(ctx, 0, 100)
	if err != nil || len(got) != 1 {
		t.Fatalf("Changes(0) after the migration: %v, %v; want ses_old", changeIDs(got), err)
	}
	if c := got[0]; c.Seq == 0 || c.Task.Prompt != "" || c.Task.Result != "" || c.Task.Description != old.Description {
		t.Errorf("Changes(0) after the migration returned %+v, want ses_old numbered and summarized", c)
	}
	if u, err := reader.TreeUsage(ctx, old.AnchorSessionID); err != nil || u != old.Usage {
		t.Errorf("TreeUsage(%s) = %v, %v; want %v, the migrated task's usage", old.AnchorSessionID, u, err, old.Usage)
	}
}

// A database of schema 5 whose tasks have their sessions' ids as ids (an earlier version's)
// is migrated: the tree of a session goes through them, and through a task of this version
// below them, whose id is not its session's.
func TestMigrationKeepsTheTreesOfOldTasks(t *testing.T) {
	url := pg.Get(t).NewDatabase(t)
	ctx := t.Context()
	if err := pgstore.MigrateTo(ctx, url, 5); err != nil {
		t.Fatal(err)
	}
	conn := connect(t, url)
	var want asyncagents.Usage
	for i, parent := range []string{"ses_root", "ses_top"} { // ses_child was launched by task ses_top
		old := storetest.FullTask([]string{"ses_top", "ses_child"}[i], i)
		old.SessionID, old.ParentSessionID, old.AnchorSessionID = "", parent, ""
		want = want.Add(old.Usage)
		raw, err := json.Marshal(old)
		if err != nil {
			t.Fatal(err)
		}
		exec(t, conn, `INSERT INTO asyncagents_tasks (id, parent, status, started, holder, fence, lease_until, task)
			VALUES ($1, $2, $3, $4, 'old-host', 1, now() + interval '1 minute', $5)`,
			old.ID, old.ParentSessionID, string(old.Status), old.Started, raw)
	}
	s := open(t, url, 10*time.Second)
	if u, err := s.TreeUsage(ctx, "ses_root"); err != nil || u != want {
		t.Errorf("TreeUsage(ses_root) of migrated tasks = %v, %v; want %v", u, err, want)
	}
	below := storetest.FullTask("tsk_below", 2) // runs in ses_below
	below.ParentSessionID, below.AnchorSessionID = "ses_child", ""
	if err := s.Save(ctx, below); err != nil {
		t.Fatal(err)
	}
	want = want.Add(below.Usage)
	if u, err := s.TreeUsage(ctx, "ses_root"); err != nil || u != want {
		t.Errorf("TreeUsage(ses_root) with a new task below = %v, %v; want %v", u, err, want)
	}
}

// Slots of tasks that ended or are gone count for nothing and are deleted, whoever left them
// there (issue 35: a serve paused past its lease re-inserted and granted a slot for a task
// another serve had run and finished, and nothing ever deleted it).
func TestStaleSlotsDoNotCount(t *testing.T) {
	url := pg.Get(t).NewDatabase(t)
	ctx := t.Context()
	a := open(t, url, 10*time.Second)
	queued, ended := task("ses_queued"), task("ses_ended")
	queued.Status, ended.Status = asyncagents.StatusQueued, asyncagents.StatusCompleted
	for _, tk := range []asyncagents.Task{queued, ended} {
		if err := a.Save(ctx, tk); err != nil {
			t.Fatal(err)
		}
	}
	c := connect(t, url)
	exec(t, c, `INSERT INTO asyncagents_slots (task, key, granted) VALUES ('ses_ended', 'default', true), ('ses_gone', 'default', true)`)
	if got, err := a.Slots(ctx, "default", 1, []string{"ses_queued"}); err != nil || !slices.Equal(got, []string{"ses_queued"}) {
		t.Fatalf("Slots(default, 1, [ses_queued]) with the slots of an ended and a deleted task: %v, %v; want [ses_queued]", got, err)
	}
	var left int
	if err := c.QueryRow(ctx, `SELECT count(*) FROM asyncagents_slots WHERE task <> 'ses_queued'`).Scan(&left); err != nil || left != 0 {
		t.Errorf("%d slots of tasks that ended or are gone left, %v; want none", left, err)
	}
}

// costTasks and costSize are the tasks of TestChangesReadCost and their size: issue 35's
// 5,000 rows of 19 KB.
const (
	costTasks = 5000
	costSize  = 19 << 10
)

// costStores returns a store holding costTasks tasks of costSize bytes, each with a prompt
// and a result of half that, and another store.
func costStores(tb testing.TB) (writer, reader *pgstore.Store) {
	url := pg.Get(tb).NewDatabase(tb)
	ctx := tb.Context()
	for _, s := range []**pgstore.Store{&writer, &reader} {
		var err error
		if *s, err = pgstore.Open(ctx, url, pgstore.Options{Lease: time.Minute}); err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { (*s).Close() })
	}
	const writers = 8
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := w; i < costTasks; i += writers {
				t := storetest.FullTask(fmt.Sprintf("ses_%05d", i), i)
				t.Prompt = strings.Repeat("p", costSize/2)
				t.Result = strings.Repeat("r", costSize/2)
				if err := writer.Save(ctx, t); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		tb.Fatal(err)
	}
	return writer, reader
}

// readAll reads every change from after, 500 at a time, and returns them and the next number.
func readAll(tb testing.TB, s *pgstore.Store, after uint64) ([]asyncagents.Change, uint64) {
	var all []asyncagents.Change
	for {
		got, next, err := s.Changes(tb.Context(), after, 500)
		if err != nil {
			tb.Fatal(err)
		}
		all = append(all, got...)
		if next == after {
			return all, next
		}
		after = next
	}
}

// measure returns the bytes f allocates, those it leaves in use after a collection, and how
// long it takes.
func measure(f func()) (allocated, retained uint64, took time.Duration) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	f()
	took = time.Since(start)
	runtime.ReadMemStats(&after)
	allocated = after.TotalAlloc - before.TotalAlloc
	runtime.GC()
	runtime.ReadMemStats(&after)
	return allocated, max(after.HeapAlloc, before.HeapAlloc) - before.HeapAlloc, took
}

// What a Manager's reads of other hosts' tasks cost (issue 35: every serve read and decoded
// the whole task table every second; the target is an idle serve under 2 % of a core and
// 100 MiB with 5,000 rows of 19 KB held by other hosts): the first read of every task's
// summary allocates a small part of what the whole rows would, and a read with nothing new
// takes a millisecond or so and a few dozen allocations.
func TestChangesReadCost(t *testing.T) {
	switch {
	case testing.Short():
		t.Skip("writes 5,000 tasks of 19 KB")
	case raceEnabled:
		t.Skip("measures time and allocations, which the race detector distorts")
	}
	_, reader := costStores(t)
	var all []asyncagents.Change
	var next uint64
	first, kept, firstTook := measure(func() { all, next = readAll(t, reader, 0) })
	if len(all) != costTasks {
		t.Fatalf("the first read returned %d changes, want %d", len(all), costTasks)
	}
	const idleReads = 200
	idle, _, idleTook := measure(func() {
		for range idleReads {
			if got, n, err := reader.Changes(t.Context(), next, 500); err != nil || len(got) > 0 || n != next {
				t.Fatalf("Changes with nothing new: %d changes, next %d, %v", len(got), n, err)
			}
		}
	})
	allocs := testing.AllocsPerRun(idleReads, func() { reader.Changes(t.Context(), next, 500) })
	var tasks []asyncagents.Task
	whole, wholeKept, wholeTook := measure(func() {
		var err error
		if tasks, err = reader.Tasks(t.Context(), ""); err != nil {
			t.Fatal(err)
		}
	})
	runtime.KeepAlive(all)
	runtime.KeepAlive(tasks)
	perRead := idleTook / idleReads
	t.Logf("%d tasks of %d KiB held by another store: the first read of their summaries took %v, allocated %.1f MiB and keeps %.1f MiB "+
		"(the whole rows, Tasks: %v, %.1f MiB, %.1f MiB); a read with nothing new took %v, %.0f allocations, %d B",
		costTasks, costSize>>10, firstTook.Round(time.Millisecond), mib(first), mib(kept),
		wholeTook.Round(time.Millisecond), mib(whole), mib(wholeKept), perRead.Round(10*time.Microsecond), allocs, idle/idleReads)
	if first > whole/4 || kept > wholeKept/4 {
		t.Errorf("the first read of the summaries allocated %.1f MiB and keeps %.1f MiB, more than a quarter of the whole rows' %.1f and %.1f",
			mib(first), mib(kept), mib(whole), mib(wholeKept))
	}
	if perRead > 20*time.Millisecond || allocs > 100 {
		t.Errorf("a read with nothing new took %v and %.0f allocations, want at most 20 ms and 100", perRead, allocs)
	}
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// BenchmarkChangesNothingNew is a Manager's read of other hosts' changes when there are none,
// with 5,000 tasks of 19 KB held by another store.
func BenchmarkChangesNothingNew(b *testing.B) {
	_, reader := costStores(b)
	_, next := readAll(b, reader, 0)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := reader.Changes(b.Context(), next, 500); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkChangesFirstRead is a Manager's first read of other hosts' tasks, 5,000 of 19 KB,
// as summaries.
func BenchmarkChangesFirstRead(b *testing.B) {
	_, reader := costStores(b)
	b.ReportAllocs()
	for b.Loop() {
		readAll(b, reader, 0)
	}
}
