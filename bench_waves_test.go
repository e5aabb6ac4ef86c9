package asyncagents_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// BenchmarkRealServerWaves measures what a parent's notifications cost its model, on the
// real server with the scripted model recording every request: tasks of one parent end
// together (each run 2 s) or spread evenly over 5 s (runs of 1 to 6 s), while the parent is
// idle, or busy in a turn of its own (a 7 s model step started before the launches), under
// each notification policy. One round per case and -benchtime iteration. Reported:
//
//	turns          the parent's model requests after the launches (the busy parent's own
//	               first step not counted)
//	chars          the bytes of those requests' bodies
//	idle-visible-p50/max-ms  from a run's idle frame to its notification being in the parent
//	                         (Notification.Delivered)
//	idle-turn-p50/max-ms     from a run's idle frame to the first model request of the parent
//	                         whose context holds its notification
//	idle-turn-last-ms        the same for the run whose idle came last
//	lost, dup      notifications never in a request of the parent, and notifications in the
//	               parent more than once
//
// It takes minutes, so it runs only when ASYNCAGENTS_BENCH_WAVES is set (make bench-waves).
func BenchmarkRealServerWaves(b *testing.B) {
	if os.Getenv("ASYNCAGENTS_BENCH_WAVES") == "" {
		b.Skip("set ASYNCAGENTS_BENCH_WAVES=1 (make bench-waves): it takes minutes")
	}
	srv := opencodetest.Start(b)
	for _, policy := range []asyncagents.NotifyPolicy{asyncagents.NotifyPerWave, asyncagents.NotifyPerRun} {
		for _, n := range []int{1, 10, 50} {
			for _, spread := range []bool{false, true} {
				for _, busyParent := range []bool{false, true} {
					finish := map[bool]string{false: "together", true: "spread5s"}[spread]
					parent := map[bool]string{false: "idle", true: "busy"}[busyParent]
					name := fmt.Sprintf("policy=%s/tasks=%d/finish=%s/parent=%s", policy, n, finish, parent)
					b.Run(name, func(b *testing.B) {
						var w waveResult
						for range b.N {
							waveRound(b, srv, waveCase{policy: policy, tasks: n, spread: spread, busy: busyParent}, &w)
						}
						rounds := float64(b.N)
						b.ReportMetric(float64(w.turns)/rounds, "turns")
						b.ReportMetric(float64(w.chars)/rounds, "chars")
						b.ReportMetric(millis(quantile(w.visible, 0.5)), "idle-visible-p50-ms")
						b.ReportMetric(millis(longest(w.visible)), "idle-visible-max-ms")
						b.ReportMetric(millis(quantile(w.turn, 0.5)), "idle-turn-p50-ms")
						b.ReportMetric(millis(longest(w.turn)), "idle-turn-max-ms")
						b.ReportMetric(millis(w.last)/rounds, "idle-turn-last-ms")
						b.ReportMetric(float64(w.lost), "lost")
						b.ReportMetric(float64(w.dup), "dup")
					})
				}
			}
		}
	}
}

type waveCase struct {
	policy       asyncagents.NotifyPolicy
	tasks        int
	spread, busy bool
}

type waveResult struct {
	turns, chars, lost, dup int
	visible, turn           []time.Duration
	last                    time.Duration // summed over rounds
}

// waveRound runs one round of c on srv and adds what it measured to w.
func waveRound(b *testing.B, srv *opencodetest.Server, c waveCase, w *waveResult) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	client := srv.Client()
	idles := observeIdles(b, ctx, client)
	defer idles.stop()
	m, err := asyncagents.New(client, asyncagents.WithNotifyPolicy(c.policy))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = m.Close(context.Background()) }()
	tag := "wv" + strconv.FormatInt(time.Now().UnixNano(), 36)
	parent, err := client.CreateSession(ctx, opencode.CreateSessionRequest{Title: "parent " + tag})
	if err != nil {
		b.Fatal(err)
	}
	caller := asyncagents.Caller{SessionID: parent.ID, Agent: "build"}
	if c.busy { // the parent's own turn, a step of 7 s, runs while the tasks end
		if err := client.PromptAsync(ctx, parent.ID, opencode.PromptRequest{Agent: "build",
			Parts: []opencode.TextPartInput{opencode.NewText("SLEEP:7 (" + tag + " busy)")}}); err != nil {
			b.Fatal(err)
		}
		for !busy(ctx, client, parent.ID) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	start := time.Now()
	ids := make([]string, c.tasks)
	var wg sync.WaitGroup
	for i := range c.tasks {
		secs := 2.0
		if c.spread && c.tasks > 1 {
			secs = 1 + 5*float64(i)/float64(c.tasks-1)
		}
		wg.Go(func() {
			t, err := m.Launch(ctx, asyncagents.LaunchInput{Caller: caller, Agent: "general",
				Description: fmt.Sprintf("%s-%d", tag, i), Prompt: fmt.Sprintf("SLEEP:%.2f (child %d)", secs, i)})
			if err != nil {
				b.Error(err)
				return
			}
			ids[i] = t.ID
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	// Until every notification is delivered and the parent's last turn ended.
	tasks := awaitTasks(b, ctx, m, ids, func(t asyncagents.Task) bool {
		return t.Status.Terminal() && len(t.Notifications) > 0 && t.Notifications[0].State == asyncagents.NotificationDelivered &&
			t.Notifications[0].Turn != asyncagents.TurnOwed
	}, func() bool {
		if busy(ctx, client, parent.ID) {
			return false
		}
		time.Sleep(500 * time.Millisecond) // a turn asked for last is seen busy
		return !busy(ctx, client, parent.ID)
	})

	// The parent's requests after the launches: those whose context holds this round's tag.
	var reqs []opencodetest.Request
	for _, r := range srv.Model.Requests() {
		if r.Time.After(start) && strings.Contains(string(r.Body), tag) && !strings.Contains(string(r.Body), "(child ") {
			reqs = append(reqs, r)
		}
	}
	if c.busy && len(reqs) > 0 && !strings.Contains(string(reqs[0].Body), tag+"-") {
		reqs = reqs[1:] // the busy step's request, made as the launches began
	}
	w.turns += len(reqs)
	for _, r := range reqs {
		w.chars += len(r.Body)
	}
	msgs, err := client.Messages(ctx, parent.ID, 0)
	if err != nil {
		b.Fatal(err)
	}
	var lastIdle time.Time
	var lastTurn time.Duration
	for i, t := range tasks {
		idle, ok := idles.first(t.ID)
		if !ok {
			b.Fatalf("no idle frame seen for %s", t.ID)
		}
		note := t.Notifications[0]
		w.visible = append(w.visible, note.Delivered.Sub(idle))
		desc := fmt.Sprintf(`\"%s-%d\"`, tag, i)
		seen := slices.IndexFunc(reqs, func(r opencodetest.Request) bool { return strings.Contains(string(r.Body), desc) })
		if seen < 0 {
			w.lost++
		} else {
			w.turn = append(w.turn, reqs[seen].Time.Sub(idle))
			if idle.After(lastIdle) {
				lastIdle, lastTurn = idle, reqs[seen].Time.Sub(idle)
			}
		}
		in := 0
		for _, msg := range msgs {
			if msg.Info.ID == note.MessageID {
				in++
			}
		}
		if in > 1 {
			w.dup += in - 1
		}
		if in == 0 {
			w.lost++
		}
	}
	w.last += lastTurn
}

// longest returns the longest of ds, 0 for none.
func longest(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return slices.Max(ds)
}
