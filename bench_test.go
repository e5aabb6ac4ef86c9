package asyncagents_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"iter"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/internal/leanserver"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// Scale benchmarks (P-3, P-4): many tasks on one Manager, launched, held busy, then finished
// in a burst or spread out, with or without a host goroutine blocked in Output on each.
//
// They run on the lean server (leanserver.Server), an in-process OpenCode written for them,
// not on opencodetest.FakeClient: the fake renders every event and message with encoding/json
// under one lock and runs a goroutine per session, so at these counts its own work is most of
// the process's CPU and it holds a goroutine per task, which hides what the Manager costs and
// how many goroutines it owns. The lean server keeps the same ids, messages and event
// sequence (the types, order, shapes and sizes the fake sends for a one-step text reply) with
// hand-built JSON and no goroutines. BenchmarkBurstOnFakeClient runs one configuration on the fake for
// comparison.
//
// The first element of a case's name is its transport, how the Manager reaches the server:
//
//	transport=inproc  the Manager calls the lean server directly, as an opencode.Client
//	transport=http    the lean server is served by opencodetest.HTTPServer on a loopback port
//	                  and the Manager gets an opencode.HTTPClient from opencode.NewHTTPClient with
//	                  no options, as a host builds it: every call is an HTTP request and the
//	                  events come as Server-Sent Events (GET /global/event), as from
//	                  `opencode serve`. Both sides are in this process, so the CPU
//	                  figures include the server's HTTP work as well as the client's.
//	transport=process the same server in a process of its own (bench_process_test.go), as
//	                  `opencode serve` is one: the CPU, heap and goroutine figures are the
//	                  Manager's side alone, and the two processes share the CPUs.
//
// Each iteration is one whole scenario on a new Manager with the default options (the
// default MemoryStore, wrapped to see when every task is done): create the parents; launch
// the tasks from scaleLaunchers goroutines; wait until the Manager has read the launch
// events; optionally park one Output(Block) goroutine per task; end the runs (in launch
// order, at once or at scaleSpreadRate per second) and wait until every task is terminal
// and every notification delivered. Reported per iteration or per task:
//
//	launches/s            tasks launched per second of wall time
//	cpu-us/launch         process CPU time (getrusage) of the launch phase per task
//	cpu-us/completion     process CPU time from the first run's end until every task is
//	                      terminal and notified, per task
//	idle-done-p50/p99-ms  from the session.idle of a run (the status idle event that
//	                      precedes it, as the server emits them) to Task.Completed
//	idle-read-p50/p99-ms  from the same idle to the Manager's event loop reading it
//	                      (on the lean server only; over http and process, reading it off
//	                      the HTTP stream): how far the event loop lags
//	by-poll-%             tasks whose messages were read before the event loop read their
//	                      idle: decided by the status poll (the server in this process:
//	                      inproc and http)
//	idle-out-p50/p99-ms   from the same idle to the return of the blocked Output
//	idle-note-p50-ms      from the same idle to the notification's Delivered time
//	goroutines            the most goroutines alive during the launch and finish phases
//	mgr-goroutines        the same, less the benchmark's own (launchers, Output waiters,
//	                      the sampler) and those alive before New: the Manager's (inproc
//	                      only: over http the connections' goroutines, the Manager's
//	                      transport's and the server's, cannot be told apart)
//	heap-B/task           heap (after GC) that closing and dropping the Manager frees, per
//	                      task, with every task completed and notified
//	store-B/task          the same for the default MemoryStore
//	req/task, X-req/task  the Manager's requests to its opencode.Client per task, in all and
//	                      per method (over http, each is one HTTP request)
//
// The 5,000- and 10,000-task cases run only when the -bench pattern names them (it contains
// "tasks=5000" or "tasks=10000"); -bench . covers 100 and 1,000.

const (
	scaleLaunchers  = 4    // goroutines calling Launch
	scaleSpreadRate = 5000 // runs ended per second when spread
	scaleDeadline   = 5 * time.Minute
)

type scaleCase struct {
	transport string // inproc, http or process: how the Manager reaches the lean server
	tasks     int
	perParent int // tasks per parent; 0: all under one parent
	burst     bool
	output    bool // one goroutine blocked in Output per task
}

func (c scaleCase) name() string {
	parents, finish, output := "one", "spread", "none"
	if c.perParent > 0 {
		parents = strconv.Itoa(c.perParent)
	}
	if c.burst {
		finish = "burst"
	}
	if c.output {
		output = "blocked"
	}
	return fmt.Sprintf("transport=%s/tasks=%d/parent=%s/finish=%s/output=%s", c.transport, c.tasks, parents, finish, output)
}

// benchPattern is the -bench pattern of this run.
func benchPattern() string {
	if f := flag.Lookup("test.bench"); f != nil {
		return f.Value.String()
	}
	return ""
}

// BenchmarkScale runs the scale scenarios described at the top of this file on the lean
// server, in process, over HTTP and in a process of its own: 100, 1,000, 5,000 and 10,000
// tasks, under one parent or 10 per parent, finished in a burst or spread, with or without a
// blocked Output per task.
//
// P-3: the Manager handles 1,000 concurrent tasks against one server with a constant number
// of goroutines for event handling and under 8 KiB of heap per task record; completion
// latency from session.idle to the task being completed is under 50 ms at the median.
// P-4: CPU per launch and per completion at 10,000 tasks under one parent is within 1.3× of
// 1,000.
func BenchmarkScale(b *testing.B) {
	for _, transport := range []string{"inproc", "http", "process"} {
		for _, n := range []int{100, 1000, 5000, 10000} {
			for _, per := range []int{0, 10} {
				for _, burst := range []bool{true, false} {
					for _, output := range []bool{false, true} {
						c := scaleCase{transport: transport, tasks: n, perParent: per, burst: burst, output: output}
						b.Run(c.name(), func(b *testing.B) {
							if n >= 5000 && !strings.Contains(benchPattern(), "tasks="+strconv.Itoa(n)) {
								b.Skip("select with -bench 'Scale/transport=inproc/tasks=" + strconv.Itoa(n) + "'")
							}
							backend := newLeanBackend
							switch transport {
							case "http":
								backend = newHTTPBackend
							case "process":
								backend = func() scaleBackend { return newProcessBackend(b) }
							}
							runScale(b, c, backend)
						})
					}
				}
			}
		}
	}
}

// BenchmarkBurstOnFakeClient runs 1,000 tasks under one parent, burst, on opencodetest's
// FakeClient, to show how much of the process's work is the fake's. The idle time is taken
// when Release is called; goroutine counts include the fake's goroutine per held run.
func BenchmarkBurstOnFakeClient(b *testing.B) {
	runScale(b, scaleCase{transport: "inproc", tasks: 1000, burst: true}, newFakeBackend)
}

// BenchmarkRealServerCompletionLatency measures completion latency on the real `opencode serve`
// (opencodetest.Start with the scripted model; skipped without the binary, like the
// real-server tests). Each iteration launches realTasks tasks under one parent at once on a
// new Manager with the default options, each run streaming its reply for realRunSeconds, so
// all of them run together. A second event subscription in the process records when the
// first idle frame (session.status idle or session.idle) of each task session's run arrives.
// P-3: completion latency from session.idle to the task being completed is under 50 ms at the
// median (it is bounded by one message read, not by a poll interval). Reported, per task:
//
//	idle-done-p50/p99-ms  from that frame to Task.Completed
//	idle-read-p50-ms      from that frame to the start of the message read that decided the
//	                      task (GET /session/{id}/message?limit=8): the Manager's own delay;
//	                      over the tasks decided by a read
//	read-p50-ms           how long that read took, the server busy ending the other runs
//	by-read-%             tasks decided by a read started after that frame; the others were
//	                      decided from what the event stream carried
//	idle-note-p50-ms      from that frame to the notification's Delivered time
//	quiet-read-p50-ms     the same read on the finished sessions one at a time, after the
//	                      round: what it costs on a quiet server
//	launch-s              wall time of launching the realTasks tasks
func BenchmarkRealServerCompletionLatency(b *testing.B) {
	srv := opencodetest.Start(b)
	c := srv.Client()
	var r realResult
	b.ResetTimer()
	for range b.N {
		realRound(b, c, &r)
	}
	b.StopTimer()
	b.ReportMetric(millis(quantile(r.done, 0.5)), "idle-done-p50-ms")
	b.ReportMetric(millis(quantile(r.done, 0.99)), "idle-done-p99-ms")
	b.ReportMetric(millis(quantile(r.lag, 0.5)), "idle-read-p50-ms")
	b.ReportMetric(millis(quantile(r.read, 0.5)), "read-p50-ms")
	b.ReportMetric(100*float64(len(r.read))/float64(len(r.done)), "by-read-%")
	b.ReportMetric(millis(quantile(r.note, 0.5)), "idle-note-p50-ms")
	b.ReportMetric(millis(quantile(r.quiet, 0.5)), "quiet-read-p50-ms")
	b.ReportMetric(r.launch.Seconds()/float64(b.N), "launch-s")
}

const (
	realTasks      = 100
	realRunSeconds = 4
	realDeadline   = 3 * time.Minute
)

type realResult struct {
	done, lag, read, note, quiet []time.Duration
	launch                       time.Duration
}

// readTimes records when each session's message reads (Client.Messages) started and ended.
type readTimes struct {
	opencode.Client
	mu    sync.Mutex
	reads map[string][][2]time.Time
}

func (c *readTimes) Messages(ctx context.Context, id string, limit int) ([]opencode.Message, error) {
	t0 := time.Now()
	msgs, err := c.Client.Messages(ctx, id, limit)
	t1 := time.Now()
	c.mu.Lock()
	c.reads[id] = append(c.reads[id], [2]time.Time{t0, t1})
	c.mu.Unlock()
	return msgs, err
}

// realRound runs realTasks tasks to their end on the real server behind c and adds what it
// measured to r.
func realRound(b *testing.B, c *opencode.HTTPClient, r *realResult) {
	ctx, cancel := context.WithTimeout(context.Background(), realDeadline)
	defer cancel()

	idles := observeIdles(b, ctx, c)
	defer idles.stop()

	rt := &readTimes{Client: c, reads: map[string][][2]time.Time{}}
	m, err := asyncagents.New(rt)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = m.Close(context.Background()) }()
	parent, err := c.CreateSession(ctx, opencode.CreateSessionRequest{Title: "parent"})
	if err != nil {
		b.Fatal(err)
	}
	caller := asyncagents.Caller{SessionID: parent.ID, Agent: "build"}

	ids := make([]string, realTasks)
	errs := make(chan error, realTasks)
	var launched sync.WaitGroup
	t0 := time.Now()
	for i := range realTasks {
		launched.Add(1)
		go func() {
			defer launched.Done()
			t, err := m.Launch(ctx, asyncagents.LaunchInput{Caller: caller, Agent: "general",
				Description: "task " + strconv.Itoa(i), Prompt: fmt.Sprintf("SLEEP:%d (task %d)", realRunSeconds, i)})
			if err != nil {
				errs <- err
				return
			}
			ids[i] = t.ID
		}()
	}
	launched.Wait()
	r.launch += time.Since(t0)
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}

	// Until every task ended and its parent was notified.
	tasks := awaitTasks(b, ctx, m, ids, func(t asyncagents.Task) bool {
		return t.Status.Terminal() && len(t.Notifications) > 0 && t.Notifications[0].State != asyncagents.NotificationPending
	}, nil)
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for _, t := range tasks {
		if t.Status != asyncagents.StatusCompleted {
			b.Fatalf("task %s is %s: %s", t.ID, t.Status, t.Error)
		}
		idle, ok := idles.first(t.SessionID)
		if !ok {
			b.Fatalf("no idle frame seen for %s", t.ID)
		}
		r.done = append(r.done, t.Completed.Sub(idle))
		var decided [2]time.Time // the last read after the idle frame before the task was completed: the one that decided
		for _, rd := range rt.reads[t.SessionID] {
			if !rd[0].Before(idle) && !rd[1].After(t.Completed) {
				decided = rd
			}
		}

		if !decided[0].IsZero() {
			r.lag = append(r.lag, decided[0].Sub(idle))
			r.read = append(r.read, decided[1].Sub(decided[0]))
		}
		if n := t.Notifications[0]; n.State == asyncagents.NotificationDelivered {
			r.note = append(r.note, n.Delivered.Sub(idle))
		}
	}
	for _, id := range ids {
		t0 := time.Now()
		if _, err := c.Messages(ctx, id, 8); err != nil {
			b.Fatal(err)
		}
		r.quiet = append(r.quiet, time.Since(t0))
	}
}

// awaitTasks polls m's tasks ids every 20 ms until each is done and then more, when not nil,
// reports true, and returns them; it fails b when ctx ends first.
func awaitTasks(b testing.TB, ctx context.Context, m *asyncagents.Manager, ids []string, done func(asyncagents.Task) bool, more func() bool) []asyncagents.Task {
	var tasks []asyncagents.Task
	for {
		tasks = tasks[:0]
		all := true
		for _, id := range ids {
			t, err := m.Get(id)
			if err != nil {
				b.Fatal(err)
			}
			tasks = append(tasks, t)
			all = all && done(t)
		}
		if all && (more == nil || more()) {
			return tasks
		}
		select {
		case <-ctx.Done():
			b.Fatal("the tasks did not end in time")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// idleObserver records, from an event stream of its own, when the first idle frame
// (session.status idle or session.idle) of each session after it went busy arrived.
type idleObserver struct {
	mu       sync.Mutex
	busyRun  map[string]bool
	idleSeen map[string]time.Time
	stop     func()
}

// observeIdles subscribes to c's events; the subscription is open when it returns. Call stop.
func observeIdles(b testing.TB, ctx context.Context, c opencode.Client) *idleObserver {
	ctx, cancel := context.WithCancel(ctx)
	stream, err := c.Events(ctx)
	if err != nil {
		cancel()
		b.Fatal(err)
	}
	o := &idleObserver{busyRun: map[string]bool{}, idleSeen: map[string]time.Time{}}
	observed := make(chan struct{})
	go func() {
		defer close(observed)
		for ev, err := range stream.All() {
			if err != nil {
				return
			}
			at := time.Now()
			idle := ev.Type == opencode.EventSessionIdle
			if ev.Type == opencode.EventSessionStatus {
				p, err := ev.Decode()
				if err != nil || p.Status == nil {
					continue
				}
				idle = p.Status.Type == "idle"
			} else if !idle {
				continue
			}
			sid := ev.SessionID()
			o.mu.Lock()
			if !idle {
				o.busyRun[sid] = true
			} else if _, seen := o.idleSeen[sid]; o.busyRun[sid] && !seen {
				o.idleSeen[sid] = at
			}
			o.mu.Unlock()
		}
	}()
	o.stop = func() {
		cancel()
		_ = stream.Close()
		<-observed
	}
	return o
}

// first returns when the first idle frame of session id after it went busy arrived.
func (o *idleObserver) first(id string) (time.Time, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	at, ok := o.idleSeen[id]
	return at, ok
}

// scaleBackend is the OpenCode a scale benchmark runs on.
type scaleBackend interface {
	opencode.Client
	// end lets the run of a session end with a text reply and returns the time its idle was
	// emitted, or the time end was called when that is not known.
	end(id string) time.Time
	// settled reports that every event sent so far was read.
	settled() bool
	// goroutinesPerRun is how many goroutines the backend keeps per held run.
	goroutinesPerRun() int
	Close() error
}

func runScale(b *testing.B, c scaleCase, newBackend func() scaleBackend) {
	var (
		launchWall, launchCPU, finishCPU time.Duration
		cpuOK                            = true
		done, out, note                  []time.Duration
		read                             []time.Duration
		reconciles, early                int
		maxG, maxMgrG                    int
		fakeG                            bool // the backend's goroutines blur the count
		heap, storeHeap                  float64
		reqs                             map[string]int64
	)
	b.ReportAllocs()
	b.ResetTimer()
	b.StopTimer()
	for range b.N {
		r := scaleRun(b, c, newBackend)
		launchWall += r.launchWall
		launchCPU += r.launchCPU
		finishCPU += r.finishCPU
		cpuOK = cpuOK && r.cpuOK
		done = append(done, r.done...)
		out = append(out, r.out...)
		note = append(note, r.note...)
		read = append(read, r.read...)
		reconciles, early = reconciles+r.reconciles, early+r.early
		maxG, maxMgrG = max(maxG, r.maxG), max(maxMgrG, r.maxMgrG)
		fakeG = fakeG || r.fakeG
		heap, storeHeap = r.heap, r.storeHeap
		if reqs == nil {
			reqs = map[string]int64{}
		}
		for k, v := range r.reqs {
			reqs[k] += v
		}
	}
	total := float64(c.tasks * b.N)
	b.ReportMetric(total/launchWall.Seconds(), "launches/s")
	if cpuOK {
		b.ReportMetric(float64(launchCPU.Microseconds())/total, "cpu-us/launch")
		b.ReportMetric(float64(finishCPU.Microseconds())/total, "cpu-us/completion")
	}
	b.ReportMetric(millis(quantile(done, 0.5)), "idle-done-p50-ms")
	b.ReportMetric(millis(quantile(done, 0.99)), "idle-done-p99-ms")
	if len(read) > 0 {
		b.ReportMetric(millis(quantile(read, 0.5)), "idle-read-p50-ms")
		b.ReportMetric(millis(quantile(read, 0.99)), "idle-read-p99-ms")
		b.ReportMetric(100*float64(early)/float64(reconciles), "by-poll-%")
	}
	if c.output {
		b.ReportMetric(millis(quantile(out, 0.5)), "idle-out-p50-ms")
		b.ReportMetric(millis(quantile(out, 0.99)), "idle-out-p99-ms")
	}
	b.ReportMetric(millis(quantile(note, 0.5)), "idle-note-p50-ms")
	b.ReportMetric(float64(maxG), "goroutines")
	if !fakeG {
		b.ReportMetric(float64(maxMgrG), "mgr-goroutines")
	}
	b.ReportMetric(heap, "heap-B/task")
	b.ReportMetric(storeHeap, "store-B/task")
	var all int64
	for k, v := range reqs {
		all += v
		b.ReportMetric(float64(v)/total, k+"-req/task")
	}
	b.ReportMetric(float64(all)/total, "req/task")
}

type scaleResult struct {
	launchWall, launchCPU, finishCPU time.Duration
	cpuOK                            bool
	done, out, note                  []time.Duration
	read                             []time.Duration // idle sent → read by the event loop, where the backend tells
	reconciles, early                int             // tasks with read times; those decided before
	maxG, maxMgrG                    int
	fakeG                            bool
	heap, storeHeap                  float64
	reqs                             map[string]int64
}

// scaleRun runs one scenario; only its launch and finish phases are timed.
func scaleRun(b *testing.B, c scaleCase, newBackend func() scaleBackend) (r scaleResult) {
	ctx := context.Background()
	n := c.tasks
	runtime.GC()
	base := runtime.NumGoroutine()

	srv := newBackend()
	defer srv.Close()
	cc := &countingClient{Client: srv}
	store := newBenchStore(n)
	m, err := asyncagents.New(cc, asyncagents.WithStore(store))
	if err != nil {
		b.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			_ = m.Close(ctx)
		}
	}()
	nParents := 1
	if c.perParent > 0 {
		nParents = (n + c.perParent - 1) / c.perParent
	}
	callers := make([]asyncagents.Caller, nParents)
	for i := range callers {
		s, err := srv.CreateSession(ctx, opencode.CreateSessionRequest{Title: "parent"})
		if err != nil {
			b.Fatal(err)
		}
		callers[i] = asyncagents.Caller{SessionID: s.ID, Agent: "build"}
	}
	callerOf := func(i int) asyncagents.Caller {
		if c.perParent == 0 {
			return callers[0]
		}
		return callers[i/c.perParent]
	}

	// Launch.
	ids := make([]string, n)
	var (
		next     atomic.Int64
		launched sync.WaitGroup
		errs     = make(chan error, scaleLaunchers)
		release  = make(chan struct{})
	)
	launched.Add(scaleLaunchers)
	smp := sampleGoroutines(base + 1 + scaleLaunchers)
	cpu0, ok0 := processCPU()
	b.StartTimer()
	t0 := time.Now()
	for range scaleLaunchers {
		go func() {
			defer func() { <-release }() // stay until the phase is measured
			defer launched.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				t, err := m.Launch(ctx, asyncagents.LaunchInput{Caller: callerOf(i), Description: "scan part " + strconv.Itoa(i),
					Prompt: "Scan the next part of the logs and report what you find.", Agent: "general"})
				if err != nil {
					errs <- err
					return
				}
				ids[i] = track(t)
			}
		}()
	}
	launched.Wait()
	r.launchWall = time.Since(t0)
	b.StopTimer()
	cpu1, ok1 := processCPU()
	g, mg := smp.stop()
	close(release)
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	r.launchCPU, r.maxG, r.maxMgrG = cpu1-cpu0, g, mg
	r.fakeG = srv.goroutinesPerRun() > 0 || c.transport != "inproc"

	// Let the Manager read the launch events, and the fake's runs reach their hold.
	for deadline := time.Now().Add(scaleDeadline); !srv.settled(); {
		if time.Now().After(deadline) {
			b.Fatal("launch events not read in time")
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)

	// Park one Output per task.
	outAt := make([]time.Time, n)
	hold := make(chan struct{})
	var parked, returned, exited sync.WaitGroup
	defer func() { // on a failure, let the waiters go before the benchmark ends
		select {
		case <-hold:
		default:
			if !closed {
				_ = m.Close(ctx)
				closed = true
			}
			close(hold)
			exited.Wait()
		}
	}()
	waiters := 0
	if c.output {
		waiters = n
		parked.Add(n)
		returned.Add(n)
		exited.Add(n)
		for i := range n {
			go func() {
				defer exited.Done()
				parked.Done()
				o, err := m.Output(ctx, callerOf(i), ids[i], asyncagents.OutputOptions{Block: true, Timeout: asyncagents.MaxOutputTimeout})
				outAt[i] = time.Now()
				if err != nil || o.Task.Status != asyncagents.StatusCompleted {
					b.Errorf("Output(%s) = %v, %v", ids[i], o.Task.Status, err)
				}
				returned.Done()
				<-hold
			}()
		}
		parked.Wait()
		time.Sleep(20*time.Millisecond + time.Duration(n)*5*time.Microsecond) // until they wait
	}

	// Finish.
	idleAt := make([]time.Time, n)
	smp = sampleGoroutines(base + 2 + waiters + srv.goroutinesPerRun()*n) // the sampler and the finisher
	cpu2, ok2 := processCPU()
	b.StartTimer()
	t2 := time.Now()
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		every := time.Second / scaleSpreadRate
		if all, ok := srv.(interface {
			endAll(ids []string, every time.Duration) []time.Time
		}); ok {
			if c.burst {
				every = 0
			}
			copy(idleAt, all.endAll(sessionsOf(ids), every))
			return
		}
		for i, id := range ids {
			if !c.burst {
				if d := time.Until(t2.Add(time.Duration(i) * every)); d > 0 {
					time.Sleep(d)
				}
			}
			idleAt[i] = srv.end(sessionOf(id))
		}
	}()
	select {
	case <-store.done:
	case <-time.After(scaleDeadline):
		b.Fatalf("not done in %v: %d terminal, %d notified of %d", scaleDeadline, store.terminal.Load(), store.notified.Load(), n)
	}
	b.StopTimer()
	cpu3, ok3 := processCPU()
	<-ended
	g, mg = smp.stop()
	r.finishCPU, r.cpuOK = cpu3-cpu2, ok0 && ok1 && ok2 && ok3
	r.maxG, r.maxMgrG = max(r.maxG, g), max(r.maxMgrG, mg)
	if c.output {
		returned.Wait()
	}
	close(hold)
	exited.Wait()

	// The events still queued (when the poll decided tasks first) are not the Manager's memory.
	for deadline := time.Now().Add(scaleDeadline); !srv.settled(); {
		if time.Now().After(deadline) {
			b.Fatal("events not read in time")
		}
		time.Sleep(time.Millisecond)
	}

	// Latencies, from the Manager's own records.
	for i, id := range ids {
		t, err := m.Get(id)
		if err != nil {
			b.Fatal(err)
		}
		if t.Status != asyncagents.StatusCompleted {
			b.Fatalf("task %s is %s: %s", id, t.Status, t.Error)
		}
		r.done = append(r.done, t.Completed.Sub(idleAt[i]))
		if ph, ok := srv.(interface {
			phases(id string) (read, msgs time.Time)
		}); ok {
			read, msgs := ph.phases(id)
			r.read = append(r.read, read.Sub(idleAt[i]))
			r.reconciles++
			if !msgs.IsZero() && msgs.Before(read) {
				r.early++ // decided before the event loop read its idle: by the status poll
			}
		}
		for _, nt := range t.Notifications {
			if nt.State == asyncagents.NotificationDelivered {
				r.note = append(r.note, nt.Delivered.Sub(idleAt[i]))
			}
		}
		if c.output {
			if outAt[i].Before(idleAt[i]) {
				b.Fatalf("Output(%s) returned before its run ended: the waiters were not parked", id)
			}
			r.out = append(r.out, outAt[i].Sub(idleAt[i]))
		}
	}
	r.reqs = cc.snapshot()

	// Heap: what the Manager and then the store hold, freed by dropping them.
	store.forget()
	h1 := heapAfterGC()
	if err := m.Close(ctx); err != nil {
		b.Fatal(err)
	}
	closed = true
	m = nil // drop the Manager before measuring
	h2 := heapAfterGC()
	runtime.KeepAlive(store)
	store = nil
	h3 := heapAfterGC()
	r.heap = float64(int64(h1)-int64(h2)) / float64(n)
	r.storeHeap = float64(int64(h2)-int64(h3)) / float64(n)
	runtime.KeepAlive(srv)
	return r
}

func heapAfterGC() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// quantile returns the q-quantile (nearest rank) of ds, sorting it.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(float64(len(ds))*q+0.999999) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

// sampler records the most goroutines alive until stop, every 500µs.
type sampler struct {
	stopc chan struct{}
	res   chan [2]int
}

// sampleGoroutines starts a sampler; known is how many goroutines are not the Manager's.
func sampleGoroutines(known int) *sampler {
	s := &sampler{stopc: make(chan struct{}), res: make(chan [2]int)}
	go func() {
		top := runtime.NumGoroutine()
		t := time.NewTicker(500 * time.Microsecond)
		defer t.Stop()
		for {
			select {
			case <-s.stopc:
				top = max(top, runtime.NumGoroutine())
				s.res <- [2]int{top, top - known}
				return
			case <-t.C:
				top = max(top, runtime.NumGoroutine())
			}
		}
	}()
	return s
}

// stop returns the most goroutines seen, and that less the known ones.
func (s *sampler) stop() (all, manager int) {
	close(s.stopc)
	r := <-s.res
	return r[0], r[1]
}

// benchStore is the default MemoryStore, counting the tasks that reached a terminal state and
// those whose notification was delivered; done is closed when every one of n has both.
type benchStore struct {
	asyncagents.MemoryStore
	n                  int64
	terminal, notified atomic.Int64
	done               chan struct{}

	mu   sync.Mutex
	seen map[string]uint8 // 1: terminal, 2: notified
}

func newBenchStore(n int) *benchStore {
	return &benchStore{n: int64(n), done: make(chan struct{}), seen: make(map[string]uint8, n)}
}

func (s *benchStore) Save(ctx context.Context, t asyncagents.Task) error {
	if err := s.MemoryStore.Save(ctx, t); err != nil {
		return err
	}
	var bits uint8
	if t.Status.Terminal() {
		bits |= 1
	}
	for _, nt := range t.Notifications {
		if nt.State == asyncagents.NotificationDelivered {
			bits |= 2
		}
	}
	if bits == 0 {
		return nil
	}
	s.mu.Lock()
	if s.seen == nil {
		s.mu.Unlock()
		return nil
	}
	had := s.seen[t.ID]
	s.seen[t.ID] = had | bits
	s.mu.Unlock()
	var a, b int64
	if bits&1 != 0 && had&1 == 0 {
		a = s.terminal.Add(1)
	} else {
		a = s.terminal.Load()
	}
	if bits&2 != 0 && had&2 == 0 {
		b = s.notified.Add(1)
	} else {
		b = s.notified.Load()
	}
	if (bits&^had) != 0 && a == s.n && b == s.n {
		close(s.done)
	}
	return nil
}

// forget drops the counting map, so that what the store holds is the MemoryStore's.
func (s *benchStore) forget() {
	s.mu.Lock()
	s.seen = nil
	s.mu.Unlock()
}

// countingClient counts the calls of each method of the opencode.Client it wraps.
type countingClient struct {
	opencode.Client
	mu     sync.Mutex
	calls  map[string]int64
	agents []string // the directories Agents was asked for
}

// agentDirs returns the directories Agents was asked for, in order.
func (c *countingClient) agentDirs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.agents)
}

func (c *countingClient) count(method string) {
	c.mu.Lock()
	if c.calls == nil {
		c.calls = map[string]int64{}
	}
	c.calls[method]++
	c.mu.Unlock()
}

func (c *countingClient) snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int64, len(c.calls))
	for k, v := range c.calls {
		out[k] = v
	}
	return out
}

func (c *countingClient) CreateSession(ctx context.Context, req opencode.CreateSessionRequest) (*opencode.Session, error) {
	c.count("CreateSession")
	return c.Client.CreateSession(ctx, req)
}

func (c *countingClient) GetSession(ctx context.Context, id string) (*opencode.Session, error) {
	c.count("GetSession")
	return c.Client.GetSession(ctx, id)
}

func (c *countingClient) Messages(ctx context.Context, id string, limit int) ([]opencode.Message, error) {
	c.count("Messages")
	return c.Client.Messages(ctx, id, limit)
}

func (c *countingClient) MessagesBefore(ctx context.Context, id string, limit int, before string) ([]opencode.Message, string, error) {
	c.count("MessagesBefore")
	return c.Client.MessagesBefore(ctx, id, limit, before)
}

func (c *countingClient) Message(ctx context.Context, id, msgID string) (*opencode.Message, error) {
	c.count("Message")
	return c.Client.Message(ctx, id, msgID)
}

func (c *countingClient) Prompt(ctx context.Context, id string, req opencode.PromptRequest) (*opencode.Message, error) {
	c.count("Prompt")
	return c.Client.Prompt(ctx, id, req)
}

// PostMessage counts as Prompt (the same request) and goes to the backend's PostMessage
// when it has one (an HTTPClient's), as the Manager's would.
func (c *countingClient) PostMessage(ctx context.Context, id string, req opencode.PromptRequest) (string, error) {
	c.count("Prompt")
	if p, ok := c.Client.(interface {
		PostMessage(context.Context, string, opencode.PromptRequest) (string, error)
	}); ok {
		return p.PostMessage(ctx, id, req)
	}
	m, err := c.Client.Prompt(ctx, id, req)
	if err != nil {
		return "", err
	}
	return m.Info.ID, nil
}

func (c *countingClient) PromptAsync(ctx context.Context, id string, req opencode.PromptRequest) error {
	c.count("PromptAsync")
	return c.Client.PromptAsync(ctx, id, req)
}

func (c *countingClient) Abort(ctx context.Context, id string) error {
	c.count("Abort")
	return c.Client.Abort(ctx, id)
}

func (c *countingClient) SessionStatus(ctx context.Context, dir string) (map[string]opencode.SessionStatus, error) {
	c.count("SessionStatus")
	return c.Client.SessionStatus(ctx, dir)
}

func (c *countingClient) Agents(ctx context.Context, dir string) ([]opencode.Agent, error) {
	c.count("Agents")
	c.mu.Lock()
	c.agents = append(c.agents, dir)
	c.mu.Unlock()
	return c.Client.Agents(ctx, dir)
}

func (c *countingClient) Events(ctx context.Context) (opencode.EventStream, error) {
	c.count("Events")
	return c.Client.Events(ctx)
}

// fakeBackend is opencodetest's FakeClient with held runs.
type fakeBackend struct {
	*opencodetest.FakeClient
}

func newFakeBackend() scaleBackend {
	return fakeBackend{opencodetest.NewFakeClient(opencodetest.WithHeldRuns())}
}

func (f fakeBackend) end(id string) time.Time {
	t := time.Now()
	if err := f.Release(id, opencodetest.Text("done")); err != nil {
		panic(err)
	}
	return t
}

func (fakeBackend) settled() bool         { return true }
func (fakeBackend) goroutinesPerRun() int { return 1 }

// leanBackend is a leanserver.Server, whose streams the Manager reads itself.
type leanBackend struct{ *leanserver.Server }

func newLeanBackend() scaleBackend { return leanBackend{leanserver.New()} }

func (l leanBackend) end(id string) time.Time                 { return l.End(id) }
func (l leanBackend) settled() bool                           { return l.Settled() }
func (l leanBackend) phases(id string) (read, msgs time.Time) { return l.Phases(id) }
func (leanBackend) goroutinesPerRun() int                     { return 0 }

// httpBackend is a leanserver.Server served over HTTP by opencodetest.HTTPServer. Its
// embedded HTTPClient, made by opencode.NewHTTPClient with no options, is the Manager's
// client; the benchmark ends runs on the server directly. Its event streams mark when the
// Manager reads each run's idle (the server's own streams are the HTTPServer's then) and
// count the events the Manager read, so that settled means the Manager has read every event
// sent.
type httpBackend struct {
	*opencode.HTTPClient
	lean  *leanserver.Server
	front *opencodetest.HTTPServer
	read  atomic.Int64 // events read from the Manager's streams, server.* ones left out
}

func newHTTPBackend() scaleBackend {
	lean := leanserver.New(leanserver.Served())
	front := opencodetest.NewHTTPServer(lean)
	return &httpBackend{HTTPClient: front.Client(), lean: lean, front: front}
}

func (h *httpBackend) end(id string) time.Time { return h.lean.End(id) }
func (*httpBackend) goroutinesPerRun() int     { return 0 }

func (h *httpBackend) settled() bool {
	return h.lean.Settled() && h.read.Load() == h.lean.Sent()
}

func (h *httpBackend) phases(id string) (read, msgs time.Time) { return h.lean.Phases(id) }

func (h *httpBackend) Close() error {
	h.front.Close()
	return h.lean.Close()
}

func (h *httpBackend) Events(ctx context.Context) (opencode.EventStream, error) {
	st, err := h.HTTPClient.Events(ctx)
	if err != nil {
		return nil, err
	}
	return &markingStream{EventStream: st, mark: h.lean.MarkRead, read: &h.read}, nil
}

// markingStream is the Manager's event stream over HTTP, marking what it reads: each run's
// idle (mark, with the session's id) and the count of events, server.* ones left out.
type markingStream struct {
	opencode.EventStream
	mark func(sid string)
	read *atomic.Int64
}

var idleStatus = []byte(`"status":{"type":"idle"}`)

func (m *markingStream) All() iter.Seq2[opencode.Event, error] {
	return func(yield func(opencode.Event, error) bool) {
		for ev, err := range m.EventStream.All() {
			if err == nil && !strings.HasPrefix(ev.Type, "server.") {
				if ev.Type == opencode.EventSessionStatus && bytes.Contains(ev.Properties, idleStatus) {
					m.mark(ev.SessionID())
				}
				m.read.Add(1)
			}
			if !yield(ev, err) {
				return
			}
		}
	}
}
