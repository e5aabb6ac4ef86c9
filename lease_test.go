package asyncagents_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/asyncagentstest"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
	"github.com/asyncagents/asyncagents/pgstore"
	"github.com/asyncagents/asyncagents/pgstore/pgstoretest"
)

// Tests of Managers sharing tasks through a LeaseStore (pgstore on a real PostgreSQL).

// leaseTestLease is the lease of these tests: short, so that takeovers come soon, and long
// enough that a host of a test running beside others renews it in time.
const leaseTestLease = 3 * time.Second

// openPG opens a pgstore on url with the test lease, closed when t ends.
func openPG(t *testing.T, url string) *pgstore.Store {
	t.Helper()
	s, err := pgstore.Open(t.Context(), url, pgstore.Options{Lease: leaseTestLease})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// pgCase starts a PostgreSQL server with a database of its own for t, and a fake OpenCode
// server whose runs are held until released, with a parent session: the start of most
// tests here.
func pgCase(t *testing.T) (*pgstoretest.Server, string, *opencodetest.FakeClient, asyncagents.Caller) {
	t.Helper()
	srv := sharedPG.Get(t)
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	return srv, srv.NewDatabase(t), f, asyncagentstest.NewParent(t, f)
}

// settledNotifications waits a lease (a duplicate posted by a host that lost a task would
// come within it) and fails t unless parent holds exactly want notifications.
func settledNotifications(t *testing.T, c opencode.Client, parent string, want int) {
	t.Helper()
	time.Sleep(leaseTestLease)
	if got := asyncagentstest.Notifications(t, c, parent); len(got) != want {
		t.Fatalf("parent has %d notifications, want %d (one per run end)", len(got), want)
	}
}

// waitCompleted waits until m has every task of ids completed.
func waitCompleted(t *testing.T, m *asyncagents.Manager, ids []string) {
	t.Helper()
	for _, id := range ids {
		asyncagentstest.AwaitTask(t, m, id, func(tk asyncagents.Task) bool { return tk.Status == asyncagents.StatusCompleted })
	}
}

// H-2: the tasks of a Manager that stopped without a word (its leases left to expire) are
// claimed by another Manager on the same database, which finds them ended on the server and
// notifies the parent, once per task.
func TestExpiredLeasesClaimedByAnotherHost(t *testing.T) {
	t.Parallel() // a database of its own
	_, url, f, caller := pgCase(t)
	a, err := asyncagents.New(f, asyncagents.WithStore(openPG(t, url)), asyncagents.WithPollInterval(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 6 {
		ids = append(ids, track(asyncagentstest.Launch(t, a, caller, "task "+string(rune('a'+i)))))
	}
	if err := a.Close(context.Background()); err != nil { // its store keeps the leases
		t.Fatal(err)
	}
	for _, id := range ids {
		asyncagentstest.Release(t, f, sessionOf(id), opencodetest.Text("done "+id))
	}
	b := asyncagentstest.NewManager(t, f, asyncagents.WithStore(openPG(t, url)), asyncagents.WithPollInterval(200*time.Millisecond))
	waitCompleted(t, b, ids)
	asyncagentstest.AwaitNotifications(t, f, caller.SessionID, len(ids))
	settledNotifications(t, f, caller.SessionID, len(ids))
}

// H-2: a Manager cut off from the database stops acting on its tasks before their leases
// expire: while it is cut off its tasks end, another Manager claims them and notifies, and
// when the database is back the first drops them; every task is notified once.
func TestHostCutOffFromTheDatabaseStopsActing(t *testing.T) {
	t.Parallel() // a database of its own
	srv := sharedPG.Get(t)
	db := srv.NewDatabase(t)
	proxy := srv.NewProxy(t)
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	caller := asyncagentstest.NewParent(t, f)
	storeA, err := pgstore.Open(t.Context(), viaProxy(db, srv, proxy), pgstore.Options{Lease: leaseTestLease})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { storeA.Close() })
	a := asyncagentstest.NewManager(t, f, asyncagents.WithStore(storeA), asyncagents.WithPollInterval(200*time.Millisecond))
	var ids []string
	for i := range 4 {
		ids = append(ids, track(asyncagentstest.Launch(t, a, caller, "task "+string(rune('a'+i)))))
	}
	for _, id := range ids { // their prompts sent, so their starts are stored: it is their ends the cut meets
		asyncagentstest.AwaitBusy(t, f, sessionOf(id))
	}
	b := asyncagentstest.NewManager(t, f, asyncagents.WithStore(openPG(t, db)), asyncagents.WithPollInterval(200*time.Millisecond))
	proxy.Cut()
	for _, id := range ids {
		asyncagentstest.Release(t, f, sessionOf(id), opencodetest.Text("done "+id))
	}
	waitCompleted(t, b, ids)
	asyncagentstest.AwaitNotifications(t, f, caller.SessionID, len(ids))
	proxy.Restore()
	waitFor(t, 10*time.Second, func() bool {
		for _, id := range ids {
			if _, err := a.Get(id); err == nil {
				return false
			}
		}
		return true
	})
	settledNotifications(t, f, caller.SessionID, len(ids))
}

// viaProxy returns url (a database of srv) through proxy.
func viaProxy(url string, srv *pgstoretest.Server, proxy *pgstoretest.Proxy) string {
	db := url[strings.LastIndex(url, "/")+1 : strings.Index(url, "?")]
	return srv.DSNAt(proxy.Addr(), db)
}

// H-1: PostgreSQL restarts while tasks end. Nothing is lost: the Manager posts no
// notification whose id it cannot store, and once the database is back every task is
// stored completed and notified once.
func TestDatabaseRestartLosesNothing(t *testing.T) {
	t.Parallel() // a PostgreSQL server of its own, which it stops and starts
	srv := pgstoretest.Start(t)
	url := srv.NewDatabase(t)
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	caller := asyncagentstest.NewParent(t, f)
	store := openPG(t, url)
	m := asyncagentstest.NewManager(t, f, asyncagents.WithStore(store), asyncagents.WithPollInterval(200*time.Millisecond))
	var ids []string
	for i := range 4 {
		ids = append(ids, track(asyncagentstest.Launch(t, m, caller, "task "+string(rune('a'+i)))))
	}
	for _, id := range ids { // their prompts sent, so their starts are stored: it is their ends the outage meets
		asyncagentstest.AwaitBusy(t, f, sessionOf(id))
	}
	srv.Stop()
	for _, id := range ids {
		asyncagentstest.Release(t, f, sessionOf(id), opencodetest.Text("done "+id))
	}
	waitCompleted(t, m, ids)
	settledNotifications(t, f, caller.SessionID, 0)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	asyncagentstest.AwaitNotifications(t, f, caller.SessionID, len(ids))
	waitFor(t, 30*time.Second, func() bool {
		tasks, err := pgstore.ReadTasks(t.Context(), url)
		if err != nil || len(tasks) != len(ids) {
			return false
		}
		for _, task := range tasks {
			if task.Status != asyncagents.StatusCompleted || len(task.Notifications) != 1 ||
				task.Notifications[0].State != asyncagents.NotificationDelivered {
				return false
			}
		}
		return true
	})
	settledNotifications(t, f, caller.SessionID, len(ids))
}

// H-4: a concurrency limit holds across Managers sharing a SlotStore, and queued tasks start
// in launch order whatever Manager launched them. Sampled every 5 ms, at most 2 tasks of the
// two Managers run at once (busy sessions of the server).
func TestConcurrencyLimitHoldsAcrossHosts(t *testing.T) {
	t.Parallel() // a database of its own
	_, url, f, caller := pgCase(t)
	limits := asyncagents.WithConcurrency(asyncagents.Limits{Default: 2})
	a := asyncagentstest.NewManager(t, f, asyncagents.WithStore(openPG(t, url)), limits, asyncagents.WithPollInterval(200*time.Millisecond))
	b := asyncagentstest.NewManager(t, f, asyncagents.WithStore(openPG(t, url)), limits, asyncagents.WithPollInterval(200*time.Millisecond))
	running := func() int { // the server's busy sessions
		st, _ := f.SessionStatus(context.Background(), "")
		return len(st)
	}
	stop := make(chan struct{})
	var most atomic.Int64
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if n := running(); int64(n) > most.Load() {
				most.Store(int64(n))
			}
		}
	}()
	defer func() { close(stop); <-sampled }()
	// a1 and b1 run; a2, b2, a3 wait, in that order.
	var ids []string
	var owner []*asyncagents.Manager
	for i, m := range []*asyncagents.Manager{a, b, a, b, a} {
		task := asyncagentstest.Launch(t, m, caller, fmt.Sprintf("task %d", i))
		ids, owner = append(ids, track(task)), append(owner, m)
		want := asyncagents.StatusQueued
		if i < 2 {
			want = asyncagents.StatusRunning
		}
		if task.Status != want {
			t.Fatalf("task %d launched %s, want %s", i, task.Status, want)
		}
	}
	for i := range ids {
		// Ending the oldest running task starts the next in launch order.
		asyncagentstest.Release(t, f, sessionOf(ids[i]), opencodetest.Text("done"))
		asyncagentstest.AwaitTask(t, owner[i], ids[i], func(tk asyncagents.Task) bool { return tk.Status == asyncagents.StatusCompleted })
		if next := i + 2; next < len(ids) {
			asyncagentstest.AwaitTask(t, owner[next], ids[next], func(tk asyncagents.Task) bool { return tk.Status == asyncagents.StatusRunning })
			for later := next + 1; later < len(ids); later++ {
				if task, _ := owner[later].Get(ids[later]); task.Status != asyncagents.StatusQueued {
					t.Fatalf("task %d is %s before task %d started; want queued (launch order)", later, task.Status, next)
				}
			}
		}
	}
	if n := most.Load(); n > 2 {
		t.Fatalf("%d tasks ran at once across the Managers, limit 2", n)
	}
}

// H-5: every operation works from any host. B lists A's tasks; Output, Cancel and Resume
// on B take A's tasks over (A stops acting on them and yields their leases); Clear on A
// brings back and removes the caller's tasks that B holds. Each run end is notified once.
func TestEveryOperationWorksFromAnyHost(t *testing.T) {
	t.Parallel() // a database of its own
	_, url, f, caller := pgCase(t)
	a := asyncagentstest.NewManager(t, f, asyncagents.WithStore(openPG(t, url)), asyncagents.WithPollInterval(200*time.Millisecond))
	b := asyncagentstest.NewManager(t, f, asyncagents.WithStore(openPG(t, url)), asyncagents.WithPollInterval(200*time.Millisecond))
	ctx := t.Context()
	var ids []string
	for i := range 3 {
		ids = append(ids, track(asyncagentstest.Launch(t, a, caller, fmt.Sprint("task ", i))))
	}
	listed, err := b.List(caller, "")
	if err != nil || len(listed) != 3 {
		t.Fatalf("B lists %d of A's tasks (%v), want 3", len(listed), err)
	}

	// Output on B takes task 0 over.
	out, err := b.Output(ctx, caller, ids[0], asyncagents.OutputOptions{})
	if err != nil || out.Task.Status != asyncagents.StatusRunning {
		t.Fatalf("Output on B of A's running task: %+v, %v", out.Task.Status, err)
	}
	if _, err := a.Get(ids[0]); !errors.Is(err, asyncagents.ErrTaskNotFound) {
		t.Fatalf("A still has the task B took over: %v", err)
	}
	// Cancel on B takes task 1 over and cancels it.
	cancelled, err := b.Cancel(ctx, caller, ids[1])
	if err != nil || cancelled.Status != asyncagents.StatusCancelled {
		t.Fatalf("Cancel on B of A's task: %+v, %v", cancelled.Status, err)
	}
	// Task 0 ends: B completes it; a blocking Output there returns it.
	asyncagentstest.Release(t, f, sessionOf(ids[0]), opencodetest.Text("done 0"))
	out, err = b.Output(ctx, caller, ids[0], asyncagents.OutputOptions{Block: true, Timeout: 10 * time.Second})
	if err != nil || out.Task.Status != asyncagents.StatusCompleted {
		t.Fatalf("blocking Output on B: %+v, %v", out.Task.Status, err)
	}
	// Task 2 ends on A.
	asyncagentstest.Release(t, f, sessionOf(ids[2]), opencodetest.Text("done 2"))
	waitCompleted(t, a, ids[2:])
	// Resume on A brings task 0 back.
	resumed, err := a.Resume(ctx, caller, ids[0], "again")
	if err != nil || resumed.Status != asyncagents.StatusResumed {
		t.Fatalf("Resume on A of the task B holds: %+v, %v", resumed.Status, err)
	}
	asyncagentstest.Release(t, f, sessionOf(ids[0]), opencodetest.Text("done again"))
	waitCompleted(t, a, ids[:1])
	asyncagentstest.AwaitNotifications(t, f, caller.SessionID, 4) // 0, 1 (cancelled), 2, and 0's second run
	// Clear on B brings back every task of the caller A holds and removes them all.
	res, err := b.Clear(ctx, caller)
	if err != nil || res.Removed != 3 {
		t.Fatalf("Clear on B: %+v, %v; want 3 removed", res, err)
	}
	for _, m := range []*asyncagents.Manager{a, b} {
		if left, _ := m.List(caller, ""); len(left) != 0 {
			t.Fatalf("tasks left after Clear: %d", len(left))
		}
	}
	settledNotifications(t, f, caller.SessionID, 4)
}

// H-6: Managers in front of two OpenCode servers share one database; a task is claimed only
// by a Manager of its own server. A's tasks (server one) outlive A; B (server two) never
// claims them, and A2, a new Manager of server one, finishes and notifies them.
func TestTaskClaimedOnlyByAHostOfItsServer(t *testing.T) {
	t.Parallel() // a database of its own
	srv := sharedPG.Get(t)
	url := srv.NewDatabase(t)
	one, two := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns()), asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	open := func(server string) *pgstore.Store {
		s, err := pgstore.Open(t.Context(), url, pgstore.Options{Lease: leaseTestLease, Server: server})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	poll := asyncagents.WithPollInterval(200 * time.Millisecond)
	a, err := asyncagents.New(one, asyncagents.WithStore(open("one")), poll)
	if err != nil {
		t.Fatal(err)
	}
	b := asyncagentstest.NewManager(t, two, asyncagents.WithStore(open("two")), poll)
	callerOne, callerTwo := asyncagentstest.NewParent(t, one), asyncagentstest.NewParent(t, two)
	var ids []string
	for i := range 2 {
		task := asyncagentstest.Launch(t, a, callerOne, fmt.Sprint("task ", i))
		if task.Server != "one" {
			t.Fatalf("task of server one records server %q", task.Server)
		}
		ids = append(ids, track(task))
	}
	onTwo := asyncagentstest.Launch(t, b, callerTwo, "task on two")
	if err := a.Close(context.Background()); err != nil { // its leases expire
		t.Fatal(err)
	}
	for _, id := range ids {
		asyncagentstest.Release(t, one, sessionOf(id), opencodetest.Text("done "+id))
	}
	asyncagentstest.Release(t, two, onTwo.SessionID, opencodetest.Text("done on two"))
	waitCompleted(t, b, []string{onTwo.ID})
	time.Sleep(2 * leaseTestLease)
	for _, id := range ids {
		if task, err := b.Get(id); err == nil {
			t.Fatalf("server two's Manager claimed a task of server one: %s %s", task.ID, task.Status)
		}
	}
	a2 := asyncagentstest.NewManager(t, one, asyncagents.WithStore(open("one")), poll)
	waitCompleted(t, a2, ids)
	asyncagentstest.AwaitNotifications(t, one, callerOne.SessionID, len(ids))
	asyncagentstest.AwaitNotifications(t, two, callerTwo.SessionID, 1)
	settledNotifications(t, one, callerOne.SessionID, len(ids))
}

// H-2: tasks launched while the lease loop renews are kept by the Manager that launched
// them (a Renew finds lost only what was held before it started), and each is notified once.
func TestLaunchDuringRenewKeepsTheTask(t *testing.T) {
	t.Parallel() // a database of its own
	_, url, f, caller := pgCase(t)
	st, err := pgstore.Open(t.Context(), url, pgstore.Options{Lease: leaseTestLease}) // renewals every second
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m := asyncagentstest.NewManager(t, f, asyncagents.WithStore(st), asyncagents.WithPollInterval(200*time.Millisecond),
		asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply))
	var ids []string
	for deadline := time.Now().Add(4 * time.Second); time.Now().Before(deadline); {
		ids = append(ids, track(asyncagentstest.Launch(t, m, caller, fmt.Sprint("task ", len(ids)))))
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(time.Second)
	for _, id := range ids {
		if _, err := m.Get(id); err != nil {
			t.Fatalf("task %s dropped by the Manager that launched it (no other host): %v", id, err)
		}
		asyncagentstest.Release(t, f, sessionOf(id), opencodetest.Text("done"))
	}
	waitCompleted(t, m, ids)
	asyncagentstest.AwaitNotifications(t, f, caller.SessionID, len(ids))
	settledNotifications(t, f, caller.SessionID, len(ids))
}

// failingRelease is a pgstore whose Release fails, as during a short database outage.
type failingRelease struct{ *pgstore.Store }

func (failingRelease) Release(context.Context, ...string) error {
	return errors.New("connection reset")
}

// H-4: a host that stops after storing a task's end but before giving its slot back (its
// Release failed, then it closed; a SIGKILL does the same) leaks no slot: the save of the
// end gave it back.
func TestSlotFreedWhenHostStops(t *testing.T) {
	t.Parallel() // a database of its own
	_, url, f, caller := pgCase(t)
	limits := asyncagents.WithConcurrency(asyncagents.Limits{Default: 1})
	poll := asyncagents.WithPollInterval(200 * time.Millisecond)
	sa := openPG(t, url)
	a, err := asyncagents.New(f, asyncagents.WithStore(failingRelease{sa}), limits, poll)
	if err != nil {
		t.Fatal(err)
	}
	x := asyncagentstest.Launch(t, a, caller, "x")
	asyncagentstest.Release(t, f, x.SessionID, opencodetest.Text("done"))
	waitCompleted(t, a, []string{x.ID})
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	sa.Close()
	b := asyncagentstest.NewManager(t, f, asyncagents.WithStore(openPG(t, url)), limits, poll)
	waitCompleted(t, b, []string{x.ID})
	y := asyncagentstest.Launch(t, b, caller, "y")
	asyncagentstest.AwaitTask(t, b, y.ID, func(tk asyncagents.Task) bool { return tk.Status == asyncagents.StatusRunning })
}

// messageLookups counts the Client's reads of one message (GET /session/{id}/message/{msg}),
// which a Manager makes before it posts a notification an earlier attempt may have posted.
type messageLookups struct {
	opencode.Client
	n atomic.Int64
}

func (c *messageLookups) Message(ctx context.Context, session, id string) (*opencode.Message, error) {
	c.n.Add(1)
	return c.Client.Message(ctx, session, id)
}

// H-5 and exactly once: a task is taken over by another Manager right after its holder posted
// its notification, before the holder set the outcome on it (a hook holds the holder there for
// 2 s). The holder hands the task over only once the outcome is set, so the record the new
// holder claims shows the notification delivered: the new holder does not look it up or post
// it again, and the parent gets one.
func TestHandoverDuringDeliveryNotifiesOnce(t *testing.T) {
	t.Parallel() // a database of its own
	_, url, f, caller := pgCase(t)
	opts := []asyncagents.Option{asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply), asyncagents.WithPollInterval(200 * time.Millisecond)}
	a := asyncagentstest.NewManager(t, f, append(opts, asyncagents.WithStore(openPG(t, url)))...)
	lookups := &messageLookups{Client: f}
	b := asyncagentstest.NewManager(t, lookups, append(opts, asyncagents.WithStore(openPG(t, url)))...)
	id, release := endHeldAfterPost(t, a, f, caller)
	outputMeanwhile(t, b, caller, id, release, nil) // A sees B's request within a second, and would hand over now
	if _, err := a.Get(id); !errors.Is(err, asyncagents.ErrTaskNotFound) {
		t.Fatalf("A still has the task B asked for: %v", err)
	}
	settledNotifications(t, f, caller.SessionID, 1)
	if n := lookups.n.Load(); n != 0 {
		t.Errorf("B looked the notification up %d times: it claimed it posted but pending", n)
	}
	task, err := b.Get(id)
	if err != nil || len(task.Notifications) != 1 || task.Notifications[0].State != asyncagents.NotificationDelivered ||
		task.Notifications[0].Attempts != 1 {
		t.Errorf("B's record of the task: %+v, %v; want its notification delivered by A's one attempt", task.Notifications, err)
	}
}

// holdingSaves is a pgstore that holds the first save of each task in hold that records a
// pending notification's message id (the step before its post) until the task's channel is
// closed, and sends the task's id on held when it does.
type holdingSaves struct {
	*pgstore.Store
	held chan string
	mu   sync.Mutex
	hold map[string]chan struct{}
}

func (s *holdingSaves) Save(ctx context.Context, t asyncagents.Task) error {
	if n := len(t.Notifications); n > 0 && t.Notifications[n-1].State == asyncagents.NotificationPending && t.Notifications[n-1].MessageID != "" {
		s.mu.Lock()
		gate := s.hold[t.ID]
		delete(s.hold, t.ID)
		s.mu.Unlock()
		if gate != nil {
			s.held <- t.ID
			<-gate
		}
	}
	return s.Store.Save(ctx, t)
}

// H-5 and exactly once with merged notifications: two notifications of a parent that share a
// message are being recorded (the save of the first is held for 2 s) when another Manager
// asks for the second task, which its holder hands over meanwhile. The merged post is not
// made (the second is no longer the holder's to post); the first goes alone, the second is
// posted by its new holder under the message id recorded for both (its parts join the
// first's message), and the parent gets each once.
func TestHandoverOfAMergedNotificationNotifiesOnce(t *testing.T) {
	t.Parallel() // a database of its own
	_, url, f, caller := pgCase(t)
	opts := []asyncagents.Option{asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply), asyncagents.WithPollInterval(200 * time.Millisecond)}
	store := &holdingSaves{Store: openPG(t, url), held: make(chan string, 2), hold: map[string]chan struct{}{}}
	a := asyncagentstest.NewManager(t, f, append(opts, asyncagents.WithStore(store))...)
	b := asyncagentstest.NewManager(t, f, append(opts, asyncagents.WithStore(openPG(t, url)))...)
	ids := launchHeld(t, a, f, caller, 3) // w, x, y
	w, x, y := ids[0], ids[1], ids[2]
	gateW, gateX := make(chan struct{}), make(chan struct{})
	closeAtCleanup(t, gateW, gateX)
	store.mu.Lock()
	store.hold[w], store.hold[x] = gateW, gateX
	store.mu.Unlock()
	heldIs := func(want string) {
		t.Helper()
		select {
		case got := <-store.held:
			if got != want {
				t.Fatalf("held the save of %s, want %s", got, want)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("no save of %s held", want)
		}
	}
	release(t, a, f, w)
	heldIs(w) // w's notification is being recorded: x's and y's queue behind it
	release(t, a, f, x, y)
	waitRunEndsRecorded(t, a, x, y)
	close(gateW)
	heldIs(x)                                    // x's and y's, merged, are being recorded
	outputMeanwhile(t, b, caller, y, gateX, nil) // A sees B's request within a second, and hands y over
	waitFor(t, 20*time.Second, func() bool {
		tx, errX := a.Get(x)
		ty, errY := b.Get(y)
		return errX == nil && errY == nil && len(tx.Notifications) == 1 && len(ty.Notifications) == 1 &&
			tx.Notifications[0].State == asyncagents.NotificationDelivered && ty.Notifications[0].State == asyncagents.NotificationDelivered
	})
	settledNotifications(t, f, caller.SessionID, 3)
}

// closeAtCleanup closes each of chans that is still open when t ends (before the Managers
// made earlier close): a test that fails while a hook holds one does not hang.
func closeAtCleanup(t *testing.T, chans ...chan struct{}) {
	t.Cleanup(func() {
		for _, c := range chans {
			select {
			case <-c:
			default:
				close(c)
			}
		}
	})
}

// endHeldAfterPost launches a task on a and ends its run; a hook holds a right after it
// posted the notification, until release is closed. It returns the task's id and release.
func endHeldAfterPost(t *testing.T, a *asyncagents.Manager, f *opencodetest.FakeClient, caller asyncagents.Caller) (id string, release chan struct{}) {
	t.Helper()
	posted, release := make(chan struct{}), make(chan struct{})
	closeAtCleanup(t, release)
	var once sync.Once
	asyncagents.SetAfterPost(a, func() { once.Do(func() { close(posted); <-release }) })
	id = track(asyncagentstest.Launch(t, a, caller, "task"))
	asyncagentstest.Release(t, f, sessionOf(id), opencodetest.Text("done"))
	select {
	case <-posted:
	case <-time.After(20 * time.Second):
		t.Fatal("A posted no notification")
	}
	return id, release
}

// outputMeanwhile calls Output of task id on b, and 2 s later (its holder sees the request
// within a second, and hands the task over, or would) calls meanwhile, when not nil, and
// closes release; it fails t unless the Output returns without an error within 30 s of that.
func outputMeanwhile(t *testing.T, b *asyncagents.Manager, caller asyncagents.Caller, id string, release chan struct{}, meanwhile func()) {
	t.Helper()
	out := make(chan error, 1)
	go func() {
		_, err := b.Output(context.Background(), caller, id, asyncagents.OutputOptions{})
		out <- err
	}()
	time.Sleep(2 * time.Second)
	if meanwhile != nil {
		meanwhile()
	}
	close(release)
	select {
	case err := <-out:
		if err != nil {
			t.Fatalf("Output on B: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Output on B did not return")
	}
}

// H-5, and bad timing changes nothing: a Resume on the holder of an ended task while the
// task is being handed over to another host (its notification's post, held by a hook, keeps
// the handover waiting) returns ErrLeaseLost and changes nothing; once the other host has the
// task, a Resume there runs the follow-up, with one notification per run end.
func TestResumeDuringHandoverChangesNothing(t *testing.T) {
	t.Parallel() // a database of its own
	_, url, f, caller := pgCase(t)
	opts := []asyncagents.Option{asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply), asyncagents.WithPollInterval(200 * time.Millisecond)}
	a := asyncagentstest.NewManager(t, f, append(opts, asyncagents.WithStore(openPG(t, url)))...)
	b := asyncagentstest.NewManager(t, f, append(opts, asyncagents.WithStore(openPG(t, url)))...)
	id, release := endHeldAfterPost(t, a, f, caller)
	outputMeanwhile(t, b, caller, id, release, func() { // A sees B's request within a second: the task is being handed over
		_, err := a.Resume(t.Context(), caller, id, "and then this")
		if !errors.Is(err, asyncagents.ErrLeaseLost) {
			t.Errorf("Resume on A during the handover: %v, want ErrLeaseLost", err)
		}
		if task, err := a.Get(id); err != nil || task.Status != asyncagents.StatusCompleted || task.ResumeCount != 0 {
			t.Errorf("A's task after the refused Resume: %+v, %v; want it completed, not resumed", task.Status, err)
		}
	})
	task, err := b.Resume(t.Context(), caller, id, "and then this")
	if err != nil || task.ResumeCount != 1 {
		t.Fatalf("Resume on B: %+v, %v", task.ResumeCount, err)
	}
	asyncagentstest.AwaitBusy(t, f, sessionOf(id))
	asyncagentstest.Release(t, f, sessionOf(id), opencodetest.Text("done again"))
	asyncagentstest.AwaitTask(t, b, id, func(tk asyncagents.Task) bool {
		return tk.Status == asyncagents.StatusCompleted && asyncagentstest.Delivered(tk)
	})
	settledNotifications(t, f, caller.SessionID, 2)
}

// failingSaves is a pgstore whose saves fail (as when the database is unreachable) until
// the time until, in Unix nanoseconds; failed counts them.
type failingSaves struct {
	*pgstore.Store
	until, failed atomic.Int64
}

func (s *failingSaves) Save(ctx context.Context, t asyncagents.Task) error {
	if time.Now().UnixNano() < s.until.Load() {
		s.failed.Add(1)
		return errors.New("injected: the database is unreachable")
	}
	return s.Store.Save(ctx, t)
}

// H-5: a handover whose save fails (the holder cannot reach the database for a moment, with a
// change of the task not saved yet: a follow-up queued meanwhile) keeps the task with its
// holder, which acts on it again and hands it over at a later look, once it can save: the
// asking host's Output returns the task, which then runs its follow-up, and each run ends
// with one notification.
func TestHandoverAfterFailedSaveKeepsTheTask(t *testing.T) {
	t.Parallel() // a database of its own
	_, url, f, caller := pgCase(t)
	store := &failingSaves{Store: openPG(t, url)}
	opts := []asyncagents.Option{asyncagents.WithFollowUpQueue(1), asyncagents.WithPollInterval(200 * time.Millisecond)}
	a := asyncagentstest.NewManager(t, f, append(opts, asyncagents.WithStore(store))...)
	b := asyncagentstest.NewManager(t, f, append(opts, asyncagents.WithStore(openPG(t, url)))...)
	id := track(asyncagentstest.Launch(t, a, caller, "task"))
	store.until.Store(time.Now().Add(2500 * time.Millisecond).UnixNano()) // A sees B's request within 1 s
	if _, err := a.Resume(t.Context(), caller, id, "and then this"); err != nil {
		t.Fatalf("queue a follow-up on A: %v", err)
	}
	out, err := b.Output(t.Context(), caller, id, asyncagents.OutputOptions{})
	if err != nil || out.Task.Status != asyncagents.StatusRunning {
		t.Fatalf("Output on B while A could not save for 2.5 s: %+v, %v", out.Task.Status, err)
	}
	if n := store.failed.Load(); n < 2 {
		t.Fatalf("%d of A's saves failed, want the follow-up's and the handover's at least", n)
	}
	if _, err := a.Get(id); !errors.Is(err, asyncagents.ErrTaskNotFound) {
		t.Fatalf("A still has the task B took over: %v", err)
	}
	for i, want := range []int{1, 2} { // the run, then the follow-up's
		asyncagentstest.Release(t, f, sessionOf(id), opencodetest.Text(fmt.Sprint("done ", i)))
		asyncagentstest.AwaitNotifications(t, f, caller.SessionID, want)
	}
	waitCompleted(t, b, []string{id})
	settledNotifications(t, f, caller.SessionID, 2)
}

// H-5: a run ends while its task is being handed over, with a follow-up queued. The holder
// keeps the follow-up queued rather than send it under a lease it is giving up; the new
// holder sends it. (A hook holds the holder's delivery of the first run's notification, so
// the handover waits while the second run ends.) Every run completes and is notified once.
func TestFollowUpKeptDuringHandover(t *testing.T) {
	t.Parallel() // a database of its own
	_, url, f, caller := pgCase(t)
	opts := []asyncagents.Option{asyncagents.WithFollowUpQueue(2), asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply),
		asyncagents.WithPollInterval(200 * time.Millisecond)}
	a := asyncagentstest.NewManager(t, f, append(opts, asyncagents.WithStore(openPG(t, url)))...)
	posted, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	asyncagents.SetAfterPost(a, func() { once.Do(func() { close(posted); <-release }) })
	b := asyncagentstest.NewManager(t, f, append(opts, asyncagents.WithStore(openPG(t, url)))...)
	closeAtCleanup(t, release)
	id := track(asyncagentstest.Launch(t, a, caller, "task"))
	ctx := t.Context()
	if _, err := a.Resume(ctx, caller, id, "second"); err != nil {
		t.Fatal(err)
	}
	asyncagentstest.Release(t, f, sessionOf(id), opencodetest.Text("done 1")) // run 2 starts: the follow-up
	select {
	case <-posted: // run 1's notification, held between its post and its outcome
	case <-time.After(20 * time.Second):
		t.Fatal("A posted no notification")
	}
	if _, err := a.Resume(ctx, caller, id, "third"); err != nil {
		t.Fatal(err)
	}
	out := make(chan error, 1)
	go func() {
		_, err := b.Output(context.Background(), caller, id, asyncagents.OutputOptions{})
		out <- err
	}()
	time.Sleep(1500 * time.Millisecond) // A sees B's request and waits for the held delivery
	waitFor(t, 10*time.Second, func() bool { return f.Release(sessionOf(id), opencodetest.Text("done 2")) == nil })
	asyncagentstest.AwaitTask(t, a, id, func(tk asyncagents.Task) bool { // A decides run 2 while handing the task over
		return tk.Status.Terminal()
	})
	close(release)
	if err := <-out; err != nil {
		t.Fatalf("Output on B: %v", err)
	}
	waitFor(t, 20*time.Second, func() bool { return f.Release(sessionOf(id), opencodetest.Text("done 3")) == nil }) // B sent "third"
	waitCompleted(t, b, []string{id})
	task, err := b.Get(id)
	if err != nil || task.ResumeCount != 2 || len(task.FollowUps) != 0 {
		t.Fatalf("B's task: resumed %d times, follow-ups %q, %v; want both follow-ups sent", task.ResumeCount, task.FollowUps, err)
	}
	asyncagentstest.AwaitNotifications(t, f, caller.SessionID, 3)
	settledNotifications(t, f, caller.SessionID, 3)
}

// H-5: a holder that cannot save a task another host wants keeps it and tries the handover
// again less and less often (at the next look of its lease loop after the first failure,
// then twice as long after each), not at every look, each a failing save; and it hands the
// task over once it can save.
func TestHandoverRetriesBackOff(t *testing.T) {
	t.Parallel() // a database of its own
	_, url, f, caller := pgCase(t)
	store := &failingSaves{Store: openPG(t, url)}
	opt := asyncagents.WithFollowUpQueue(1)
	a := asyncagentstest.NewManager(t, f, fastPoll, opt, asyncagents.WithStore(store))
	b := asyncagentstest.NewManager(t, f, fastPoll, opt, asyncagents.WithStore(openPG(t, url)))
	id := track(asyncagentstest.Launch(t, a, caller, "task"))
	store.until.Store(time.Now().Add(time.Hour).UnixNano())
	if _, err := a.Resume(t.Context(), caller, id, "and then this"); err != nil { // a change A cannot save
		t.Fatalf("queue a follow-up on A: %v", err)
	}
	store.failed.Store(0)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	_, err := b.Output(ctx, caller, id, asyncagents.OutputOptions{})
	cancel()
	if err == nil {
		t.Fatal("B got the task while A could not save it")
	}
	// A looks every third of the lease (500 ms): 10 looks in those 5 s; backing off, it
	// tries at about 0, 0.5, 1.5 and 3.5 s.
	if n := store.failed.Load(); n == 0 || n > 5 {
		t.Fatalf("A tried %d handovers in 5 s, want 1 to 5", n)
	}
	store.until.Store(0)
	out, err := b.Output(t.Context(), caller, id, asyncagents.OutputOptions{})
	if err != nil || out.Task.Status != asyncagents.StatusRunning {
		t.Fatalf("Output on B once A can save: %+v, %v", out.Task.Status, err)
	}
	if _, err := a.Get(id); !errors.Is(err, asyncagents.ErrTaskNotFound) {
		t.Fatalf("A still has the task B took over: %v", err)
	}
}
