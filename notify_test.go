package asyncagents_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
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

// flaky fails the prompts and reads of the sessions in down (an unreachable parent), and
// loses the answer of the next lose prompts after the server acted on them.
type flaky struct {
	*opencodetest.FakeClient
	mu   sync.Mutex
	down map[string]bool
	// The answers of the next lose prompts with a message id to session loseIn are lost.
	lose   int
	loseIn string
}

var errUnreachable = errors.New("flaky: connection refused")

func (c *flaky) isDown(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.down[id]
}

func (c *flaky) setDown(id string, down bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.down == nil {
		c.down = map[string]bool{}
	}
	c.down[id] = down
}

func (c *flaky) PromptAsync(ctx context.Context, id string, req opencode.PromptRequest) error {
	if c.isDown(id) {
		return errUnreachable
	}
	err := c.FakeClient.PromptAsync(ctx, id, req)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil && c.lose > 0 && req.MessageID != "" && id == c.loseIn {
		c.lose--
		return errors.New("flaky: connection reset after the request was sent")
	}
	return err
}

func (c *flaky) Prompt(ctx context.Context, id string, req opencode.PromptRequest) (*opencode.Message, error) {
	if c.isDown(id) {
		return nil, errUnreachable
	}
	msg, err := c.FakeClient.Prompt(ctx, id, req)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil && c.lose > 0 && req.MessageID != "" && id == c.loseIn {
		c.lose--
		return nil, errors.New("flaky: connection reset after the request was sent")
	}
	return msg, err
}

func (c *flaky) Messages(ctx context.Context, id string, limit int) ([]opencode.Message, error) {
	if c.isDown(id) {
		return nil, errUnreachable
	}
	return c.FakeClient.Messages(ctx, id, limit)
}

func (c *flaky) Message(ctx context.Context, id, msgID string) (*opencode.Message, error) {
	if c.isDown(id) {
		return nil, errUnreachable
	}
	return c.FakeClient.Message(ctx, id, msgID)
}

// N, R: notifications merged into one message whose answer was lost after the server stored
// it are found by its message id, once for all of them, and not posted again.
func TestMergedNotificationsAnswerLostAreNotDuplicated(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	caller := asyncagentstest.NewParent(t, f)
	c := &flaky{FakeClient: f}
	gated := &concurrentPrompts{Client: c, gate: make(chan struct{})}
	m := asyncagentstest.NewManager(t, gated, fastPoll, asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply))
	ids := launchHeld(t, m, f, caller, 6)
	release(t, m, f, ids...)
	waitRunEndsRecorded(t, m, ids...)
	c.mu.Lock()
	c.lose, c.loseIn = len(ids), caller.SessionID // every post's answer
	c.mu.Unlock()
	close(gated.gate)
	posted := awaitNotified(t, m, ids)
	if got := asyncagentstest.Notifications(t, f, caller.SessionID); len(got) != len(ids) {
		t.Fatalf("parent got %d notifications, want %d: %q", len(got), len(ids), got)
	}
	gated.mu.Lock()
	carried := slices.Clone(gated.carried)
	gated.mu.Unlock()
	slices.Sort(posted)
	if total := sumOf(carried); total != len(ids) || len(carried) == len(ids) || len(slices.Compact(posted)) != len(carried) {
		t.Errorf("notifications per message posted: %v, in messages %v; want %d merged, none posted again", carried, posted, len(ids))
	}
	for _, id := range ids {
		if task, _ := m.Get(id); task.Notifications[0].Attempts != 2 {
			t.Errorf("task %s: %d attempts, want the lost post and the check that found it", id, task.Notifications[0].Attempts)
		}
	}
}

func sumOf(v []int) (n int) {
	for _, x := range v {
		n += x
	}
	return n
}

// N, R: a notification whose answer was lost after the server created it is found by its
// message id before the retry and not posted again.
func TestNotificationAnswerLostIsNotDuplicated(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t)
	caller := asyncagentstest.NewParent(t, f)
	c := &flaky{FakeClient: f, lose: 1, loseIn: caller.SessionID}
	m := asyncagentstest.NewManager(t, c, fastPoll, asyncagents.WithNotifyPolicy(asyncagents.NotifyPerRun))
	task := asyncagentstest.Launch(t, m, caller, "RUN:echo once")
	asyncagentstest.AwaitTask(t, m, task.ID, func(tk asyncagents.Task) bool {
		return len(tk.Notifications) == 1 && tk.Notifications[0].State == asyncagents.NotificationDelivered
	})
	tk, _ := m.Get(task.ID)
	if n := tk.Notifications[0]; n.Attempts != 2 || n.MessageID == "" { // the lost post, then the check that found it
		t.Errorf("notification = %+v, want two attempts with a message id", n)
	}
	if got := asyncagentstest.Notifications(t, f, caller.SessionID); len(got) != 1 {
		t.Fatalf("parent got %d notifications: %q", len(got), got)
	}
}

// N, R: a parent unreachable for longer than a few retries still gets its notification once
// it is back, and meanwhile another parent's notifications are not held up.
func TestNotificationOutlastsParentOutage(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t)
	c := &flaky{FakeClient: f}
	clock := fakeclock.New(time.Now())
	m := asyncagentstest.NewManager(t, c, fastPoll, asyncagents.WithClock(clock))
	down, up := asyncagentstest.NewParent(t, f), asyncagentstest.NewParent(t, f)
	c.setDown(down.SessionID, true)

	stuck := asyncagentstest.Launch(t, m, down, "RUN:echo a")
	pollUntilDone(t, clock, m, stuck.ID)
	asyncagentstest.AwaitTask(t, m, stuck.ID, func(tk asyncagents.Task) bool {
		return len(tk.Notifications) == 1 && tk.Notifications[0].Attempts >= 1
	})
	other := asyncagentstest.Launch(t, m, up, "RUN:echo b")
	pollUntilDone(t, clock, m, other.ID)
	asyncagentstest.AwaitNotifications(t, f, up.SessionID, 1) // not behind the unreachable parent

	for range 30 { // 15 minutes of retries
		clock.Advance(30 * time.Second)
	}
	if got := asyncagentstest.Notifications(t, f, down.SessionID); len(got) != 0 {
		t.Fatalf("delivered while down: %q", got)
	}
	tk, _ := m.Get(stuck.ID)
	if n := tk.Notifications[0]; n.State != asyncagents.NotificationPending || n.Error == "" {
		t.Fatalf("while down: %+v", n)
	}
	c.setDown(down.SessionID, false)
	waitFor(t, 20*time.Second, func() bool {
		clock.Advance(time.Minute)
		return len(asyncagentstest.Notifications(t, f, down.SessionID)) == 1
	})
	asyncagentstest.AwaitTask(t, m, stuck.ID, func(tk asyncagents.Task) bool {
		return tk.Notifications[0].State == asyncagents.NotificationDelivered
	})
}

// pollUntilDone advances the clock (driving the status poll) until the task has ended.
func pollUntilDone(t *testing.T, clock *fakeclock.Clock, m *asyncagents.Manager, id string) {
	t.Helper()
	waitFor(t, 20*time.Second, func() bool {
		clock.Advance(time.Second)
		tk, err := m.Get(id)
		return err == nil && tk.Status.Terminal()
	})
}

// N: when the horizon has passed, the notification is marked failed on the task and the
// failure is logged.
func TestNotificationHorizon(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t)
	c := &flaky{FakeClient: f}
	clock := fakeclock.New(time.Now())
	logs := &logRecords{}
	m := asyncagentstest.NewManager(t, c, fastPoll, asyncagents.WithClock(clock), asyncagents.WithNotifyHorizon(time.Minute),
		asyncagents.WithLogger(slog.New(logs)))
	parent := asyncagentstest.NewParent(t, f)
	c.setDown(parent.SessionID, true)
	task := asyncagentstest.Launch(t, m, parent, "RUN:echo x")
	pollUntilDone(t, clock, m, task.ID)
	waitFor(t, 20*time.Second, func() bool {
		clock.Advance(10 * time.Second)
		tk, _ := m.Get(task.ID)
		return tk.Notifications[0].State == asyncagents.NotificationFailed
	})
	tk, _ := m.Get(task.ID)
	if n := tk.Notifications[0]; !strings.Contains(n.Error, "connection refused") || n.Attempts < 2 {
		t.Errorf("failed notification = %+v", n)
	}
	if !logs.contains("giving up") {
		t.Error("the failure was not logged")
	}
}

// T-19, N: a notification still pending when the Manager closes is delivered, once, by the
// next Manager on the same store.
func TestNotificationSurvivesClose(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t)
	c := &flaky{FakeClient: f}
	store := &asyncagents.MemoryStore{}
	parent := asyncagentstest.NewParent(t, f)
	c.setDown(parent.SessionID, true)
	m1, err := asyncagents.New(c, asyncagents.WithStore(store), asyncagents.WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	task := asyncagentstest.Launch(t, m1, parent, "RUN:echo later")
	asyncagentstest.AwaitTask(t, m1, task.ID, func(tk asyncagents.Task) bool {
		return len(tk.Notifications) == 1 && tk.Notifications[0].Attempts >= 1
	})
	if err := m1.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.setDown(parent.SessionID, false)
	m2 := asyncagentstest.NewManager(t, c, fastPoll, asyncagents.WithStore(store))
	got := asyncagentstest.AwaitNotifications(t, f, parent.SessionID, 1)
	asyncagentstest.AwaitTask(t, m2, task.ID, func(tk asyncagents.Task) bool {
		return tk.Notifications[0].State == asyncagents.NotificationDelivered
	})
	if got = asyncagentstest.Notifications(t, f, parent.SessionID); len(got) != 1 || !slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, "finished") }) {
		t.Fatalf("parent notifications: %q", got)
	}
}

// N: a parent's newest message is read once per wave of notifications, not once per
// notification: the others take their ids from the event stream and from the ids the Manager
// posted, in increasing order. After the stream reconnects, the next wave reads it again;
// once the parent has no active task and nothing to deliver, it is no longer followed.
func TestNotificationWaveReadsParentOnce(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	c := &readsClient{Client: f}
	m, caller := streamManager(t, c)
	wave := func(n int) []string {
		t.Helper()
		ids := make([]string, n)
		for i := range n {
			ids[i] = track(asyncagentstest.Launch(t, m, caller, "held "+strconv.Itoa(i)))
			asyncagentstest.AwaitBusy(t, f, sessionOf(ids[i]))
		}
		for _, id := range ids {
			asyncagentstest.Release(t, f, sessionOf(id), opencodetest.Text("done"))
		}
		return awaitNotified(t, m, ids)
	}
	posted := wave(5)
	if reads := c.readsOf(caller.SessionID); !slices.Equal(reads, []int{1}) {
		t.Errorf("reads of the parent in a wave of 5: %v, want one [1]", reads)
	}
	if got := asyncagentstest.Notifications(t, f, caller.SessionID); slices.Contains(posted, "") || len(got) != 5 {
		t.Errorf("notification ids %v, %d in the parent: want 5 posted, alone or merged", posted, len(got))
	}
	waitFor(t, 10*time.Second, func() bool { return asyncagents.FollowedParents(m) == 0 }) // once the wave is over

	f.DropEvents()
	waitFor(t, 10*time.Second, func() bool { return f.Streams() == 1 })
	wave(2)
	if reads := c.readsOf(caller.SessionID); !slices.Equal(reads, []int{1, 1}) {
		t.Errorf("reads of the parent after a second wave on a new connection: %v, want [1 1]", reads)
	}
}

// N on the real server: the notifications of a wave of run ends read the parent's newest
// message once, and each is in the parent once.
func TestRealServerNotificationWaveReadsParentOnce(t *testing.T) {
	t.Parallel()
	srv := shared.Get(t)
	c := &readsClient{Client: srv.Client()}
	// A wave window long enough that runs ending seconds apart on a loaded machine are one
	// wave still; the wave ends as soon as the last one does.
	m, caller := streamManager(t, c, asyncagents.WithWaveWindow(15*time.Second))
	const n = 3
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { // Launch at once from n goroutines: t.Fatal is the test goroutine's
			task, err := m.Launch(context.Background(), asyncagents.LaunchInput{Caller: caller, Description: "d", Agent: "general",
				Prompt: "SLEEP:1 (wave " + strconv.Itoa(i) + ")"})
			if err != nil {
				t.Error(err)
			}
			ids[i] = track(task)
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	posted := awaitNotified(t, m, ids)
	// The parent's newest message, once read, is known for a second (headTTL): notifications
	// posted later than that after the read (a loaded machine ends the runs, or posts, apart)
	// read it again.
	// A post that fails or times out (a loaded machine) forgets the head too, so the exact one
	// read is TestNotificationWaveReadsParentOnce's, on the fake server; here the wave must read
	// the parent fewer times than it has notifications.
	after := c.postsAfterFirstRead(caller.SessionID)
	if reads := c.readsOf(caller.SessionID); len(reads) >= n {
		t.Errorf("reads of the parent in a wave of %d posted %v after the first read: %v, want fewer than %d", n, after, reads, n)
	} else if !slices.Equal(reads, []int{1}) {
		t.Logf("the notifications were posted %v after the first read: reads %v", after, reads)
	}
	msgs, err := srv.Client().Messages(context.Background(), caller.SessionID, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range posted {
		if k := len(slices.DeleteFunc(slices.Clone(msgs), func(msg opencode.Message) bool { return msg.Info.ID != id })); k != 1 {
			t.Errorf("notification %s is in the parent %d times", id, k)
		}
	}
}

// awaitNotified waits until the first notification of each task is delivered, and returns
// their message ids in the order of ids.
func awaitNotified(t *testing.T, m *asyncagents.Manager, ids []string) []string {
	t.Helper()
	var posted []string
	for _, id := range ids {
		task := asyncagentstest.AwaitTask(t, m, id, func(tk asyncagents.Task) bool {
			return len(tk.Notifications) > 0 && tk.Notifications[0].State == asyncagents.NotificationDelivered
		})
		posted = append(posted, task.Notifications[0].MessageID)
	}
	return posted
}

// postCounting is a FakeClient that also has PostMessage, as an HTTPClient does; it counts
// the calls of PostMessage and of Prompt.
type postCounting struct {
	*opencodetest.FakeClient
	posts, prompts atomic.Int64
}

func (c *postCounting) PostMessage(ctx context.Context, id string, req opencode.PromptRequest) (string, error) {
	c.posts.Add(1)
	m, err := c.FakeClient.Prompt(ctx, id, req)
	if err != nil {
		return "", err
	}
	return m.Info.ID, nil
}

func (c *postCounting) Prompt(ctx context.Context, id string, req opencode.PromptRequest) (*opencode.Message, error) {
	c.prompts.Add(1)
	return c.FakeClient.Prompt(ctx, id, req)
}

// N, F: with a client that has PostMessage, what the Manager posts without reply (a
// notification, a forked task's inherited context) goes through it, not through Prompt.
func TestPostsWithoutReplyUsePostMessage(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t)
	caller := asyncagentstest.NewParent(t, f)
	c := &postCounting{FakeClient: f}
	m := asyncagentstest.NewManager(t, c, fastPoll, asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply))
	task := asyncagentstest.Launch(t, m, caller, "RUN:echo once")
	awaitNotified(t, m, []string{task.ID})
	if posts, prompts := c.posts.Load(), c.prompts.Load(); posts != 1 || prompts != 0 {
		t.Errorf("after a notification: PostMessage called %d times, Prompt %d; want 1 and 0", posts, prompts)
	}
	if got := asyncagentstest.Notifications(t, f, caller.SessionID); len(got) != 1 {
		t.Errorf("parent notifications = %q, want one", got)
	}
	forked, err := m.Launch(context.Background(), asyncagents.LaunchInput{Caller: caller, Description: "forked",
		Agent: "general", Prompt: "RUN:echo forked", Fork: true, ForkMode: asyncagents.ForkDigest})
	if err != nil {
		t.Fatal(err)
	}
	awaitNotified(t, m, []string{forked.ID})
	if posts, prompts := c.posts.Load(), c.prompts.Load(); posts != 3 || prompts != 0 {
		t.Errorf("after a forked task: PostMessage called %d times, Prompt %d; want 3 (its context and notification) and 0", posts, prompts)
	}
}
