package asyncagents_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/asyncagentstest"
	"github.com/asyncagents/asyncagents/internal/fakeclock"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// Tests of the paths that carry many tasks at once (P-3): blocked Outputs served by the end
// of the run, a parent's notifications delivered back to back, and a burst of reads.

// T-10, P-3: many Outputs blocked on one task all return the completed task when its run
// ends, marked retrieved once, at the same time for all of them, and stored so; a blocked
// Output whose context ends first returns that error and changes nothing.
func TestBlockedOutputsShareTheEnd(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	clock := fakeclock.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	store := &asyncagents.MemoryStore{}
	m := asyncagentstest.NewManager(t, f, fastPoll, asyncagents.WithClock(clock), asyncagents.WithStore(store))
	caller := asyncagentstest.NewParent(t, f)
	task := asyncagentstest.Launch(t, m, caller, "held")

	const n, wait = 50, 9 * time.Minute
	outs := make(chan asyncagents.Output, n)
	for range n {
		go func() {
			out, err := m.Output(context.Background(), caller, task.ID, asyncagents.OutputOptions{Block: true, Timeout: wait})
			if err != nil {
				t.Error(err)
			}
			outs <- out
		}()
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancelled := make(chan error, 1)
	go func() {
		_, err := m.Output(ctx, caller, task.ID, asyncagents.OutputOptions{Block: true, Timeout: wait})
		cancelled <- err
	}()
	waitFor(t, 10*time.Second, func() bool { // all of them wait
		k := 0
		for _, d := range clock.Waiting() {
			if d == wait {
				k++
			}
		}
		return k == n+1
	})
	cancel()
	if err := <-cancelled; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Output = %v, want context.Canceled", err)
	}
	if got, _ := m.Get(task.ID); got.Status != asyncagents.StatusRunning || !got.Retrieved.IsZero() {
		t.Fatalf("after a cancelled Output: %s, retrieved %v", got.Status, got.Retrieved)
	}

	clock.Advance(3 * time.Second)
	asyncagentstest.Release(t, f, task.SessionID, opencodetest.Text("done"))
	var retrieved time.Time
	for range n {
		out := <-outs
		switch {
		case out.Task.Status != asyncagents.StatusCompleted || out.Task.Result != "done" || out.TimedOut:
			t.Fatalf("Output = %s %q timed out %v", out.Task.Status, out.Task.Result, out.TimedOut)
		case out.Task.Retrieved.IsZero() || !retrieved.IsZero() && !out.Task.Retrieved.Equal(retrieved):
			t.Fatalf("retrieved %v, another Output saw %v", out.Task.Retrieved, retrieved)
		}
		retrieved = out.Task.Retrieved
		out.Task.Notifications[0].Visible = "changed by a caller" // each has its own copy
	}
	got, err := m.Get(task.ID)
	if err != nil || !got.Retrieved.Equal(retrieved) || strings.HasPrefix(got.Notifications[0].Visible, "changed") {
		t.Fatalf("Get = retrieved %v, notification %q, %v; want retrieved %v", got.Retrieved, got.Notifications[0].Visible, err, retrieved)
	}
	waitFor(t, 10*time.Second, func() bool {
		stored, err := store.Load(context.Background())
		return err == nil && len(stored) == 1 && stored[0].Retrieved.Equal(retrieved)
	})

	// An Output after the end marks nothing again and returns at once.
	out, err := m.Output(context.Background(), caller, task.ID, asyncagents.OutputOptions{Block: true, Timeout: wait})
	if err != nil || !out.Task.Retrieved.Equal(retrieved) {
		t.Fatalf("Output after the end = retrieved %v, %v", out.Task.Retrieved, err)
	}
}

// T-10, T-18: Outputs blocked on each run of a resumed task get that run's end, the
// resumed run's Outputs are not served the first run's end.
func TestBlockedOutputsGetTheirRunsEnd(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	m := asyncagentstest.NewManager(t, f, fastPoll)
	caller := asyncagentstest.NewParent(t, f)
	task := asyncagentstest.Launch(t, m, caller, "held")
	for run, reply := range []string{"first", "second", "third"} {
		outs := make(chan asyncagents.Output, 4)
		for range cap(outs) {
			go func() {
				out, err := m.Output(context.Background(), caller, task.ID, asyncagents.OutputOptions{Block: true, Timeout: time.Minute})
				if err != nil {
					t.Error(err)
				}
				outs <- out
			}()
		}
		asyncagentstest.Release(t, f, task.SessionID, opencodetest.Text(reply))
		for range cap(outs) {
			if out := <-outs; out.Task.Result != reply || out.Task.ResumeCount != run {
				t.Fatalf("run %d: Output = %q (resume %d), want %q", run, out.Task.Result, out.Task.ResumeCount, reply)
			}
		}
		if run < 2 {
			if _, err := m.Resume(context.Background(), caller, task.ID, "again"); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// N, P-3: a parent's notifications of a burst of run ends arrive one each, one at a time, in
// the order the runs ended, while another parent's arrive too, when each is a prompt
// (NotifyPerRun). Without reply, up to 8 go at once and only their groups are in order.
func TestNotificationBurstInOrder(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	m := asyncagentstest.NewManager(t, f, fastPoll, asyncagents.WithNotifyPolicy(asyncagents.NotifyPerRun))
	busy, other := asyncagentstest.NewParent(t, f), asyncagentstest.NewParent(t, f)
	var tasks []asyncagents.Task
	for i := range 120 {
		caller := busy
		if i%10 == 9 {
			caller = other
		}
		task, err := m.Launch(context.Background(), asyncagents.LaunchInput{Caller: caller, Description: fmt.Sprintf("task %03d", i), Agent: "general", Prompt: "held"})
		if err != nil {
			t.Fatal(err)
		}
		tasks = append(tasks, asyncagentstest.Started(t, m, task))
	}
	for _, task := range tasks {
		asyncagentstest.Release(t, f, task.SessionID, opencodetest.Text("done"))
	}
	for _, parent := range []asyncagents.Caller{busy, other} {
		var mine []asyncagents.Task
		waitFor(t, 30*time.Second, func() bool {
			mine = mine[:0]
			list, err := m.List(parent, "")
			if err != nil {
				t.Fatal(err)
			}
			for _, task := range list {
				if len(task.Notifications) != 1 || task.Notifications[0].State != asyncagents.NotificationDelivered {
					return false
				}
				mine = append(mine, task)
			}
			return true
		})
		// Delivered one at a time: in the order they were queued, that is the runs ended.
		slices.SortFunc(mine, func(a, b asyncagents.Task) int {
			x, y := a.Notifications[0], b.Notifications[0]
			return cmp.Or(x.Delivered.Compare(y.Delivered), x.Created.Compare(y.Created))
		})
		var want []string
		for i, task := range mine {
			n := task.Notifications[0]
			if prev := mine[max(i-1, 0)].Notifications[0]; n.Created.Before(prev.Created) {
				t.Fatalf("%s: queued at %v, delivered at %v; the one before it: %v, %v", task.Description, n.Created, n.Delivered, prev.Created, prev.Delivered)
			}
			want = append(want, n.Visible)
		}
		if got := asyncagentstest.Notifications(t, f, parent.SessionID); !slices.Equal(got, want) {
			t.Fatalf("parent %s got %d notifications, want %d in the order the runs ended:\n%s\nwant\n%s",
				parent.SessionID, len(got), len(want), strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

// gatedReads holds the message reads of task sessions until the gate opens, counting how
// many are in flight.
type gatedReads struct {
	*opencodetest.FakeClient
	parent   string
	gate     chan struct{}
	cur, top atomic.Int64
}

func (g *gatedReads) Messages(ctx context.Context, id string, limit int) ([]opencode.Message, error) {
	if id != g.parent {
		n := g.cur.Add(1)
		for top := g.top.Load(); n > top && !g.top.CompareAndSwap(top, n); top = g.top.Load() {
		}
		defer g.cur.Add(-1)
		select {
		case <-g.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return g.FakeClient.Messages(ctx, id, limit)
}

// Events keeps the message.updated events from the Manager, so that no run can be decided
// from the events: every run end is read.
func (g *gatedReads) Events(ctx context.Context) (opencode.EventStream, error) {
	s, err := g.FakeClient.Events(ctx)
	if err != nil {
		return nil, err
	}
	return droppingStream{EventStream: s, drop: func(ev opencode.Event) bool { return ev.Type == opencode.EventMessageUpdated }}, nil
}

// P-3, T-6: a burst of run ends is read with more reads in flight than WithReconcilers, up
// to 16 times as many; once the burst is read, the extra goroutines end.
func TestReconcileBurstIsBounded(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	g := &gatedReads{FakeClient: f, gate: make(chan struct{})}
	m := asyncagentstest.NewManager(t, g, fastPoll, asyncagents.WithReconcilers(2))
	caller := asyncagentstest.NewParent(t, f)
	g.parent = caller.SessionID
	const n, limit = 60, 32
	var before int // this Manager's 2, once they run, and those of tests running in parallel
	waitFor(t, 10*time.Second, func() bool { before = reconcilers(); return before >= 2 })
	var tasks []asyncagents.Task
	for range n {
		tasks = append(tasks, asyncagentstest.Launch(t, m, caller, "held"))
	}
	var once sync.Once
	open := func() { once.Do(func() { close(g.gate) }) }
	defer open()
	for _, task := range tasks {
		asyncagentstest.Release(t, f, task.SessionID, opencodetest.Text("done"))
	}
	waitFor(t, 10*time.Second, func() bool { return g.cur.Load() == limit })
	time.Sleep(50 * time.Millisecond)
	if top := g.top.Load(); top != limit {
		t.Fatalf("%d reads in flight at most, want %d", top, limit)
	}
	open()
	for _, task := range tasks {
		if got := asyncagentstest.Await(t, m, caller, task.ID); got.Status != asyncagents.StatusCompleted {
			t.Fatalf("%s is %s", got.ID, got.Status)
		}
	}
	waitFor(t, 10*time.Second, func() bool { return reconcilers() <= before })
}

// reconcilers returns how many goroutines run a Manager's reconcile loop.
func reconcilers() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "asyncagents.(*Manager).reconcileLoop(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// laggingStatus is a client whose GET /session/status lists a session as busy only from lag
// after its prompt was sent, as OpenCode 1.18.33 lists it some tens of milliseconds after the
// run's first assistant message exists; and which has no event stream, so that the status
// poll decides.
type laggingStatus struct {
	*opencodetest.FakeClient
	lag  time.Duration
	mu   sync.Mutex
	sent map[string]time.Time
}

func (c *laggingStatus) PromptAsync(ctx context.Context, id string, req opencode.PromptRequest) error {
	c.mu.Lock()
	c.sent[id] = time.Now()
	c.mu.Unlock()
	return c.FakeClient.PromptAsync(ctx, id, req)
}

func (c *laggingStatus) SessionStatus(ctx context.Context, dir string) (map[string]opencode.SessionStatus, error) {
	st, err := c.FakeClient.SessionStatus(ctx, dir)
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := range st {
		if time.Since(c.sent[id]) < c.lag {
			delete(st, id)
		}
	}
	return st, err
}

func (*laggingStatus) Events(context.Context) (opencode.EventStream, error) {
	return nil, errors.New("laggingStatus: no event stream")
}

// T-23: a run whose session the server does not list as busy yet while its first step is
// streaming is not taken for interrupted: an idle session with an unfinished step must be
// seen so twice, a second apart, before the run ends in error.
func TestYoungRunNotInterrupted(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t)
	c := &laggingStatus{FakeClient: f, lag: 600 * time.Millisecond, sent: map[string]time.Time{}}
	m := asyncagentstest.NewManager(t, c, asyncagents.WithPollInterval(20*time.Millisecond))
	caller := asyncagentstest.NewParent(t, f)
	task := asyncagentstest.Launch(t, m, caller, "SLEEP:2 done")
	if got := asyncagentstest.Await(t, m, caller, task.ID); got.Status != asyncagents.StatusCompleted {
		t.Fatalf("a run whose status lags its first step: %s %q", got.Status, got.Error)
	}
}

// Issue 33, "durations in notifications include the time serve or OpenCode was down": a run
// that ended while no Manager followed it ends, for the Manager that reads it later, when its
// reply was completed (the server's time.completed), not when it was read; its duration and
// its notification are the run's own.
func TestRunEndedWhileNoHostFollowedKeepsItsOwnDuration(t *testing.T) {
	clock := fakeclock.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns(), opencodetest.WithClock(clock.Now))
	store := &asyncagents.MemoryStore{}
	m1, err := asyncagents.New(f, asyncagents.WithStore(store), asyncagents.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	caller := asyncagentstest.NewParent(t, f)
	task := asyncagentstest.Launch(t, m1, caller, "held")
	asyncagentstest.AwaitBusy(t, f, task.SessionID)
	if err := m1.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	clock.Advance(40 * time.Second)
	asyncagentstest.Release(t, f, task.SessionID, opencodetest.Text("done"))
	waitFor(t, 10*time.Second, func() bool { return !busy(t.Context(), f, task.SessionID) })
	clock.Advance(time.Hour) // no Manager follows the task meanwhile
	m2 := asyncagentstest.NewManager(t, f, fastPoll, asyncagents.WithStore(store), asyncagents.WithClock(clock))
	got := asyncagentstest.AwaitTask(t, m2, task.ID, asyncagentstest.Delivered)
	if d := got.Completed.Sub(got.Started); got.Status != asyncagents.StatusCompleted || d != 40*time.Second {
		t.Errorf("the task read an hour after its run ended: %s after %v, want completed after 40s", got.Status, d)
	}
	if notes := asyncagentstest.Notifications(t, f, caller.SessionID); len(notes) != 1 || !strings.Contains(notes[0], "40s") {
		t.Errorf("the parent's notifications: %q, want one saying 40s", notes)
	}
}
