package asyncagents_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
	"github.com/asyncagents/asyncagents/pgstore"
	"github.com/asyncagents/asyncagents/pgstore/pgstoretest"
)

// BenchmarkRealServerHosts measures Managers sharing a PostgreSQL database (pgstore), against
// one Manager on a file store and three Managers on files of their own (what three event
// streams cost the server, without a shared store), on the real server: 60 tasks of 6 parents
// (runs of 2 s) launched at once through the Managers in turn, with NotifyNoReply. Reported:
//
//	launch-per-s       launches per second (all 60 launched at once, to each one's return)
//	done-per-s         run ends per second, from the first idle frame to the last completion
//	idle-done-p50/p99-ms   from a run's idle frame to the task completed in its Manager
//	idle-note-p50/p99-ms   from a run's idle frame to its notification delivered
//	trips-per-task     round trips to the database per task, launch to delivered notification
//	                   (renewals and claims included; 0 for the file store)
//
// and, in takeover, the time from a Manager's stop (its leases left to expire, lease 10 s, the
// last renewed at the stop) to each of its 20 tasks (which ended meanwhile) claimed by another
// Manager, and completed there:
//
//	claimed-p50/max-s, done-p50/max-s
//
// It needs minutes, PostgreSQL and the OpenCode server, so it runs only when
// ASYNCAGENTS_BENCH_HOSTS is set (make bench-hosts).
func BenchmarkRealServerHosts(b *testing.B) {
	if os.Getenv("ASYNCAGENTS_BENCH_HOSTS") == "" {
		b.Skip("set ASYNCAGENTS_BENCH_HOSTS=1 (make bench-hosts): it takes minutes")
	}
	srv := opencodetest.Start(b)
	pg := pgstoretest.Start(b)
	for _, tc := range []struct {
		name  string
		hosts int
		pg    bool
	}{{"store=file/hosts=1", 1, false}, {"store=file/hosts=3", 3, false}, {"store=postgres/hosts=1", 1, true}, {"store=postgres/hosts=3", 3, true}} {
		b.Run(tc.name, func(b *testing.B) {
			var r hostsResult
			for range b.N {
				hostsRound(b, srv, pg, tc.hosts, tc.pg, &r)
			}
			rounds := float64(b.N)
			b.ReportMetric(r.launchRate/rounds, "launch-per-s")
			b.ReportMetric(r.doneRate/rounds, "done-per-s")
			b.ReportMetric(millis(quantile(r.done, 0.5)), "idle-done-p50-ms")
			b.ReportMetric(millis(quantile(r.done, 0.99)), "idle-done-p99-ms")
			b.ReportMetric(millis(quantile(r.note, 0.5)), "idle-note-p50-ms")
			b.ReportMetric(millis(quantile(r.note, 0.99)), "idle-note-p99-ms")
			b.ReportMetric(r.trips/rounds, "trips-per-task")
		})
	}
	b.Run("takeover/lease=10s", func(b *testing.B) {
		var claimed, done []time.Duration
		for range b.N {
			c, d := takeoverRound(b, srv, pg)
			claimed, done = append(claimed, c...), append(done, d...)
		}
		b.ReportMetric(quantile(claimed, 0.5).Seconds(), "claimed-p50-s")
		b.ReportMetric(longest(claimed).Seconds(), "claimed-max-s")
		b.ReportMetric(quantile(done, 0.5).Seconds(), "done-p50-s")
		b.ReportMetric(longest(done).Seconds(), "done-max-s")
	})
}

type hostsResult struct {
	launchRate, doneRate, trips float64 // summed over rounds
	done, note                  []time.Duration
}

const hostsTasks, hostsParents = 60, 6

// hostsRound runs one round of BenchmarkRealServerHosts and adds to r.
func hostsRound(b *testing.B, srv *opencodetest.Server, pg *pgstoretest.Server, hosts int, shared bool, r *hostsResult) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := srv.Client()
	idles := observeIdles(b, ctx, c)
	defer idles.stop()
	var url string
	if shared {
		url = pg.NewDatabase(b)
	}
	var managers []*asyncagents.Manager
	var stores []*pgstore.Store
	for range hosts {
		var store asyncagents.Store
		if shared {
			s, err := pgstore.Open(ctx, url, pgstore.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			stores, store = append(stores, s), s
		} else {
			s, err := asyncagents.NewFileStore(filepath.Join(b.TempDir(), "tasks.jsonl"))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			store = s
		}
		m, err := asyncagents.New(c, asyncagents.WithStore(store), asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply))
		if err != nil {
			b.Fatal(err)
		}
		defer m.Close(context.Background())
		managers = append(managers, m)
	}
	var callers []asyncagents.Caller
	for range hostsParents {
		p, err := c.CreateSession(ctx, opencode.CreateSessionRequest{Title: "parent"})
		if err != nil {
			b.Fatal(err)
		}
		callers = append(callers, asyncagents.Caller{SessionID: p.ID, Agent: "build"})
	}
	ids := make([]string, hostsTasks)
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := range hostsTasks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t, err := managers[i%hosts].Launch(ctx, asyncagents.LaunchInput{Caller: callers[i%hostsParents], Agent: "general",
				Description: fmt.Sprint("task ", i), Prompt: fmt.Sprintf("SLEEP:2 (task %d)", i)})
			if err != nil {
				b.Error(err)
				return
			}
			ids[i] = t.ID
		}()
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	r.launchRate += hostsTasks / time.Since(t0).Seconds()
	var first, last time.Time
	for i, id := range ids {
		m := managers[i%hosts]
		t := awaitTasks(b, ctx, m, []string{id}, func(t asyncagents.Task) bool {
			return t.Status.Terminal() && len(t.Notifications) > 0 && t.Notifications[0].State != asyncagents.NotificationPending
		}, nil)[0]
		if t.Status != asyncagents.StatusCompleted || t.Notifications[0].State != asyncagents.NotificationDelivered {
			b.Fatalf("task %s: %s, notification %s", t.ID, t.Status, t.Notifications[0].State)
		}
		idle, ok := idles.first(id)
		if !ok {
			b.Fatalf("no idle frame seen for %s", id)
		}
		if first.IsZero() || idle.Before(first) {
			first = idle
		}
		if t.Completed.After(last) {
			last = t.Completed
		}
		r.done = append(r.done, t.Completed.Sub(idle))
		r.note = append(r.note, t.Notifications[0].Delivered.Sub(idle))
	}
	r.doneRate += hostsTasks / last.Sub(first).Seconds()
	var trips int64
	for _, s := range stores {
		trips += s.RoundTrips()
	}
	r.trips += float64(trips) / hostsTasks
}

// takeoverRound launches 20 tasks on a Manager, stops it with its leases held, lets the
// runs end, and returns for each task the time from the stop to its completion by a second
// Manager that was running all along.
func takeoverRound(b *testing.B, srv *opencodetest.Server, pg *pgstoretest.Server) (claimed, done []time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := srv.Client()
	url := pg.NewDatabase(b)
	open := func() *pgstore.Store {
		s, err := pgstore.Open(ctx, url, pgstore.Options{})
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	first, second := open(), open()
	defer first.Close()
	defer second.Close()
	a, err := asyncagents.New(c, asyncagents.WithStore(first), asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply))
	if err != nil {
		b.Fatal(err)
	}
	other, err := asyncagents.New(c, asyncagents.WithStore(second), asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply))
	if err != nil {
		b.Fatal(err)
	}
	defer other.Close(context.Background())
	p, err := c.CreateSession(ctx, opencode.CreateSessionRequest{Title: "parent"})
	if err != nil {
		b.Fatal(err)
	}
	caller := asyncagents.Caller{SessionID: p.ID, Agent: "build"}
	var ids []string
	for i := range 20 {
		t, err := a.Launch(ctx, asyncagents.LaunchInput{Caller: caller, Agent: "general",
			Description: fmt.Sprint("task ", i), Prompt: fmt.Sprintf("SLEEP:5 (task %d)", i)})
		if err != nil {
			b.Fatal(err)
		}
		ids = append(ids, t.ID)
	}
	if err := a.Close(ctx); err != nil { // the store keeps its leases: they expire
		b.Fatal(err)
	}
	stopped := time.Now()
	seen, ended := map[string]bool{}, map[string]bool{}
	for len(ended) < len(ids) {
		for _, id := range ids {
			t, err := other.Get(id) // ErrTaskNotFound until it claims the task
			if err != nil || ended[id] {
				continue
			}
			if !seen[id] {
				seen[id] = true
				claimed = append(claimed, time.Since(stopped))
			}
			if t.Status.Terminal() {
				ended[id] = true
				done = append(done, t.Completed.Sub(stopped))
			}
		}
		select {
		case <-ctx.Done():
			b.Fatal("the tasks were not taken over in time")
		case <-time.After(5 * time.Millisecond):
		}
	}
	return claimed, done
}
