package asyncagents_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents/opencode"
)

// BenchmarkBurstReadFloor is the floor under BenchmarkScale's burst over HTTP: the same
// lean server behind opencodetest.HTTPServer, the same runs ended at once, read by a loop that
// only takes each event off opencode.HTTPClient's stream (the SSE parse and the envelope's
// decode) and marks each run's idle: no Manager. Its idle-read figures are what any client
// of GET /global/event built on opencode.HTTPClient lags behind this burst on this machine,
// before it does anything with an event, so the Manager's idle→completed cannot be lower.
//
//	idle-read-p50/p99-ms  from a run's idle (as the server emits it) to the loop reading it
//	cpu-us/run            process CPU time (server and reader) per run, from the first
//	                      run's end until every event was read
//	frames/run            events per run end
func BenchmarkBurstReadFloor(b *testing.B) {
	for _, n := range []int{1000, 5000} {
		b.Run(fmt.Sprintf("tasks=%d", n), func(b *testing.B) {
			var read []time.Duration
			var cpu time.Duration
			var frames int64
			for range b.N {
				r, c, f := burstReadFloor(b, n)
				read, cpu, frames = append(read, r...), cpu+c, frames+f
			}
			runs := float64(b.N * n)
			b.ReportMetric(millis(quantile(read, 0.5)), "idle-read-p50-ms")
			b.ReportMetric(millis(quantile(read, 0.99)), "idle-read-p99-ms")
			b.ReportMetric(float64(cpu.Microseconds())/runs, "cpu-us/run")
			b.ReportMetric(float64(frames)/runs, "frames/run")
		})
	}
}

func burstReadFloor(b *testing.B, n int) (read []time.Duration, cpu time.Duration, frames int64) {
	ctx := context.Background()
	h := newHTTPBackend().(*httpBackend)
	defer h.Close()
	parent, err := h.lean.CreateSession(ctx, opencode.CreateSessionRequest{Title: "parent"})
	if err != nil {
		b.Fatal(err)
	}
	ids := make([]string, n)
	for i := range ids {
		s, err := h.lean.CreateSession(ctx, opencode.CreateSessionRequest{ParentID: parent.ID, Title: "task"})
		if err != nil {
			b.Fatal(err)
		}
		ids[i] = s.ID
		if err := h.lean.PromptAsync(ctx, s.ID, opencode.PromptRequest{Agent: "general", Parts: []opencode.TextPartInput{{Type: "text", Text: "go"}}}); err != nil {
			b.Fatal(err)
		}
	}
	st, err := h.Events(ctx)
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for _, err := range st.All() {
			if err != nil {
				return
			}
		}
	})
	defer func() {
		st.Close()
		wg.Wait()
	}()
	waitSettled := func(what string) {
		for deadline := time.Now().Add(scaleDeadline); !h.settled(); {
			if time.Now().After(deadline) {
				b.Fatalf("%s not read in time", what)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	waitSettled("the launch events")
	before := h.read.Load()

	idleAt := make([]time.Time, n)
	cpu0, ok0 := processCPU()
	b.StartTimer()
	for i, id := range ids {
		idleAt[i] = h.end(id)
	}
	waitSettled("the run ends")
	b.StopTimer()
	cpu1, ok1 := processCPU()
	if !ok0 || !ok1 {
		cpu0, cpu1 = 0, 0
	}
	for i, id := range ids {
		r, _ := h.phases(id)
		if r.IsZero() {
			b.Fatalf("the idle of %s was not read", id)
		}
		read = append(read, r.Sub(idleAt[i]))
	}
	return read, cpu1 - cpu0, h.read.Load() - before
}
