package asyncagents_test

import (
	"context"
	"log/slog"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/asyncagentstest"
	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// boomClient panics in the methods armed, once each.
type boomClient struct {
	*opencodetest.FakeClient
	getSession, promptAsync, reply atomic.Bool
}

func (c *boomClient) GetSession(ctx context.Context, id string) (*opencode.Session, error) {
	if c.getSession.CompareAndSwap(true, false) {
		panic("boom in GetSession")
	}
	return c.FakeClient.GetSession(ctx, id)
}

func (c *boomClient) PromptAsync(ctx context.Context, id string, req opencode.PromptRequest) error {
	if c.promptAsync.CompareAndSwap(true, false) {
		panic("boom in PromptAsync")
	}
	return c.FakeClient.PromptAsync(ctx, id, req)
}

func (c *boomClient) ReplyPermission(ctx context.Context, dir, id string, r opencode.PermissionReply) error {
	if c.reply.CompareAndSwap(true, false) {
		panic("boom in ReplyPermission")
	}
	return c.FakeClient.ReplyPermission(ctx, dir, id, r)
}

// boomStore panics in Save while armed.
type boomStore struct {
	asyncagents.MemoryStore
	save atomic.Bool
}

func (s *boomStore) Save(ctx context.Context, t asyncagents.Task) error {
	if s.save.Load() {
		panic("boom in Save")
	}
	return s.MemoryStore.Save(ctx, t)
}

// The panic policy in every kind of goroutine the Manager starts: a panic in the Client, the
// Store or the permission policy is logged (or, for one task's reconcile, recorded on the
// task) and never reaches the host, and the Manager goes on. Kinds covered here: the
// follow-up sender and the queued starter New starts, the permission answer, a notification
// worker, a reconciler whose store panics; TestPanicsInBackgroundWork covers the event
// stream, the status poll and a reconcile. If any panic escaped, the test binary would die.
func TestPanicPolicyEveryGoroutine(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	c := &boomClient{FakeClient: f}
	store := &boomStore{}
	logs := &logRecords{}
	opts := []asyncagents.Option{asyncagents.WithStore(store), asyncagents.WithLogger(slog.New(logs)),
		asyncagents.WithPollInterval(20 * time.Millisecond), asyncagents.WithFollowUpQueue(1),
		asyncagents.WithConcurrency(asyncagents.Limits{Default: 1}),
		asyncagents.WithNotifyPolicy(asyncagents.NotifyPerRun)} // notifications are prompts (they panic below)
	caller := asyncagentstest.NewParent(t, f)
	// What a Manager that stopped left in the store: an ended task with a follow-up queued,
	// and a task queued for a slot.
	now := time.Now()
	for i, t0 := range []asyncagents.Task{
		{Status: asyncagents.StatusCompleted, Completed: now, FollowUps: []string{"follow-up"}},
		{Status: asyncagents.StatusQueued, PromptID: opencode.NewMessageID(now, "")},
	} {
		sess := newSession(t, f, "stored")
		t0.ID, t0.ParentSessionID, t0.BatchID, t0.Agent, t0.Description, t0.Prompt, t0.Started =
			sess.ID, caller.SessionID, sess.ID, "general", "stored", "held", now.Add(time.Duration(i)*time.Millisecond)
		if err := store.Save(context.Background(), t0); err != nil {
			t.Fatal(err)
		}
	}
	tasks, _ := store.Load(context.Background())
	var queued asyncagents.Task
	for _, tk := range tasks {
		if tk.Status == asyncagents.StatusQueued {
			queued = tk
		}
	}
	// The next Manager starts the queued task (its prompt panics) and sends the follow-up
	// (its session check panics).
	c.getSession.Store(true)
	c.promptAsync.Store(true)
	m2 := asyncagentstest.NewManager(t, c, opts...)
	waitFor(t, 10*time.Second, func() bool {
		return logs.contains("panic in sending queued follow-ups") && logs.contains("boom in GetSession")
	})
	waitFor(t, 10*time.Second, func() bool {
		return logs.contains("panic in starting queued tasks") && logs.contains("boom in PromptAsync")
	})
	// The queued start panicked after its task was running: its prompt is sent again once the
	// loss grace has passed, and it completes.
	asyncagents.SetLossGrace(m2, 100*time.Millisecond)
	waitFor(t, 10*time.Second, func() bool {
		got, _ := m2.Get(queued.ID)
		return got.Status == asyncagents.StatusRunning && f.Release(queued.ID, opencodetest.Text("queued done")) == nil
	})
	if got := asyncagentstest.Await(t, m2, caller, queued.ID); got.Status != asyncagents.StatusCompleted {
		t.Fatalf("queued task after its start panicked: %s %q", got.Status, got.Error)
	}

	// A notification worker: the parent's next post panics; the attempt counts as failed and
	// is retried, and every notification is delivered.
	n := asyncagentstest.Launch(t, m2, caller, "note")
	asyncagentstest.AwaitTask(t, m2, n.ID, func(tk asyncagents.Task) bool { // it holds the slot once the queued task ended
		return tk.Status == asyncagents.StatusRunning
	})
	c.promptAsync.Store(true)
	asyncagentstest.Release(t, f, n.SessionID, opencodetest.Text("ok"))
	waitFor(t, 20*time.Second, func() bool { return logs.contains("panic delivering a notification") })
	for _, id := range []string{n.ID, queued.ID} {
		asyncagentstest.AwaitTask(t, m2, id, asyncagentstest.Delivered)
	}

	// A reconciler whose store panics while it records the end of a run.
	s := asyncagentstest.Launch(t, m2, caller, "store")
	asyncagentstest.AwaitTask(t, m2, s.ID, func(tk asyncagents.Task) bool { return tk.Status == asyncagents.StatusRunning })
	store.save.Store(true)
	asyncagentstest.Release(t, f, s.SessionID, opencodetest.Text("saved?"))
	waitFor(t, 10*time.Second, func() bool { return logs.contains("boom in Save") })
	store.save.Store(false)
	if got := asyncagentstest.Await(t, m2, caller, s.ID); !got.Status.Terminal() {
		t.Fatalf("task whose store panicked: %s", got.Status)
	}
}

// The permission answer: a policy that panics, and a reply that panics, are logged; the
// request stays waiting and the parent is told.
func TestPanicInPermissionAnswer(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t)
	c := &boomClient{FakeClient: f}
	c.reply.Store(true)
	logs := &logRecords{}
	m := asyncagentstest.NewManager(t, c, fastPoll, asyncagents.WithLogger(slog.New(logs)),
		asyncagents.WithPermissionPolicy(asyncagents.ReplyAll(asyncagents.PermissionOnce)))
	caller := asyncagentstest.NewParent(t, f)
	task := asyncagentstest.Launch(t, m, caller, "RUN:cat /etc/hostname")
	waitFor(t, 10*time.Second, func() bool {
		return logs.contains("panic in answering a permission request") && logs.contains("boom in ReplyPermission")
	})
	panicky := asyncagentstest.NewManager(t, f, fastPoll, asyncagents.WithLogger(slog.New(logs)),
		asyncagents.WithPermissionPolicy(func(asyncagents.Task, asyncagents.PendingPermission) asyncagents.PermissionReply {
			panic("boom in the policy")
		}))
	other := asyncagentstest.Launch(t, panicky, caller, "RUN:cat /etc/hostname")
	waitFor(t, 10*time.Second, func() bool { return logs.contains("boom in the policy") })
	for _, mt := range []struct {
		m  *asyncagents.Manager
		id string
	}{{m, task.ID}, {panicky, other.ID}} {
		if _, err := mt.m.Cancel(context.Background(), caller, mt.id); err != nil {
			t.Fatal(err)
		}
	}
}

// managerGoroutines counts the goroutines that run the Manager's code: those with a frame of
// a method of package asyncagents (the Manager's, or one of its parts').
func managerGoroutines() int {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "github.com/asyncagents/asyncagents.(*") {
			n++
		}
	}
	return n
}

// The goroutine bound of the package documentation: 4 + n at rest (n reconcilers), and
// during a burst of run ends under 64 reconcilers, with 16 recording the ends of runs decided
// together, and 32 notification workers, each with up to 7 goroutines posting, more; none
// after Close.
func TestGoroutineBound(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	m := asyncagentstest.NewManager(t, f, fastPoll, asyncagents.WithReconcilers(2))
	waitFor(t, 10*time.Second, func() bool { return managerGoroutines() == 4+2 })
	var tasks []asyncagents.Task
	for range 20 {
		caller := asyncagentstest.NewParent(t, f)
		for range 30 {
			tasks = append(tasks, asyncagentstest.Launch(t, m, caller, "held"))
		}
	}
	// A start's goroutines end just after it does.
	if !testmain.Eventually(10*time.Second, func() bool { return managerGoroutines() == 4+2 }) {
		t.Errorf("with %d tasks running: %d goroutines, want 6", len(tasks), managerGoroutines())
	}
	peak := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, tk := range tasks {
			_ = f.Release(tk.SessionID, opencodetest.Text("ok"))
		}
	}()
	for ended := false; !ended; {
		select {
		case <-done:
			ended = delivered(m, tasks[len(tasks)-1].ID)
		default:
		}
		peak = max(peak, managerGoroutines())
		time.Sleep(time.Millisecond)
	}
	for _, tk := range tasks {
		asyncagentstest.AwaitTask(t, m, tk.ID, asyncagentstest.Delivered)
	}
	if bound := 4 + min(16*2, 64) + 16 + 32*8; peak > bound {
		t.Errorf("peak of %d goroutines during a burst of %d run ends, want at most %d", peak, len(tasks), bound)
	}
	t.Logf("peak %d goroutines during a burst of %d run ends", peak, len(tasks))
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A goroutine that said it is done may still be on its way out when Close returns.
	if !testmain.Eventually(5*time.Second, func() bool { return managerGoroutines() == 0 }) {
		t.Errorf("%d goroutines after Close", managerGoroutines())
	}
}

// panicSaveStore panics in the Save of one task once it has ended.
type panicSaveStore struct {
	asyncagents.MemoryStore
	id atomic.Value // string
}

func (s *panicSaveStore) Save(ctx context.Context, t asyncagents.Task) error {
	if id, _ := s.id.Load().(string); id == t.ID && t.Status.Terminal() {
		panic("boom in Save of " + t.ID)
	}
	return s.MemoryStore.Save(ctx, t)
}

// Runs that the stream carried whole and that end together are decided together: a save
// that panics for one of them is logged, and every other one is still saved, its slot given
// to the queued task and its follow-up sent (T-18).
func TestBurstWithAPanickingSave(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	store := &panicSaveStore{}
	logs := &logRecords{}
	m := asyncagentstest.NewManager(t, f, fastPoll, asyncagents.WithStore(store), asyncagents.WithLogger(slog.New(logs)),
		asyncagents.WithConcurrency(asyncagents.Limits{Default: 40}), asyncagents.WithFollowUpQueue(1))
	caller := asyncagentstest.NewParent(t, f)
	const n = 40
	ids := make([]string, n)
	for i := range ids {
		ids[i] = track(asyncagentstest.Launch(t, m, caller, "held"))
	}
	queued := asyncagentstest.Launch(t, m, caller, "queued") // waits for a slot
	follow := ids[n-1]
	if _, err := m.Resume(context.Background(), caller, follow, "and then"); err != nil {
		t.Fatal(err) // queued behind the running run
	}
	store.id.Store(ids[0])
	for _, id := range ids {
		asyncagentstest.Release(t, f, sessionOf(id), opencodetest.Text("done "+id))
	}
	waitFor(t, 10*time.Second, func() bool { return logs.contains("boom in Save of " + ids[0]) })
	waitFor(t, 10*time.Second, func() bool {
		saved, _ := store.Load(context.Background())
		ended := 0
		for _, tk := range saved {
			if tk.ID != ids[0] && tk.ID != follow && tk.Status == asyncagents.StatusCompleted {
				ended++
			}
		}
		return ended == n-2
	})
	waitFor(t, 10*time.Second, func() bool { // the queued task got a slot, the follow-up was sent
		q, _ := m.Get(queued.ID)
		fu, _ := m.Get(follow)
		return q.Status == asyncagents.StatusRunning && fu.Status.Active() && fu.ResumeCount == 1
	})
}
