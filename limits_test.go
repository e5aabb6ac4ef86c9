package asyncagents_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/asyncagentstest"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// T-21: over its limit a launch returns at once with the task queued (its place shown);
// queued tasks start in launch order as slots free up, on every way a run ends, can be
// cancelled, and survive a restart.
func TestConcurrencyLimitsQueueInLaunchOrder(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	store := &asyncagents.MemoryStore{}
	limits := asyncagents.WithConcurrency(asyncagents.Limits{Default: 1})
	m := asyncagentstest.NewManager(t, f, fastPoll, limits, asyncagents.WithStore(store))
	caller := asyncagentstest.NewParent(t, f)
	a, b, c, d := asyncagentstest.Launch(t, m, caller, "a"), asyncagentstest.Launch(t, m, caller, "b"), asyncagentstest.Launch(t, m, caller, "c"), asyncagentstest.Launch(t, m, caller, "d")
	if a.Status != asyncagents.StatusRunning || b.Status != asyncagents.StatusQueued || b.QueuePosition != 1 || c.QueuePosition != 2 {
		t.Fatalf("launch: a %s, b %s #%d, c %s #%d", a.Status, b.Status, b.QueuePosition, c.Status, c.QueuePosition)
	}
	list, _ := tools(m)["asyncagents_list"].Handler(context.Background(), caller, []byte(`{"status":"queued"}`))
	if !strings.Contains(list, "place in queue: 1") || !strings.Contains(list, "place in queue: 3") {
		t.Fatalf("list: %s", list)
	}
	// A queued task is cancelled without a run; the others move up.
	if got, err := m.Cancel(context.Background(), caller, c.ID); err != nil || got.Status != asyncagents.StatusCancelled {
		t.Fatalf("cancel queued = %+v, %v", got, err)
	}
	if got, _ := m.Get(d.ID); got.QueuePosition != 2 {
		t.Fatalf("d after the cancel: #%d", got.QueuePosition)
	}
	// a fails: b starts.
	asyncagentstest.Release(t, f, a.SessionID, opencodetest.Fail(400))
	if got := asyncagentstest.Await(t, m, caller, a.ID); got.Status != asyncagents.StatusError {
		t.Fatalf("a = %s", got.Status)
	}
	asyncagentstest.AwaitTask(t, m, b.ID, func(tk asyncagents.Task) bool { return tk.Status == asyncagents.StatusRunning })
	if got, _ := m.Get(d.ID); got.Status != asyncagents.StatusQueued || got.QueuePosition != 1 {
		t.Fatalf("d while b runs: %s #%d", got.Status, got.QueuePosition)
	}

	// A restart keeps d queued behind b, and b's slot.
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	m2 := asyncagentstest.NewManager(t, f, fastPoll, limits, asyncagents.WithStore(store))
	if got, _ := m2.Get(d.ID); got.Status != asyncagents.StatusQueued || got.QueuePosition != 1 {
		t.Fatalf("d after a restart: %s #%d %q", got.Status, got.QueuePosition, got.Error)
	}
	// b is cancelled: d starts, and completes.
	if _, err := m2.Cancel(context.Background(), caller, b.ID); err != nil {
		t.Fatal(err)
	}
	asyncagentstest.AwaitTask(t, m2, d.ID, func(tk asyncagents.Task) bool { return tk.Status == asyncagents.StatusRunning })
	asyncagentstest.Release(t, f, d.SessionID, opencodetest.Text("d done"))
	if got := asyncagentstest.Await(t, m2, caller, d.ID); got.Status != asyncagents.StatusCompleted || got.Result != "d done" {
		t.Fatalf("d = %s %q", got.Status, got.Result)
	}
}

// T-21: a clear frees the slots of the tasks it removes; limits are checked.
func TestClearFreesConcurrencySlots(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	m := asyncagentstest.NewManager(t, f, fastPoll, asyncagents.WithConcurrency(asyncagents.Limits{Default: 1}))
	caller := asyncagentstest.NewParent(t, f)
	first, second := asyncagentstest.Launch(t, m, caller, "a"), asyncagentstest.Launch(t, m, caller, "b")
	if first.Status != asyncagents.StatusRunning || second.Status != asyncagents.StatusQueued {
		t.Fatalf("first %s, second %s", first.Status, second.Status)
	}
	if _, err := m.Clear(context.Background(), caller); err != nil {
		t.Fatal(err)
	}
	if again := asyncagentstest.Launch(t, m, caller, "c"); again.Status != asyncagents.StatusRunning {
		t.Errorf("after a clear: %s", again.Status)
	}
	if _, err := asyncagents.New(f, asyncagents.WithConcurrency(asyncagents.Limits{Default: -1})); !errors.Is(err, asyncagents.ErrInvalidInput) {
		t.Errorf("negative limit: %v", err)
	}
}

// T-21 on the real server: with one slot, the second task waits and then completes. The
// first runs until the test cancels it, so that it holds the slot however slow the machine.
func TestRealServerConcurrencyLimitQueues(t *testing.T) {
	srv := shared.Get(t)
	c := srv.Client()
	ctx := ctxT(t, 60*time.Second)
	caller := asyncagentstest.NewParent(t, c)
	m := asyncagentstest.NewManager(t, c, fastPoll, asyncagents.WithConcurrency(asyncagents.Limits{Default: 1}), asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply))
	first := asyncagentstest.Launch(t, m, caller, "SLEEP:600 first "+caller.SessionID)
	second := asyncagentstest.Launch(t, m, caller, "RUN:echo second-ran")
	if first.Status != asyncagents.StatusRunning || second.Status != asyncagents.StatusQueued {
		t.Fatalf("first %s, second %s", first.Status, second.Status)
	}
	if busy(ctx, c, second.SessionID) {
		t.Fatal("the queued task's session is busy")
	}
	// Cancel once the first run has asked its model: an abort while a run loads the model
	// fails the runs waiting for that load (docs/reliability.md, known limits).
	waitFor(t, 30*time.Second, func() bool {
		for _, r := range srv.Model.Requests() {
			if _, u := r.LastUser(); r.Kind == opencodetest.KindChat && strings.Contains(u, "first "+caller.SessionID) {
				return true
			}
		}
		return false
	})
	if _, err := m.Cancel(ctx, caller, first.ID); err != nil {
		t.Fatal(err)
	}
	got := asyncagentstest.Await(t, m, caller, second.ID)
	if got.Status != asyncagents.StatusCompleted || !strings.Contains(got.Result, "second-ran") {
		t.Fatalf("second = %s %q %q", got.Status, got.Result, got.Error)
	}
	if f, _ := m.Get(first.ID); !f.Completed.Before(got.Started) && !f.Completed.Equal(got.Started) {
		t.Errorf("second started %v, before first ended %v", got.Started, f.Completed)
	}
}

// S-5: WithMaxActivePerParent bounds one parent's active tasks (queued ones count): a launch
// or resume over it fails with ErrTaskLimit, creates no session and changes no task; other
// parents are not affected; a run that ends, however it ends, frees a place; the count
// survives a restart.
func TestMaxActivePerParent(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	counted := &countingClient{Client: f}
	store := &asyncagents.MemoryStore{}
	opts := []asyncagents.Option{fastPoll, asyncagents.WithMaxActivePerParent(2), asyncagents.WithConcurrency(asyncagents.Limits{Default: 1}),
		asyncagents.WithStore(store)}
	m := asyncagentstest.NewManager(t, counted, opts...)
	caller, other := asyncagentstest.NewParent(t, f), asyncagentstest.NewParent(t, f)
	a, b := asyncagentstest.Launch(t, m, caller, "a"), asyncagentstest.Launch(t, m, caller, "b") // running, queued
	sessions := counted.snapshot()["CreateSession"]
	in := asyncagents.LaunchInput{Caller: caller, Description: "c", Agent: "general", Prompt: "c"}
	if got, err := m.Launch(context.Background(), in); !errors.Is(err, asyncagents.ErrTaskLimit) || got.ID != "" {
		t.Fatalf("third launch = %+v, %v; want ErrTaskLimit", got, err)
	}
	if n := counted.snapshot()["CreateSession"]; n != sessions {
		t.Errorf("the refused launch created %d sessions", n-sessions)
	}
	asyncagentstest.Launch(t, m, other, "x") // another parent has its own count
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	m = asyncagentstest.NewManager(t, f, opts...)
	if _, err := m.Launch(context.Background(), in); !errors.Is(err, asyncagents.ErrTaskLimit) {
		t.Fatalf("after a restart: %v, want ErrTaskLimit", err)
	}
	if _, err := m.Cancel(context.Background(), caller, b.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Launch(context.Background(), in); err != nil {
		t.Fatalf("launch after a cancel freed a place: %v", err)
	}
	// a ends, and d takes its place; resuming a would make three active (c and d): refused,
	// and a is left as it was.
	asyncagentstest.Release(t, f, a.SessionID, opencodetest.Text("a done"))
	asyncagentstest.Await(t, m, caller, a.ID)
	before, _ := m.Get(a.ID)
	if _, err := m.Launch(context.Background(), asyncagents.LaunchInput{Caller: caller, Description: "d", Agent: "general", Prompt: "d"}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Resume(context.Background(), caller, a.ID, "more"); !errors.Is(err, asyncagents.ErrTaskLimit) {
		t.Fatalf("resume over the cap = %v, want ErrTaskLimit", err)
	}
	if after, _ := m.Get(a.ID); after.Status != before.Status || after.ResumeCount != before.ResumeCount {
		t.Errorf("refused resume changed the task: %+v → %+v", before, after)
	}
	if _, err := asyncagents.New(f, asyncagents.WithMaxActivePerParent(-1)); !errors.Is(err, asyncagents.ErrInvalidInput) {
		t.Errorf("negative cap: %v", err)
	}
}

// T-21: a launch under a concurrency limit with a free slot is running from its first
// change on (a status page never shows it queued for a moment); one that must wait is queued
// from its first change until it starts.
func TestLaunchUnderFreeLimitIsNeverQueued(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	m := asyncagentstest.NewManager(t, f, fastPoll, asyncagents.WithConcurrency(asyncagents.Limits{Default: 1}))
	sub, _, err := m.Subscribe(0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	caller := asyncagentstest.NewParent(t, f)
	first, second := asyncagentstest.Launch(t, m, caller, "held"), asyncagentstest.Launch(t, m, caller, "waits")
	seen := map[string][]asyncagents.Status{}
	for len(seen[first.ID]) == 0 || len(seen[second.ID]) == 0 {
		c := <-sub.Changes()
		seen[c.Task.ID] = append(seen[c.Task.ID], c.Task.Status)
	}
	if got := seen[first.ID][0]; got != asyncagents.StatusRunning {
		t.Errorf("first change of a launch with a free slot: %s, want running", got)
	}
	if got := seen[second.ID][0]; got != asyncagents.StatusQueued {
		t.Errorf("first change of a launch that waits: %s, want queued", got)
	}
}
