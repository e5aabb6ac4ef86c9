package asyncagents_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/asyncagentstest"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// BenchmarkRealServerLaunchLatency measures, on the real server, how long Launch takes to
// answer (what the task tool waits for) and how long the task's start takes after it (its
// session made or forked, the context posted, the prompt sent), for plain, digest and native
// launches from parents of 10 and 1,000 messages (ASYNCAGENTS_BENCH_PARENTS, e.g.
// "10,1000,10000", sets the sizes). Reported per size and mode: launch-p50-ms, launch-p99-ms,
// start-p50-ms. It posts thousands of messages, so it runs only when ASYNCAGENTS_BENCH_LAUNCH
// is set.
func BenchmarkRealServerLaunchLatency(b *testing.B) {
	if os.Getenv("ASYNCAGENTS_BENCH_LAUNCH") == "" {
		b.Skip("set ASYNCAGENTS_BENCH_LAUNCH=1: it posts thousands of messages")
	}
	sizes := []int{10, 1000}
	if s := os.Getenv("ASYNCAGENTS_BENCH_PARENTS"); s != "" {
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 2 {
				b.Fatalf("ASYNCAGENTS_BENCH_PARENTS: %q", s)
			}
			sizes = append(sizes, n)
		}
	}
	srv := opencodetest.Start(b)
	c := srv.Client()
	m, err := asyncagents.New(c, asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = m.Close(context.Background()) })
	for _, n := range sizes {
		tag := "[ll" + strconv.Itoa(n) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "]"
		parent := forkModesParent(b, c, n, tag)
		for _, mode := range []string{"plain", string(asyncagents.ForkDigest), string(asyncagents.ForkNative)} {
			b.Run(fmt.Sprintf("parent=%d/mode=%s", n, mode), func(b *testing.B) {
				var launches, starts []time.Duration
				for i := range b.N {
					caller := asyncagents.Caller{SessionID: parent, Agent: "build"}
					in := asyncagents.LaunchInput{Caller: caller, Description: "launch " + mode, Agent: "build",
						Prompt: fmt.Sprintf("%s %s %d answer ok", tag, mode, i)}
					if mode != "plain" {
						in.Fork, in.ForkMode = true, asyncagents.ForkMode(mode)
					}
					t0 := time.Now()
					task, err := m.Launch(context.Background(), in)
					launches = append(launches, time.Since(t0))
					if err != nil {
						b.Fatal(err)
					}
					asyncagentstest.Started(b, m, task)
					starts = append(starts, time.Since(t0))
					if got := asyncagentstest.Await(b, m, caller, task.ID); got.Status != asyncagents.StatusCompleted {
						b.Fatalf("task %s: %q", got.Status, got.Error)
					}
				}
				b.ReportMetric(millis(quantile(launches, 0.5)), "launch-p50-ms")
				b.ReportMetric(millis(quantile(launches, 0.99)), "launch-p99-ms")
				b.ReportMetric(millis(quantile(starts, 0.5)), "start-p50-ms")
			})
		}
	}
}
