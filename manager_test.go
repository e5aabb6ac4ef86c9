package asyncagents_test

import (
	"context"
	"errors"
	"log/slog"
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

// Tests of the Manager on the in-memory OpenCode of opencodetest: races, ordering, panics
// and timeouts that the real server cannot be made to produce on demand.

// newSession creates a session on c's server.
func newSession(t *testing.T, c opencode.Client, title string) *opencode.Session {
	t.Helper()
	s, err := c.CreateSession(context.Background(), opencode.CreateSessionRequest{Title: title})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// T-18, R: Resume against a task whose run is ending: no data race, and every call either
// resumes or says the task is busy.
func TestResumeRacesCompletion(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	m := asyncagentstest.NewManager(t, f, fastPoll)
	caller := asyncagentstest.NewParent(t, f)
	task := asyncagentstest.Launch(t, m, caller, "first")
	asyncagentstest.Release(t, f, task.SessionID, opencodetest.Text("one"))
	asyncagentstest.Await(t, m, caller, task.ID)
	for round := range 20 {
		if _, err := m.Resume(context.Background(), caller, task.ID, "again"); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			_ = f.Release(task.SessionID, opencodetest.Text("done"))
		}()
		go func() {
			defer wg.Done()
			for range 50 {
				_, err := m.Resume(context.Background(), caller, task.ID, "racing")
				if err == nil {
					_ = f.Release(task.SessionID, opencodetest.Text("raced"))
					return
				}
				if !errors.Is(err, asyncagents.ErrTaskBusy) {
					t.Errorf("Resume = %v, want nil or ErrTaskBusy", err)
					return
				}
			}
		}()
		wg.Wait()
		asyncagentstest.Await(t, m, caller, task.ID)
	}
}

// blockingStore blocks the first Save of a completed, unretrieved task until release is
// closed.
type blockingStore struct {
	asyncagents.MemoryStore
	once    sync.Once
	blocked chan struct{}
	release chan struct{}
}

func (s *blockingStore) Save(ctx context.Context, t asyncagents.Task) error {
	if t.Status == asyncagents.StatusCompleted && t.Retrieved.IsZero() {
		s.once.Do(func() {
			close(s.blocked)
			<-s.release
		})
	}
	return s.MemoryStore.Save(ctx, t)
}

// T-19, R: saves of one task never let an older record overwrite a newer one: the record
// marked retrieved by Output stays the stored one, even when the completion's save is slow.
func TestStoreSavesInOrder(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	store := &blockingStore{blocked: make(chan struct{}), release: make(chan struct{})}
	m := asyncagentstest.NewManager(t, f, fastPoll, asyncagents.WithStore(store), asyncagents.WithNotifications(false))
	caller := asyncagentstest.NewParent(t, f)
	task := asyncagentstest.Launch(t, m, caller, "work")
	asyncagentstest.Release(t, f, task.SessionID, opencodetest.Text("result"))
	<-store.blocked // the completion's save is in flight
	out := make(chan asyncagents.Output, 1)
	go func() {
		o, err := m.Output(context.Background(), caller, task.ID, asyncagents.OutputOptions{})
		if err != nil {
			t.Error(err)
		}
		out <- o
	}()
	select { // Output may wait for the save in flight; give it the chance to overtake
	case <-out:
		t.Log("Output returned before the slow save finished")
	case <-time.After(100 * time.Millisecond):
	}
	close(store.release)
	waitFor(t, 10*time.Second, func() bool {
		stored, _ := store.Load(context.Background())
		return len(stored) == 1 && !stored[0].Retrieved.IsZero()
	})
	stored, _ := store.Load(context.Background())
	if stored[0].Status != asyncagents.StatusCompleted || stored[0].Result != "result" {
		t.Errorf("stored = %+v", stored[0])
	}
}

// T-14, T-10: a blocked Output on a task that Clear removes returns ErrTaskNotFound.
func TestBlockedOutputOfClearedTask(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	m := asyncagentstest.NewManager(t, f, fastPoll)
	caller := asyncagentstest.NewParent(t, f)
	task := asyncagentstest.Launch(t, m, caller, "held")
	errc := make(chan error, 1)
	go func() {
		_, err := m.Output(context.Background(), caller, task.ID, asyncagents.OutputOptions{Block: true, Timeout: time.Minute})
		errc <- err
	}()
	if _, err := m.Clear(context.Background(), caller); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, asyncagents.ErrTaskNotFound) {
		t.Fatalf("blocked Output after Clear = %v, want ErrTaskNotFound", err)
	}
}

// gatedClient holds CreateSession until gate is closed.
type gatedClient struct {
	*opencodetest.FakeClient
	entered chan struct{}
	gate    chan struct{}
}

func (c *gatedClient) CreateSession(ctx context.Context, req opencode.CreateSessionRequest) (*opencode.Session, error) {
	if req.ParentID != "" {
		close(c.entered)
		<-c.gate
	}
	return c.FakeClient.CreateSession(ctx, req)
}

// T-20: a Launch racing Close records the session it created; Close waits for it, and every
// operation afterwards is ErrClosed (Get included).
func TestLaunchRacingClose(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t)
	c := &gatedClient{FakeClient: f, entered: make(chan struct{}), gate: make(chan struct{})}
	store := &asyncagents.MemoryStore{}
	m, err := asyncagents.New(c, asyncagents.WithStore(store))
	if err != nil {
		t.Fatal(err)
	}
	caller := asyncagentstest.NewParent(t, f)
	launched := make(chan asyncagents.Task, 1)
	go func() {
		task, err := m.Launch(context.Background(), asyncagents.LaunchInput{Caller: caller, Description: "d", Agent: "general", Prompt: "p"})
		if err != nil {
			t.Error(err)
		}
		launched <- task
	}()
	<-c.entered
	closed := make(chan error, 1)
	go func() { closed <- m.Close(context.Background()) }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a Launch was creating its session", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(c.gate)
	task := <-launched
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	stored, _ := store.Load(context.Background())
	if len(stored) != 1 || stored[0].ID != task.ID || task.ID == "" {
		t.Fatalf("stored %+v, launched %+v", stored, task)
	}
	if _, err := m.Get(task.ID); !errors.Is(err, asyncagents.ErrClosed) {
		t.Errorf("Get after Close = %v", err)
	}
	if _, err := m.Launch(context.Background(), asyncagents.LaunchInput{Caller: caller, Description: "d", Agent: "general", Prompt: "p"}); !errors.Is(err, asyncagents.ErrClosed) {
		t.Errorf("Launch after Close = %v", err)
	}
	if _, err := m.List(caller, ""); !errors.Is(err, asyncagents.ErrClosed) {
		t.Errorf("List after Close = %v", err)
	}
}

// panicky panics in the methods named in what, once each.
type panicky struct {
	*opencodetest.FakeClient
	status, events atomic.Bool
	messages       atomic.Bool // reading the messages of a session whose prompt says BOOM panics, once
}

func (p *panicky) Messages(ctx context.Context, id string, limit int) ([]opencode.Message, error) {
	msgs, err := p.FakeClient.Messages(ctx, id, limit)
	for _, msg := range msgs {
		for _, part := range msg.Parts {
			if msg.Info.Role == opencode.RoleUser && strings.Contains(part.Text, "BOOM") && p.messages.CompareAndSwap(true, false) {
				panic("boom in Messages")
			}
		}
	}
	return msgs, err
}

func (p *panicky) SessionStatus(ctx context.Context, dir string) (map[string]opencode.SessionStatus, error) {
	if p.status.CompareAndSwap(true, false) {
		panic("boom in SessionStatus")
	}
	return p.FakeClient.SessionStatus(ctx, dir)
}

// Events keeps the message.updated events from the Manager, so that every run end is read
// (a reply would be decided from the events).
func (p *panicky) Events(ctx context.Context) (opencode.EventStream, error) {
	if p.events.CompareAndSwap(true, false) {
		panic("boom in Events")
	}
	s, err := p.FakeClient.Events(ctx)
	if err != nil {
		return nil, err
	}
	return droppingStream{EventStream: s, drop: func(ev opencode.Event) bool { return ev.Type == opencode.EventMessageUpdated }}, nil
}

// logRecords collects log messages with their attributes (but stacks).
type logRecords struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecords) Handle(_ context.Context, r slog.Record) error {
	msg := r.Message
	r.Attrs(func(a slog.Attr) bool {
		if a.Key != "stack" {
			msg += " " + a.String()
		}
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, msg)
	return nil
}
func (l *logRecords) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecords) WithGroup(string) slog.Handler      { return l }
func (l *logRecords) contains(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.msgs {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}

// Panic policy: a panic in the Client on a Manager goroutine never reaches the host. While
// reconciling a task it ends that task in error; elsewhere it is logged and work goes on.
func TestPanicsInBackgroundWork(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	p := &panicky{FakeClient: f}
	p.events.Store(true)
	p.status.Store(true)
	logs := &logRecords{}
	m := asyncagentstest.NewManager(t, p, asyncagents.WithLogger(slog.New(logs)), asyncagents.WithPollInterval(20*time.Millisecond))
	caller := asyncagentstest.NewParent(t, f)

	waitFor(t, 10*time.Second, func() bool { return logs.contains("panic in the event stream") })
	slow := asyncagentstest.Launch(t, m, caller, "slow") // polled while it is held
	waitFor(t, 10*time.Second, func() bool { return logs.contains("panic in the status poll") })
	if err := f.Release(slow.SessionID); err != nil {
		t.Fatal(err)
	}
	if ok := asyncagentstest.Await(t, m, caller, slow.ID); ok.Status != asyncagents.StatusCompleted {
		t.Fatalf("after recovered panics: %+v", ok)
	}

	p.messages.Store(true)
	boom := asyncagentstest.Launch(t, m, caller, "BOOM")
	if err := f.Release(boom.SessionID); err != nil {
		t.Fatal(err)
	}
	failed := asyncagentstest.Await(t, m, caller, boom.ID)
	if failed.Status != asyncagents.StatusError || !strings.Contains(failed.Error, "panic while reconciling: boom in Messages") {
		t.Fatalf("task whose reconcile panicked: %s %q", failed.Status, failed.Error)
	}
}

// T-10: a blocking Output without a timeout waits DefaultOutputTimeout, a longer one is
// clamped to MaxOutputTimeout, and a timeout is not an error; through the tool, timeout 0 is
// the default too.
func TestOutputTimeoutDefaultAndClamp(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	clock := fakeclock.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	m := asyncagentstest.NewManager(t, f, fastPoll, asyncagents.WithClock(clock))
	caller := asyncagentstest.NewParent(t, f)
	task := asyncagentstest.Launch(t, m, caller, "held")
	output := tools(m)["asyncagents_output"]
	for _, tc := range []struct {
		args string
		want time.Duration
	}{
		{`{"task_id":"` + task.ID + `","block":true}`, asyncagents.DefaultOutputTimeout},
		{`{"task_id":"` + task.ID + `","block":true,"timeout":0}`, asyncagents.DefaultOutputTimeout},
		{`{"task_id":"` + task.ID + `","block":true,"timeout":5000}`, asyncagents.MaxOutputTimeout},
		{`{"task_id":"` + task.ID + `","block":true,"timeout":1.5}`, 1500 * time.Millisecond},
	} {
		done := make(chan string, 1)
		go func() {
			out, err := output.Handler(context.Background(), caller, []byte(tc.args))
			if err != nil {
				t.Error(err)
			}
			done <- out
		}()
		stop := make(chan struct{})
		if !clock.WaitFor(tc.want, stop) {
			t.Fatal("no timer")
		}
		clock.Advance(tc.want)
		if out := <-done; !strings.Contains(out, "Timed out waiting; the task is still running.") {
			t.Errorf("%s: %s", tc.args, out)
		}
	}
}

// T-17: with WithNestingDepth(2) a task may launch tasks, whose sessions are denied the
// tools; a launch below that is refused, also by a new Manager on the same store.
func TestNestingDepth(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t)
	store := &asyncagents.MemoryStore{}
	m := asyncagentstest.NewManager(t, f, fastPoll, asyncagents.WithNestingDepth(2), asyncagents.WithStore(store))
	parent := asyncagentstest.NewParent(t, f)
	rules := func(id string) []opencode.PermissionRule {
		s, err := f.GetSession(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		return s.Permission
	}
	top := asyncagentstest.Launch(t, m, parent, "RUN:echo top")
	if top.Depth != 1 || len(rules(top.SessionID)) != 0 {
		t.Fatalf("depth-1 task: depth %d, rules %v; want no rule", top.Depth, rules(top.SessionID))
	}
	child := asyncagentstest.Launch(t, m, asyncagents.Caller{SessionID: top.SessionID, Agent: "general"}, "RUN:echo child")
	deny := []opencode.PermissionRule{ // the launch tools: this bridge's, any bridge's, OpenCode's
		{Permission: "asyncagents_*", Pattern: "*", Action: "deny"},
		{Permission: "*_task", Pattern: "*", Action: "deny"},
		{Permission: "task", Pattern: "*", Action: "deny"},
	}
	if child.Depth != 2 || !slices.Equal(rules(child.SessionID), deny) {
		t.Fatalf("depth-2 task: depth %d, rules %v; want %v", child.Depth, rules(child.SessionID), deny)
	}
	tooDeep := asyncagents.LaunchInput{Caller: asyncagents.Caller{SessionID: child.SessionID}, Description: "d", Agent: "general", Prompt: "p"}
	if _, err := m.Launch(context.Background(), tooDeep); !errors.Is(err, asyncagents.ErrNestingDepth) {
		t.Fatalf("launch at depth 3 = %v, want ErrNestingDepth", err)
	}
	asyncagentstest.Await(t, m, asyncagents.Caller{SessionID: top.SessionID}, child.ID)
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	m2 := asyncagentstest.NewManager(t, f, fastPoll, asyncagents.WithNestingDepth(2), asyncagents.WithStore(store))
	if _, err := m2.Launch(context.Background(), tooDeep); !errors.Is(err, asyncagents.ErrNestingDepth) {
		t.Fatalf("after a restart: launch at depth 3 = %v, want ErrNestingDepth", err)
	}
	m3 := asyncagentstest.NewManager(t, f, fastPoll)
	if _, err := m3.Launch(context.Background(), asyncagents.LaunchInput{Caller: asyncagents.Caller{SessionID: top.SessionID},
		Description: "d", Agent: "general", Prompt: "p"}); err != nil {
		t.Fatalf("a Manager that does not know top as a task: %v", err)
	}
}

// T-18: with WithFollowUpQueue(1) a follow-up for a busy task is queued, stored, and sent
// when the run ends; one more is ErrTaskBusy; a cancel drops the queue.
func TestFollowUpQueue(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	store := &asyncagents.MemoryStore{}
	m := asyncagentstest.NewManager(t, f, fastPoll, asyncagents.WithFollowUpQueue(1), asyncagents.WithStore(store))
	caller := asyncagentstest.NewParent(t, f)
	task := asyncagentstest.Launch(t, m, caller, "first")
	reply, err := tools(m)["asyncagents_task"].Handler(context.Background(), caller, []byte(`{"resume":"`+task.ID+`","prompt":"second"}`))
	if err != nil || !strings.Contains(reply, "the follow-up is queued (1 waiting)") {
		t.Fatalf("queued reply = %q, %v", reply, err)
	}
	if _, err := m.Resume(context.Background(), caller, task.ID, "third"); !errors.Is(err, asyncagents.ErrTaskBusy) {
		t.Fatalf("second follow-up = %v, want ErrTaskBusy", err)
	}
	if stored, _ := store.Load(context.Background()); len(stored) != 1 || !slices.Equal(stored[0].FollowUps, []string{"second"}) {
		t.Fatalf("stored = %+v", stored)
	}
	asyncagentstest.Release(t, f, task.SessionID, opencodetest.Text("one"))
	asyncagentstest.AwaitTask(t, m, task.ID, func(tk asyncagents.Task) bool {
		return tk.ResumeCount == 1 && tk.Status == asyncagents.StatusResumed && len(tk.FollowUps) == 0
	})
	asyncagentstest.Release(t, f, task.SessionID, opencodetest.Text("two"))
	if got := asyncagentstest.Await(t, m, caller, task.ID); got.Result != "two" || got.ResumeCount != 1 {
		t.Fatalf("after the follow-up: %+v", got)
	}
	asyncagentstest.AwaitNotifications(t, f, caller.SessionID, 2)

	// A cancel drops what was queued.
	if _, err := m.Resume(context.Background(), caller, task.ID, "third"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Resume(context.Background(), caller, task.ID, "fourth"); err != nil {
		t.Fatal(err)
	}
	got, err := m.Cancel(context.Background(), caller, task.ID)
	if err != nil || got.Status != asyncagents.StatusCancelled || len(got.FollowUps) != 0 {
		t.Fatalf("cancel = %+v, %v", got, err)
	}
}

// T-22: a run past its deadline, or without activity for the stale timeout, is aborted and
// ends in error naming the limit; the parent is notified once.
func TestWatchdogsAbortTheRun(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	clock := fakeclock.New(time.Now())
	m := asyncagentstest.NewManager(t, f, fastPoll, asyncagents.WithClock(clock), asyncagents.WithStaleTimeout(5*time.Minute))
	caller := asyncagentstest.NewParent(t, f)
	late, err := m.Launch(context.Background(), asyncagents.LaunchInput{Caller: caller, Description: "late", Agent: "general",
		Prompt: "held", Deadline: time.Minute})
	if err != nil || late.Deadline != time.Minute {
		t.Fatalf("launch = %+v, %v", late, err)
	}
	quiet := asyncagentstest.Launch(t, m, caller, "held too")
	advance := func(d time.Duration) {
		for step := time.Duration(0); step < d; step += 10 * time.Second {
			clock.Advance(10 * time.Second)
		}
	}
	advance(2 * time.Minute)
	waitFor(t, 10*time.Second, func() bool {
		clock.Advance(100 * time.Millisecond) // the poll's next tick
		tk, _ := m.Get(late.ID)
		return tk.Status == asyncagents.StatusError
	})
	if tk, _ := m.Get(late.ID); !strings.Contains(tk.Error, "deadline of 1m0s") {
		t.Errorf("deadline error = %q", tk.Error)
	}
	if tk, _ := m.Get(quiet.ID); tk.Status != asyncagents.StatusRunning {
		t.Fatalf("quiet task ended early: %s %q", tk.Status, tk.Error)
	}
	advance(3 * time.Minute)
	waitFor(t, 10*time.Second, func() bool {
		clock.Advance(10 * time.Second) // past the stale timeout since the task's last activity
		tk, _ := m.Get(quiet.ID)
		return tk.Status == asyncagents.StatusError
	})
	if tk, _ := m.Get(quiet.ID); !strings.Contains(tk.Error, "stale: no activity for 5m") {
		t.Errorf("stale error = %q", tk.Error)
	}
	for _, id := range []string{late.ID, quiet.ID} {
		waitFor(t, 10*time.Second, func() bool { return !busy(context.Background(), f, id) })
	}
	asyncagentstest.AwaitNotifications(t, f, caller.SessionID, 2)
}

// T-4a: a task runs in its parent session's directory, whatever the client's default: its
// session is created there, its agent is checked against that directory's agents, and the
// poll asks that directory's status.
func TestLaunchInParentDirectory(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t)
	c := &countingClient{Client: f}
	m := asyncagentstest.NewManager(t, c, asyncagents.WithPollInterval(20*time.Millisecond))
	parent, err := f.CreateSession(context.Background(), opencode.CreateSessionRequest{Directory: "/work/other", Title: "p"})
	if err != nil {
		t.Fatal(err)
	}
	caller := asyncagents.Caller{SessionID: parent.ID}
	for _, fork := range []bool{false, true} {
		task, err := m.Launch(context.Background(), asyncagents.LaunchInput{Caller: caller, Description: "d", Agent: "general",
			Prompt: "RUN:pwd", Fork: fork})
		if err != nil {
			t.Fatal(err)
		}
		task = asyncagentstest.Started(t, m, task)
		sess, err := f.GetSession(context.Background(), task.SessionID)
		if err != nil || sess.Directory != "/work/other" || task.Directory != "/work/other" {
			t.Fatalf("fork %v: task in %q, session %+v, %v", fork, task.Directory, sess, err)
		}
		if got := asyncagentstest.Await(t, m, caller, task.ID); got.Status != asyncagents.StatusCompleted || !strings.Contains(got.Result, "/work/other") {
			t.Errorf("fork %v: %s %q", fork, got.Status, got.Result)
		}
	}
	if dirs := c.agentDirs(); !slices.Equal(dirs, []string{"/work/other"}) {
		t.Errorf("agents asked for %q, want the parent's directory once", dirs)
	}
}

// lostPrompts is a client whose prompt_async requests never reach the server and get no
// answer, as when the connection breaks on the way.
type lostPrompts struct{ opencode.Client }

func (lostPrompts) PromptAsync(context.Context, string, opencode.PromptRequest) error {
	return errors.New("lostPrompts: connection reset")
}

// T-4, T-19, §8: a launch whose prompt got no answer leaves the task running, not failed;
// the host then stops before the server has the prompt. The next Manager on the store finds
// the session idle without it, a grace after it started, sends it under the task's prompt id,
// and the task completes: the prompt reached the server once.
func TestPromptLostBeforeHostStopped(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t)
	store := &asyncagents.MemoryStore{}
	m1 := asyncagentstest.NewManager(t, lostPrompts{f}, fastPoll, asyncagents.WithStore(store))
	caller := asyncagentstest.NewParent(t, f)
	task, err := m1.Launch(context.Background(), asyncagents.LaunchInput{Caller: caller, Description: "d", Agent: "general", Prompt: "RUN:echo once"})
	if err != nil || task.Status != asyncagents.StatusRunning || task.PromptID == "" {
		t.Fatalf("launch with its prompt's answer lost = %s %q, %v; want running with a prompt id", task.Status, task.Error, err)
	}
	task = asyncagentstest.Started(t, m1, task) // its prompt was sent, its answer lost
	if err := m1.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	m2 := asyncagentstest.NewManager(t, f, asyncagents.WithStore(store), asyncagents.WithPollInterval(20*time.Millisecond))
	asyncagents.SetLossGrace(m2, 200*time.Millisecond)
	if got := asyncagentstest.Await(t, m2, caller, task.ID); got.Status != asyncagents.StatusCompleted || got.Result != "Ran 1 command(s); last output: once" {
		t.Fatalf("after the restart: %s %q %q", got.Status, got.Error, got.Result)
	}
	msgs, err := f.Messages(context.Background(), task.SessionID, 0)
	if err != nil || len(msgs) < 1 || msgs[0].Info.ID != task.PromptID || len(msgs[0].Parts) != 1 {
		t.Fatalf("the server's messages = %+v, %v; want the prompt once, under its id", msgs, err)
	}
}

// heldSessionReads holds the next read of session id (GET /session/{id}), which starts a
// follow-up's run, until gate is closed; held is closed when one waits.
type heldSessionReads struct {
	*opencodetest.FakeClient
	mu         sync.Mutex
	id         string
	held, gate chan struct{}
}

func (c *heldSessionReads) GetSession(ctx context.Context, id string) (*opencode.Session, error) {
	c.mu.Lock()
	hold := id == c.id && c.held != nil
	held, gate := c.held, c.gate
	if hold {
		c.held = nil
	}
	c.mu.Unlock()
	if hold {
		close(held)
		<-gate
	}
	return c.FakeClient.GetSession(ctx, id)
}

// T-18: a Resume while a queued follow-up of the ended run is being started is queued behind
// it (not sent at once, and not refused): the follow-ups run in the order they were given.
func TestResumeWhileAFollowUpStarts(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	c := &heldSessionReads{FakeClient: f}
	m := asyncagentstest.NewManager(t, c, fastPoll, asyncagents.WithFollowUpQueue(2))
	caller := asyncagentstest.NewParent(t, f)
	task := asyncagentstest.Launch(t, m, caller, "first")
	if _, err := m.Resume(context.Background(), caller, task.ID, "second"); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.id, c.held, c.gate = task.SessionID, make(chan struct{}), make(chan struct{})
	held, gate := c.held, c.gate
	c.mu.Unlock()
	asyncagentstest.Release(t, f, task.SessionID, opencodetest.Text("one"))
	select {
	case <-held: // the run ended; "second" is being started
	case <-time.After(10 * time.Second):
		t.Fatal("the queued follow-up was not started")
	}
	got, err := m.Resume(context.Background(), caller, task.ID, "third")
	close(gate)
	if err != nil || !slices.Equal(got.FollowUps, []string{"third"}) {
		t.Fatalf("Resume while the follow-up starts = %v, %v; want third queued", got.FollowUps, err)
	}
	for i, result := range []string{"two", "three"} {
		waitFor(t, 10*time.Second, func() bool {
			tk, _ := m.Get(task.ID)
			return tk.ResumeCount == i+1 && tk.Status == asyncagents.StatusResumed && busy(context.Background(), f, task.SessionID)
		})
		asyncagentstest.Release(t, f, task.SessionID, opencodetest.Text(result))
	}
	if got := asyncagentstest.Await(t, m, caller, task.ID); got.Result != "three" || got.ResumeCount != 2 {
		t.Fatalf("after both follow-ups: %+v", got)
	}
	msgs, err := f.Messages(context.Background(), task.SessionID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var prompts []string
	for _, msg := range msgs {
		if msg.Info.Role == opencode.RoleUser && len(msg.Parts) > 0 {
			prompts = append(prompts, msg.Parts[len(msg.Parts)-1].Text)
		}
	}
	if !slices.Equal(prompts, []string{"first", "second", "third"}) {
		t.Errorf("prompts in the task's session = %q, want first, second, third", prompts)
	}
}

// outageStore fails every Save after the first (a launch's record) until heal is called.
type outageStore struct {
	asyncagents.MemoryStore
	saves  atomic.Int32
	healed atomic.Bool
}

func (s *outageStore) Save(ctx context.Context, t asyncagents.Task) error {
	if s.saves.Add(1) > 1 && !s.healed.Load() {
		return errors.New("the database is down")
	}
	return s.MemoryStore.Save(ctx, t)
}

// A store outage during a task's start delays the start: the start records the task when
// the store is back, and the task runs, instead of failing.
func TestStartWaitsOutAStoreOutage(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t)
	store := &outageStore{}
	m := asyncagentstest.NewManager(t, f, fastPoll, asyncagents.WithStore(store), asyncagents.WithNotifications(false))
	caller := asyncagentstest.NewParent(t, f)
	task, err := m.Launch(context.Background(), asyncagents.LaunchInput{Caller: caller, Description: "test", Agent: "general", Prompt: "work"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool { return store.saves.Load() > 2 }) // the start tried again
	if got, _ := m.Get(task.ID); got.Status != asyncagents.StatusRunning || !got.Starting {
		t.Fatalf("during the outage the task is %s (starting %t): %s", got.Status, got.Starting, got.Error)
	}
	store.healed.Store(true)
	got := asyncagentstest.AwaitTask(t, m, task.ID, func(tk asyncagents.Task) bool { return tk.Status.Terminal() })
	if got.Status != asyncagents.StatusCompleted {
		t.Fatalf("after the outage the task ended %s: %s", got.Status, got.Error)
	}
}
