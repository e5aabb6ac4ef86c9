package asyncagents_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/asyncagentstest"
	"github.com/asyncagents/asyncagents/internal/fakeclock"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// promptsClient records the prompt_async posts (the prompts that start a turn) per session,
// and loses the answers of the next lose of them to session loseIn after the server acted.
type promptsClient struct {
	opencode.Client
	mu      sync.Mutex
	prompts map[string][]opencode.PromptRequest
	lose    int
	loseIn  string
	fail    map[string]bool // sessions whose prompt_async fails
}

func (c *promptsClient) PromptAsync(ctx context.Context, id string, req opencode.PromptRequest) error {
	c.mu.Lock()
	if c.fail[id] {
		c.mu.Unlock()
		return errors.New("prompts: connection refused")
	}
	c.mu.Unlock()
	err := c.Client.PromptAsync(ctx, id, req)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		if c.prompts == nil {
			c.prompts = map[string][]opencode.PromptRequest{}
		}
		c.prompts[id] = append(c.prompts[id], req)
		if c.lose > 0 && id == c.loseIn {
			c.lose--
			return errors.New("prompts: connection reset after the request was sent")
		}
	}
	return err
}

// turnsOf returns the texts of the prompts posted to session id so far.
func (c *promptsClient) turnsOf(id string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, r := range c.prompts[id] {
		var s []string
		for _, p := range r.Parts {
			s = append(s, p.Text)
		}
		out = append(out, strings.Join(s, "\n"))
	}
	return out
}

func (c *promptsClient) setFail(id string, on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fail == nil {
		c.fail = map[string]bool{}
	}
	c.fail[id] = on
}

// launchHeld launches n held tasks of caller and waits until each runs.
func launchHeld(t *testing.T, m *asyncagents.Manager, f *opencodetest.FakeClient, caller asyncagents.Caller, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range n {
		task := asyncagentstest.Launch(t, m, caller, "held")
		ids[i] = track(task)
		asyncagentstest.AwaitBusy(t, f, task.SessionID)
	}
	return ids
}

// release releases the held runs of tasks or sessions ids (a task's session is found
// through m).
func release(t *testing.T, m *asyncagents.Manager, f *opencodetest.FakeClient, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if task, err := m.Get(id); err == nil {
			id = task.SessionID
		}
		asyncagentstest.Release(t, f, sessionOf(id), opencodetest.Text("done "+id))
	}
}

// turnStates returns the turn state of each task's first notification.
func turnStates(m *asyncagents.Manager, ids []string) []asyncagents.TurnState {
	var out []asyncagents.TurnState
	for _, id := range ids {
		tk, err := m.Get(id)
		if err != nil || len(tk.Notifications) == 0 {
			out = append(out, "?")
			continue
		}
		out = append(out, tk.Notifications[0].Turn)
	}
	return out
}

func allTurns(m *asyncagents.Manager, ids []string, want asyncagents.TurnState) bool {
	for _, s := range turnStates(m, ids) {
		if s != want {
			return false
		}
	}
	return true
}

// awaitTurns waits until the first notification of each task of ids is in turn state want.
func awaitTurns(t *testing.T, m *asyncagents.Manager, ids []string, want asyncagents.TurnState) {
	t.Helper()
	for _, id := range ids {
		asyncagentstest.AwaitTask(t, m, id, func(tk asyncagents.Task) bool {
			return len(tk.Notifications) > 0 && tk.Notifications[0].Turn == want
		})
	}
}

// N: runs of one parent that end together cost the parent one turn: each notification is
// posted without reply at once, then one prompt names them all; the notifications share its
// id (TurnID).
func TestWaveRunsEndingTogetherOneTurn(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	c := &promptsClient{Client: f}
	m, caller := streamManager(t, c)
	ids := launchHeld(t, m, f, caller, 3)
	release(t, m, f, ids...)
	awaitNotified(t, m, ids)
	awaitTurns(t, m, ids, asyncagents.TurnAsked)
	turns := c.turnsOf(caller.SessionID)
	if len(turns) != 1 {
		t.Fatalf("parent prompts = %q, want one turn", turns)
	}
	if !strings.Contains(turns[0], "3 of your background tasks reported") || !strings.Contains(turns[0], "No background task is running.") {
		t.Errorf("turn prompt = %q", turns[0])
	}
	if got := asyncagentstest.Notifications(t, f, caller.SessionID); len(got) != 3 {
		t.Errorf("parent has %d notifications, want 3: %q", len(got), got)
	}
	var turnIDs []string
	for _, id := range ids {
		tk, _ := m.Get(id)
		turnIDs = append(turnIDs, tk.Notifications[0].TurnID)
	}
	if turnIDs[0] == "" || slices.ContainsFunc(turnIDs, func(s string) bool { return s != turnIDs[0] }) {
		t.Errorf("turn ids = %q, want one shared", turnIDs)
	}
	time.Sleep(100 * time.Millisecond)
	if n := len(c.turnsOf(caller.SessionID)); n != 1 {
		t.Errorf("%d turn prompts after the wave, want 1", n)
	}
}

// N: while the parent has tasks running, its turn waits for the wave window after the
// newest run end; a run that ends alone gets its turn after the window, and the last run of
// the batch gets one at once.
func TestWaveTurnWaitsForTheWindow(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	c := &promptsClient{Client: f}
	const window = time.Second
	m, caller := streamManager(t, c, asyncagents.WithWaveWindow(window))
	ids := launchHeld(t, m, f, caller, 3)
	release(t, m, f, ids[0])
	awaitNotified(t, m, ids[:1])
	release(t, m, f, ids[1]) // within the window of the first
	awaitNotified(t, m, ids[1:2])
	delivered := time.Now()
	waitFor(t, 10*time.Second, func() bool { return len(c.turnsOf(caller.SessionID)) == 1 })
	if d := time.Since(delivered); d < window/2 {
		t.Errorf("turn %v after the second notification, want about the window (%v)", d, window)
	}
	turns := c.turnsOf(caller.SessionID)
	if !strings.Contains(turns[0], "2 of your background tasks reported") || !strings.Contains(turns[0], "Still running: ") {
		t.Errorf("first turn = %q", turns[0])
	}
	// The parent's turn runs (the fake holds every run) and ends before the last run does:
	// the last notification is then the parent's newest message, and asks for a turn.
	release(t, m, f, caller.SessionID)
	waitFor(t, 10*time.Second, func() bool { return !busy(context.Background(), f, caller.SessionID) })
	release(t, m, f, ids[2])
	awaitNotified(t, m, ids[2:])
	start := time.Now()
	waitFor(t, 10*time.Second, func() bool { return len(c.turnsOf(caller.SessionID)) == 2 })
	if d := time.Since(start); d > window/2 {
		t.Errorf("the batch's last turn took %v, want at once", d)
	}
	if turns := c.turnsOf(caller.SessionID); !strings.Contains(turns[1], "1 of your background tasks reported") {
		t.Errorf("second turn = %q", turns[1])
	}
}

// N: a parent that wrote a message after the notifications (its loop was running, or a
// prompt came) saw them in that turn: no turn prompt is posted and they are marked seen.
func TestWaveSeenByTheParentsOwnTurn(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	c := &promptsClient{Client: f}
	// The window runs on a fake clock: the user's prompt comes within it however slow the
	// machine is.
	clock := fakeclock.New(time.Now())
	m, caller := streamManager(t, c, asyncagents.WithWaveWindow(time.Second), asyncagents.WithClock(clock))
	ids := launchHeld(t, m, f, caller, 2)
	release(t, m, f, ids[0])
	awaitNotified(t, m, ids[:1])
	// The user writes to the parent: its turn has the notification in its context.
	if err := f.PromptAsync(context.Background(), caller.SessionID, opencode.PromptRequest{
		Parts: []opencode.TextPartInput{opencode.NewText("what next?")}}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Second)
	awaitTurns(t, m, ids[:1], asyncagents.TurnSeen)
	if turns := c.turnsOf(caller.SessionID); len(turns) != 0 {
		t.Errorf("turn prompts = %q, want none", turns)
	}
	release(t, m, f, caller.SessionID, ids[1])
	awaitTurns(t, m, ids[1:], asyncagents.TurnAsked)
	if turns := c.turnsOf(caller.SessionID); len(turns) != 1 || !strings.Contains(turns[0], "1 of your") {
		t.Errorf("turn prompts = %q, want one for the second task", turns)
	}
}

// N, R: a turn prompt whose answer was lost after the server stored it is found by its id
// before the retry and not posted again.
func TestWaveTurnAnswerLostIsNotDuplicated(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t)
	caller := asyncagentstest.NewParent(t, f)
	c := &promptsClient{Client: f, lose: 1, loseIn: caller.SessionID}
	m := asyncagentstest.NewManager(t, c, fastPoll)
	task := asyncagentstest.Launch(t, m, caller, "RUN:echo once")
	awaitTurns(t, m, []string{task.ID}, asyncagents.TurnAsked)
	tk, _ := m.Get(task.ID)
	if n := tk.Notifications[0]; n.Attempts != 2 || n.TurnID == "" { // the notification, then the lost turn
		t.Errorf("notification = %+v, want two attempts and a turn id", n)
	}
	if turns := countTurnPrompts(t, f, caller.SessionID); turns != 1 || len(c.turnsOf(caller.SessionID)) != 1 {
		t.Errorf("turn prompts in the parent = %d (posted %d), want 1", turns, len(c.turnsOf(caller.SessionID)))
	}
}

// N, T-19: a turn still owed when the Manager closes (the parent was unreachable) is asked
// for, once, by the next Manager on the same store.
func TestWaveTurnSurvivesClose(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t)
	caller := asyncagentstest.NewParent(t, f)
	c := &promptsClient{Client: f}
	c.setFail(caller.SessionID, true)
	store := &asyncagents.MemoryStore{}
	m1, err := asyncagents.New(c, asyncagents.WithStore(store), asyncagents.WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	task := asyncagentstest.Launch(t, m1, caller, "RUN:echo later")
	asyncagentstest.AwaitTask(t, m1, task.ID, func(tk asyncagents.Task) bool {
		return len(tk.Notifications) == 1 && tk.Notifications[0].Attempts >= 2 && tk.Notifications[0].Turn == asyncagents.TurnOwed
	})
	if err := m1.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.setFail(caller.SessionID, false)
	m2 := asyncagentstest.NewManager(t, c, fastPoll, asyncagents.WithStore(store))
	awaitTurns(t, m2, []string{task.ID}, asyncagents.TurnAsked)
	if got := asyncagentstest.Notifications(t, f, caller.SessionID); len(got) != 1 {
		t.Errorf("parent notifications = %q, want 1", got)
	}
	if turns := c.turnsOf(caller.SessionID); len(turns) != 1 {
		t.Errorf("turn prompts = %q, want 1", turns)
	}
}

// N: under NotifyPerRun each notification is its own prompt; under NotifyNoReply none asks
// for a turn.
func TestNotifyPolicies(t *testing.T) {
	for _, tc := range []struct {
		policy  asyncagents.NotifyPolicy
		prompts int
	}{{asyncagents.NotifyPerRun, 2}, {asyncagents.NotifyNoReply, 0}} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
			c := &promptsClient{Client: f}
			m, caller := streamManager(t, c, asyncagents.WithNotifyPolicy(tc.policy))
			ids := launchHeld(t, m, f, caller, 2)
			release(t, m, f, ids...)
			awaitNotified(t, m, ids)
			time.Sleep(100 * time.Millisecond)
			if n := len(c.turnsOf(caller.SessionID)); n != tc.prompts {
				t.Errorf("%d prompts to the parent, want %d", n, tc.prompts)
			}
			if !allTurns(m, ids, "") {
				t.Errorf("turn states = %q, want none", turnStates(m, ids))
			}
		})
	}
}

// Bad policies and windows are refused by New.
func TestNotifyPolicyOptionsValidated(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t)
	for _, o := range []asyncagents.Option{asyncagents.WithNotifyPolicy(7), asyncagents.WithWaveWindow(-time.Second),
		asyncagents.WithWaveWindow(2 * asyncagents.MaxWaveWindow)} {
		if _, err := asyncagents.New(f, o); !errors.Is(err, asyncagents.ErrInvalidInput) {
			t.Errorf("New = %v, want ErrInvalidInput", err)
		}
	}
	var p asyncagents.NotifyPolicy
	if err := p.UnmarshalText([]byte("sometimes")); !errors.Is(err, asyncagents.ErrInvalidInput) || p != asyncagents.NotifyPerWave {
		t.Errorf("UnmarshalText(sometimes) = %v, policy %v", err, p)
	}
	for _, name := range []string{"wave", "run", "none"} {
		if err := p.UnmarshalText([]byte(name)); err != nil || p.String() != name {
			t.Errorf("UnmarshalText(%s) = %v, policy %v", name, err, p)
		}
	}
}

// N on the real server: three runs of one parent that end together cost the parent's
// model one request, whose context holds the three notifications (posted without reply) and
// the turn prompt naming them; each is in the parent once. The first notification's post is
// held until the three runs have ended, so the others are merged into one message (with the
// first too, when it came due last): the model reads each entry of it.
func TestRealServerWaveOneTurn(t *testing.T) {
	t.Parallel()
	srv := shared.Get(t)
	c := srv.Client()
	gated := &concurrentPrompts{Client: c, gate: make(chan struct{})}
	m, caller := streamManager(t, gated)
	tag := "wave-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	const n = 3
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			task, err := m.Launch(context.Background(), asyncagents.LaunchInput{Caller: caller, Description: tag,
				Agent: "general", Prompt: "SLEEP:1 (" + tag + " " + strconv.Itoa(i) + ")"})
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = track(task)
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	waitRunEndsRecorded(t, m, ids...)
	close(gated.gate)
	awaitNotified(t, m, ids)
	gated.mu.Lock()
	carried := slices.Clone(gated.carried)
	gated.mu.Unlock()
	if sumOf(carried) != n || slices.Max(carried) < n-1 {
		t.Errorf("notifications per message posted: %v, want %d, at least %d in one", carried, n, n-1)
	}
	awaitTurns(t, m, ids, asyncagents.TurnAsked)
	var turns []opencodetest.Request
	waitFor(t, 30*time.Second, func() bool {
		turns = turns[:0]
		for _, r := range srv.Model.Requests() {
			if body := string(r.Body); strings.Contains(body, tag) && strings.Contains(body, "reported since your last turn") {
				turns = append(turns, r)
			}
		}
		return len(turns) >= 1 && !busy(context.Background(), c, caller.SessionID)
	})
	if len(turns) != 1 {
		t.Fatalf("the parent's model got %d requests, want 1", len(turns))
	}
	if body := string(turns[0].Body); strings.Count(body, "Agent \\\""+tag+"\\\" finished") != n {
		t.Errorf("the turn's request holds %d notifications, want %d", strings.Count(body, "Agent \\\""+tag+"\\\" finished"), n)
	}
	msgs, err := c.Messages(context.Background(), caller.SessionID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := asyncagentstest.Notifications(t, c, caller.SessionID); len(got) != n {
		t.Errorf("parent notifications = %d, want %d", len(got), n)
	}
	var users, assistants int
	for _, msg := range msgs {
		switch msg.Info.Role {
		case opencode.RoleUser:
			users++
		case opencode.RoleAssistant:
			assistants++
		}
	}
	if users < 2 || users > n+1 || assistants != 1 { // the prompt and the turn's, and the notifications, merged or not
		t.Errorf("parent has %d user and %d assistant messages, want 2 to %d and 1", users, assistants, n+1)
	}
}

// N: while runs of the parent keep ending within the wave window of each other, its turn
// waits at most 5 windows after the first notification it covers.
func TestWaveTurnWaitsAtMostFiveWindows(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	c := &promptsClient{Client: f}
	const window = 200 * time.Millisecond
	m, caller := streamManager(t, c, asyncagents.WithWaveWindow(window))
	ids := launchHeld(t, m, f, caller, 21) // the last one keeps running
	start := time.Now()
	for _, id := range ids[:20] { // one run end every 100 ms for 2 s: never a quiet window
		release(t, m, f, id)
		time.Sleep(window / 2)
		if len(c.turnsOf(caller.SessionID)) > 0 {
			break
		}
	}
	if len(c.turnsOf(caller.SessionID)) == 0 {
		t.Fatalf("no turn within %v of run ends that kept coming, want one after about %v", time.Since(start), 5*window)
	}
	if d := time.Since(start); d < 4*window {
		t.Errorf("turn after %v, want about %v", d, 5*window)
	}
}

// waitRunEndsRecorded waits until m has recorded the notification of a run end of each task of ids.
func waitRunEndsRecorded(t *testing.T, m *asyncagents.Manager, ids ...string) {
	t.Helper()
	for _, id := range ids {
		asyncagentstest.AwaitTask(t, m, id, func(tk asyncagents.Task) bool { return len(tk.Notifications) > 0 })
	}
}

// concurrentPrompts records the most Prompt calls (posts without reply) in flight at once
// and the notifications each carried; a call waits until gate, when not nil, is closed.
type concurrentPrompts struct {
	opencode.Client
	gate      chan struct{}
	mu        sync.Mutex
	now, most int
	carried   []int // notifications per call: a visible part and a hint each
}

func (c *concurrentPrompts) Prompt(ctx context.Context, id string, req opencode.PromptRequest) (*opencode.Message, error) {
	c.mu.Lock()
	c.now++
	c.most = max(c.most, c.now)
	c.carried = append(c.carried, len(req.Parts)/2)
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.now--
		c.mu.Unlock()
	}()
	if c.gate != nil {
		<-c.gate
	}
	time.Sleep(20 * time.Millisecond) // a server's answer
	return c.Client.Prompt(ctx, id, req)
}

// N: the notifications of a burst under one parent, posted without reply, are merged: those
// due together share one message, at most 128 to a message and up to 8 messages at once, and
// each run end is one entry in one message.
func TestWaveNotificationsMerged(t *testing.T) {
	const n = 300
	carried, most := mergedBurst(t, n, "d")
	if want := 1 + (n-1+127)/128; len(carried) > want || slices.Max(carried) > 128 {
		t.Errorf("notifications per message posted: %v; want at most %d messages of at most 128", carried, want)
	}
	if most < 2 || most > 8 {
		t.Errorf("at most %d messages were posted at once, want 2 to 8", most)
	}
}

// mergedBurst launches n held runs under one parent with description, ends them together and
// holds the first notification's post until every run has ended, so that the others are due
// together. It checks that each run end is one entry in the parent and that the tasks name
// the messages posted, and returns the notifications each post carried and the most posts
// in flight at once.
func mergedBurst(t *testing.T, n int, description string) (carried []int, most int) {
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	c := &concurrentPrompts{Client: f, gate: make(chan struct{})}
	m, caller := streamManager(t, c)
	ids := make([]string, n)
	for i := range n {
		task, err := m.Launch(context.Background(), asyncagents.LaunchInput{Caller: caller, Description: description, Agent: "general", Prompt: "held"})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = track(asyncagentstest.Started(t, m, task))
		asyncagentstest.AwaitBusy(t, f, sessionOf(ids[i]))
	}
	release(t, m, f, ids...)
	waitRunEndsRecorded(t, m, ids...)
	close(c.gate)
	posted := awaitNotified(t, m, ids)
	c.mu.Lock()
	most, carried = c.most, slices.Clone(c.carried)
	c.mu.Unlock()
	if got := asyncagentstest.Notifications(t, f, caller.SessionID); len(got) != n {
		t.Errorf("parent has %d notifications, want %d", len(got), n)
	}
	slices.Sort(posted)
	if distinct := len(slices.Compact(posted)); distinct != len(carried) {
		t.Errorf("tasks name %d messages, %d were posted", distinct, len(carried))
	}
	return carried, most
}

// swallowClient acknowledges the next swallow prompt_async posts to session in without
// passing them on: OpenCode was seen to answer 204 and never store the message.
type swallowClient struct {
	opencode.Client
	mu      sync.Mutex
	in      string
	swallow int
	posted  int
}

func (c *swallowClient) PromptAsync(ctx context.Context, id string, req opencode.PromptRequest) error {
	c.mu.Lock()
	if id == c.in {
		c.posted++
		if c.swallow > 0 {
			c.swallow--
			c.mu.Unlock()
			return nil
		}
	}
	c.mu.Unlock()
	return c.Client.PromptAsync(ctx, id, req)
}

// N, R: a turn prompt the server acknowledged and did not store is asked again while the
// parent still has a task running: the parent's newest message is read anew, not taken to be
// the prompt that is not there.
func TestWaveTurnNotStoredIsAskedAgain(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	c := &swallowClient{Client: f, swallow: 1}
	m, caller := streamManager(t, c, asyncagents.WithWaveWindow(50*time.Millisecond), asyncagents.WithPollInterval(50*time.Millisecond))
	asyncagents.SetLossGrace(m, 300*time.Millisecond)
	c.mu.Lock()
	c.in = caller.SessionID
	c.mu.Unlock()
	ids := launchHeld(t, m, f, caller, 2) // the second keeps running
	release(t, m, f, ids[0])
	awaitNotified(t, m, ids[:1])
	waitFor(t, 10*time.Second, func() bool { return countTurnPrompts(t, f, caller.SessionID) == 1 })
	awaitTurns(t, m, ids[:1], asyncagents.TurnAsked)
	c.mu.Lock()
	posted := c.posted
	c.mu.Unlock()
	if posted != 2 {
		t.Errorf("turn prompts posted = %d, want 2 (the one not stored, then the one stored)", posted)
	}
}

// N, R: when a retry finds that an earlier turn prompt landed after all, that prompt covers
// the notifications posted before it; one delivered during the retry's backoff still gets a
// turn of its own.
func TestWaveTurnFoundCoversOnlyOlderNotifications(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	c := &promptsClient{Client: f, lose: 1}
	m, caller := streamManager(t, c, asyncagents.WithWaveWindow(20*time.Millisecond))
	c.mu.Lock()
	c.loseIn = caller.SessionID
	c.mu.Unlock()
	ids := launchHeld(t, m, f, caller, 2)
	release(t, m, f, ids[0])
	awaitNotified(t, m, ids[:1])
	waitFor(t, 10*time.Second, func() bool { return len(c.turnsOf(caller.SessionID)) == 1 })
	release(t, m, f, ids[1]) // during the lost turn prompt's backoff
	awaitNotified(t, m, ids[1:])
	waitFor(t, 10*time.Second, func() bool {
		s := turnStates(m, ids)
		return s[0] == asyncagents.TurnAsked && (s[1] == asyncagents.TurnAsked || s[1] == asyncagents.TurnSeen)
	})
	a, _ := m.Get(ids[0])
	b, _ := m.Get(ids[1])
	na, nb := a.Notifications[0], b.Notifications[0]
	if na.TurnID >= nb.MessageID {
		t.Errorf("first: message %s turn %s; second: message %s: want the first's turn prompt before the second", na.MessageID, na.TurnID, nb.MessageID)
	}
	// The second was asked for by a prompt of its own, or seen by the turn the first's
	// prompt started (the fake's parent may write its reply after it): never counted as
	// asked by the first's.
	if nb.TurnID != "" && nb.TurnID <= nb.MessageID {
		t.Errorf("second: message %s, turn %s (%s): want a turn prompt after it", nb.MessageID, nb.TurnID, nb.Turn)
	}
	if turns := c.turnsOf(caller.SessionID); nb.Turn == asyncagents.TurnAsked && len(turns) != 2 {
		t.Errorf("turn prompts = %d, want 2", len(turns))
	}
}
