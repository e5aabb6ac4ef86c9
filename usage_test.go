package asyncagents_test

import (
	"context"
	"errors"
	"iter"
	"math"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/asyncagentstest"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// sessionUsage returns the sum of the completed steps of session id, from its messages, and
// the session's own totals (GET /session/{id}).
func sessionUsage(t *testing.T, c opencode.Client, id string) (steps, totals asyncagents.Usage) {
	t.Helper()
	msgs, err := c.Messages(context.Background(), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if in := m.Info; in.Role == opencode.RoleAssistant && in.Tokens != nil {
			steps = steps.Add(asyncagents.Usage{Input: in.Tokens.Input, Output: in.Tokens.Output, Reasoning: in.Tokens.Reasoning,
				CacheRead: in.Tokens.Cache.Read, CacheWrite: in.Tokens.Cache.Write, Cost: in.Cost})
		}
	}
	s, err := c.GetSession(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if s.Tokens != nil {
		totals = asyncagents.Usage{Input: s.Tokens.Input, Output: s.Tokens.Output, Reasoning: s.Tokens.Reasoning,
			CacheRead: s.Tokens.Cache.Read, CacheWrite: s.Tokens.Cache.Write, Cost: s.Cost}
	}
	return steps, totals
}

// sameUsage compares usages, costs to a billionth of a dollar.
func sameUsage(a, b asyncagents.Usage) bool {
	costA, costB := a.Cost, b.Cost
	a.Cost, b.Cost = 0, 0
	return a == b && math.Abs(costA-costB) < 1e-9
}

// C-1: a task's usage is the sum of its session's steps, per run and in all; the first step
// is kept; the notification's hint and the output and list tools say it.
func TestTaskUsageSumsItsSteps(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t)
	m := asyncagentstest.NewManager(t, f, fastPoll, asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply))
	caller := asyncagentstest.NewParent(t, f)
	task := asyncagentstest.Launch(t, m, caller, "RUN:echo counted") // a tool step, then a text step
	got := asyncagentstest.Await(t, m, caller, task.ID)
	step := asyncagents.Usage{Input: 100, Output: 20, Cost: (100*3 + 20*15) / 1e6} // the fake's step at opencodetest.ModelPrice
	if want := step.Add(step); !sameUsage(got.Usage, want) || !sameUsage(got.RunUsage, want) || !sameUsage(got.FirstStep, step) {
		t.Fatalf("usage %+v, run %+v, first step %+v; want %+v, %+v, %+v", got.Usage, got.RunUsage, got.FirstStep, want, want, step)
	}
	if steps, totals := sessionUsage(t, f, task.SessionID); !sameUsage(got.Usage, steps) || !sameUsage(got.Usage, totals) {
		t.Errorf("usage %+v; the session's steps %+v, its totals %+v", got.Usage, steps, totals)
	}
	asyncagentstest.AwaitTask(t, m, task.ID, asyncagentstest.Delivered)
	if n := note(m, task.ID); !strings.Contains(n.Hidden, "It used 240 tokens, $0.0012.") {
		t.Errorf("hint = %q, want the run's usage", n.Hidden)
	}
	out, err := m.Output(context.Background(), caller, task.ID, asyncagents.OutputOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s := asyncagents.FormatOutput(out, time.Now()); !strings.Contains(s, "\nUsage: 240 tokens, $0.0012") {
		t.Errorf("output tool text = %q", s)
	}

	if _, err := m.Resume(context.Background(), caller, task.ID, "again"); err != nil {
		t.Fatal(err)
	}
	asyncagentstest.AwaitTask(t, m, task.ID, func(tk asyncagents.Task) bool {
		return tk.Status == asyncagents.StatusCompleted && tk.ResumeCount == 1
	})
	got, _ = m.Get(task.ID)
	if want := step.Add(step).Add(step); !sameUsage(got.Usage, want) || !sameUsage(got.RunUsage, step) || !sameUsage(got.FirstStep, step) {
		t.Errorf("after a resume: usage %+v, run %+v, first step %+v", got.Usage, got.RunUsage, got.FirstStep)
	}
	list, _ := m.List(caller, "")
	if s := asyncagents.FormatList(list, "", time.Now()); !strings.Contains(s, "| 360 tokens, $0.0018") {
		t.Errorf("list tool text = %q", s)
	}
	asyncagentstest.AwaitTask(t, m, task.ID, func(tk asyncagents.Task) bool {
		n := tk.Notifications[len(tk.Notifications)-1]
		return n.State == asyncagents.NotificationDelivered && strings.Contains(n.Hidden, "It used 120 tokens, $0.0006 (360 tokens, $0.0018 in all).")
	})
}

// C-1 on the real server: a task's usage equals the sum of its session's steps and the
// session's own totals, over a resume and across a restart of the host in the middle of a
// run (the steps of the downtime are counted from the messages the run is decided from).
func TestRealServerTaskUsageSumsItsSteps(t *testing.T) {
	t.Parallel()
	srv := shared.Get(t)
	c := srv.Client()
	path := filepath.Join(t.TempDir(), "tasks.jsonl")
	store, err := asyncagents.NewFileStore(path)
	if err != nil {
		t.Fatal(err)
	}
	m := asyncagentstest.NewManager(t, c, fastPoll, asyncagents.WithStore(store), asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply))
	caller := asyncagentstest.NewParent(t, c)
	task := asyncagentstest.Launch(t, m, caller, "RUN:echo first")
	got := asyncagentstest.Await(t, m, caller, task.ID)
	steps, totals := sessionUsage(t, c, task.SessionID)
	if got.Usage.Input == 0 || got.Usage.Cost == 0 || !sameUsage(got.Usage, steps) || !sameUsage(got.RunUsage, steps) {
		t.Fatalf("usage %+v, run %+v; the session's steps %+v", got.Usage, got.RunUsage, steps)
	}
	waitFor(t, 10*time.Second, func() bool { _, totals = sessionUsage(t, c, task.SessionID); return sameUsage(got.Usage, totals) })
	first := got.Usage

	// A resume whose run the host does not see end: it stops mid-run.
	if _, err := m.Resume(context.Background(), caller, task.ID, "SLEEP:2 RUN:echo second"); err != nil {
		t.Fatal(err)
	}
	asyncagentstest.AwaitBusy(t, c, task.SessionID)
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, func() bool { return !busy(context.Background(), c, task.SessionID) })
	store2, err := asyncagents.NewFileStore(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store2.Close() })
	m2 := asyncagentstest.NewManager(t, c, fastPoll, asyncagents.WithStore(store2), asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply))
	got = asyncagentstest.Await(t, m2, caller, task.ID)
	steps, _ = sessionUsage(t, c, task.SessionID)
	if !sameUsage(got.Usage, steps) {
		t.Errorf("after the restart: usage %+v; the session's steps %+v", got.Usage, steps)
	}
	if run := got.Usage.Add(asyncagents.Usage{}); !sameUsage(got.RunUsage.Add(first), run) {
		t.Errorf("after the restart: run %+v + first run %+v != usage %+v", got.RunUsage, first, got.Usage)
	}
}

// C-2: a parent's tree usage sums its tasks and the tasks they launched; the list tool says
// it.
func TestTreeUsageSumsNestedTasks(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t)
	m := asyncagentstest.NewManager(t, f, fastPoll, asyncagents.WithNestingDepth(2), asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply))
	caller := asyncagentstest.NewParent(t, f)
	top := asyncagentstest.Launch(t, m, caller, "RUN:echo top") // two steps
	asyncagentstest.Await(t, m, caller, top.ID)
	child := asyncagents.Caller{SessionID: top.SessionID, Agent: "general"}
	nested := asyncagentstest.Launch(t, m, child, "nested") // one step
	asyncagentstest.Await(t, m, child, nested.ID)
	step := asyncagents.Usage{Input: 100, Output: 20, Cost: (100*3 + 20*15) / 1e6}
	want := step.Add(step).Add(step)
	if got, err := m.TreeUsage(caller); err != nil || !sameUsage(got, want) {
		t.Errorf("TreeUsage = %+v, %v; want %+v", got, err, want)
	}
	all, _ := m.ListAll("")
	if got := asyncagents.TreeUsage(all, caller.SessionID); !sameUsage(got, want) {
		t.Errorf("TreeUsage of ListAll = %+v; want %+v", got, want)
	}
	var list asyncagents.Tool
	for _, tool := range asyncagents.Tools(m) {
		if strings.HasSuffix(tool.Name, "_list") {
			list = tool
		}
	}
	s, err := list.Handler(context.Background(), caller, []byte(`{}`))
	if err != nil || !strings.Contains(s, "\nUsed in all (your tasks and theirs): 360 tokens, $0.0018") {
		t.Errorf("list tool = %q, %v", s, err)
	}
}

// C-4: a run that reaches its budget is aborted like a deadline: the task ends in error
// naming the budget and what was used, and its parent is notified once.
func TestTaskBudgetAbortsTheRun(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t)
	m := asyncagentstest.NewManager(t, f, asyncagents.WithTaskBudget(asyncagents.Budget{Tokens: 150}),
		asyncagents.WithPollInterval(20*time.Millisecond), asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply))
	caller := asyncagentstest.NewParent(t, f)
	// A tool-calls step completes once its tools ran: the second step reaches the budget, and
	// the third, sleeping, is aborted.
	task := asyncagentstest.Launch(t, m, caller, "RUN:sleep 0 ||| sleep 0 ||| sleep 5 ||| echo never")
	got := asyncagentstest.Await(t, m, caller, task.ID)
	if got.Status != asyncagents.StatusError || !strings.Contains(got.Error, "budget: the run used 240 tokens, $0.0012, reaching its budget of 150 tokens") {
		t.Fatalf("task %s: %q", got.Status, got.Error)
	}
	if got.Budget != (asyncagents.Budget{Tokens: 150}) {
		t.Errorf("task budget = %+v", got.Budget)
	}
	asyncagentstest.AwaitTask(t, m, task.ID, asyncagentstest.Delivered)
	if n := asyncagentstest.Notifications(t, f, caller.SessionID); len(n) != 1 || !strings.Contains(n[0], "failed") {
		t.Errorf("parent notifications = %q, want one failure", n)
	}
}

// C-4: a caller whose tasks used its tree budget cannot launch or resume more (ErrBudget,
// nothing created); a launch may ask for a budget within the host's, not above it.
func TestTreeBudgetRefusesLaunches(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t)
	c := &createsClient{Client: f}
	m := asyncagentstest.NewManager(t, c, fastPoll, asyncagents.WithTreeBudget(asyncagents.Budget{Tokens: 200}),
		asyncagents.WithTaskBudget(asyncagents.Budget{Cost: 1}), asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply))
	caller := asyncagentstest.NewParent(t, f)
	first := asyncagentstest.Launch(t, m, caller, "RUN:echo spends") // 240 tokens
	asyncagentstest.Await(t, m, caller, first.ID)
	before := c.creates.Load()
	_, err := m.Launch(context.Background(), asyncagents.LaunchInput{Caller: caller, Description: "more", Agent: "general", Prompt: "x"})
	if !errors.Is(err, asyncagents.ErrBudget) || !strings.Contains(err.Error(), "used 240 tokens") {
		t.Errorf("Launch over the tree budget = %v, want ErrBudget saying what was used", err)
	}
	if _, err := m.Resume(context.Background(), caller, first.ID, "again"); !errors.Is(err, asyncagents.ErrBudget) {
		t.Errorf("Resume over the tree budget = %v, want ErrBudget", err)
	}
	if list, _ := m.List(caller, ""); len(list) != 1 || c.creates.Load() != before {
		t.Errorf("after refused launches: %d tasks, %d sessions created (before %d)", len(list), c.creates.Load(), before)
	}
	var task asyncagents.Tool
	for _, tool := range asyncagents.Tools(m) {
		if strings.HasSuffix(tool.Name, "_task") {
			task = tool
		}
	}
	other := asyncagentstest.NewParent(t, f)
	if _, err := task.Handler(context.Background(), other, []byte(`{"description":"d","agent":"general","prompt":"x","budget_cost":2}`)); !errors.Is(err, asyncagents.ErrInvalidInput) {
		t.Errorf("a budget above the host's = %v, want ErrInvalidInput", err)
	}
	if s, err := task.Handler(context.Background(), other, []byte(`{"description":"d","agent":"general","prompt":"x","budget_cost":0.5}`)); err != nil {
		t.Errorf("a budget within the host's = %v", err)
	} else if list, _ := m.List(other, ""); len(list) != 1 || list[0].Budget != (asyncagents.Budget{Cost: 0.5}) {
		t.Errorf("launched %q: tasks %+v, want one with the budget asked for", s, list)
	}
}

// C-4 on the real server: a run that reaches its budget of tokens is aborted, ends in error
// naming the budget, and its parent is notified once.
func TestRealServerTaskBudgetAbortsTheRun(t *testing.T) {
	t.Parallel()
	srv := shared.Get(t)
	c := srv.Client()
	m := asyncagentstest.NewManager(t, c, asyncagents.WithTaskBudget(asyncagents.Budget{Tokens: 10_000}),
		asyncagents.WithPollInterval(100*time.Millisecond), asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply))
	caller := asyncagentstest.NewParent(t, c)
	// Every step reads the whole context again (about 8,000 tokens of system prompt and tools
	// here): the second step reaches the budget while the third step's command runs, which the
	// abort cuts short (the test ends then).
	task := asyncagentstest.Launch(t, m, caller, "RUN:sleep 0 ||| sleep 0 ||| sleep 90 ||| echo never")
	got := asyncagentstest.Await(t, m, caller, task.ID)
	if got.Status != asyncagents.StatusError || !strings.Contains(got.Error, "budget: the run used") || !strings.Contains(got.Error, "budget of 10.0k tokens") {
		t.Fatalf("task %s: %q (usage %+v)", got.Status, got.Error, got.RunUsage)
	}
	if got.RunUsage.Tokens() < 10_000 || got.Duration(time.Now()) > 75*time.Second {
		t.Errorf("aborted after %v with %+v", got.Duration(time.Now()), got.RunUsage)
	}
	asyncagentstest.AwaitTask(t, m, task.ID, asyncagentstest.Delivered)
	settle(t, m, c, "✗ Agent ", map[string]int{caller.SessionID: 1})
}

// createsClient counts the sessions created through it.
type createsClient struct {
	opencode.Client
	creates atomic.Int64
}

func (c *createsClient) CreateSession(ctx context.Context, req opencode.CreateSessionRequest) (*opencode.Session, error) {
	c.creates.Add(1)
	return c.Client.CreateSession(ctx, req)
}

// dropClient drops the events of its stream that drop selects.
type dropClient struct {
	*opencodetest.FakeClient
	drop func(ev opencode.Event) bool
}

type dropStream struct {
	opencode.EventStream
	drop func(ev opencode.Event) bool
}

func (s dropStream) All() iter.Seq2[opencode.Event, error] {
	return func(yield func(opencode.Event, error) bool) {
		for ev, err := range s.EventStream.All() {
			if err == nil && s.drop(ev) {
				continue
			}
			if !yield(ev, err) {
				return
			}
		}
	}
}

func (c *dropClient) Events(ctx context.Context) (opencode.EventStream, error) {
	s, err := c.FakeClient.Events(ctx)
	if err != nil {
		return nil, err
	}
	return dropStream{s, c.drop}, nil
}

// longRun is a run of nine steps, more than a read's window of messages.
const longRun = "RUN:sleep 0 ||| sleep 0 ||| sleep 0 ||| sleep 0 ||| sleep 0 ||| sleep 0 ||| sleep 0 ||| sleep 0 ||| echo done"

// C-1: a run decided from a read, longer than the read's window, and with no step seen on the
// stream (as after a restart of the host), is counted whole: the read pages back to its prompt.
func TestUsageOfALongRunDecidedByARead(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t)
	c := &dropClient{FakeClient: f, drop: func(ev opencode.Event) bool { return ev.Type == opencode.EventMessageUpdated }}
	m := asyncagentstest.NewManager(t, c, fastPoll, asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply))
	caller := asyncagentstest.NewParent(t, f)
	task := asyncagentstest.Launch(t, m, caller, longRun)
	got := asyncagentstest.Await(t, m, caller, task.ID)
	steps, totals := sessionUsage(t, f, task.SessionID)
	if !sameUsage(got.Usage, steps) {
		t.Errorf("usage %v; session steps %v, totals %v", got.Usage, steps, totals)
	}
}

// C-4: clearing its tasks does not give a caller its tree budget back.
func TestTreeBudgetCountsClearedTasks(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t)
	m := asyncagentstest.NewManager(t, f, fastPoll, asyncagents.WithTreeBudget(asyncagents.Budget{Tokens: 200}), asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply))
	caller := asyncagentstest.NewParent(t, f)
	first := asyncagentstest.Launch(t, m, caller, "RUN:echo spends")
	asyncagentstest.Await(t, m, caller, first.ID)
	in := asyncagents.LaunchInput{Caller: caller, Description: "more", Agent: "general", Prompt: "x"}
	if _, err := m.Launch(context.Background(), in); !errors.Is(err, asyncagents.ErrBudget) {
		t.Fatalf("want ErrBudget, got %v", err)
	}
	if _, err := m.Clear(context.Background(), caller); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Launch(context.Background(), in); err == nil {
		t.Errorf("after Clear, a launch over the tree budget succeeded")
	}
}

// C-4: a task below a caller whose tree reached its budget cannot launch more either.
func TestTreeBudgetHoldsBelow(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t)
	m := asyncagentstest.NewManager(t, f, fastPoll, asyncagents.WithNestingDepth(2), asyncagents.WithTreeBudget(asyncagents.Budget{Tokens: 200}),
		asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply))
	caller := asyncagentstest.NewParent(t, f)
	top := asyncagentstest.Launch(t, m, caller, "RUN:echo top") // 240 tokens
	asyncagentstest.Await(t, m, caller, top.ID)
	if _, err := m.Launch(context.Background(), asyncagents.LaunchInput{Caller: caller, Description: "d", Agent: "general", Prompt: "x"}); !errors.Is(err, asyncagents.ErrBudget) {
		t.Fatalf("top caller: %v", err)
	}
	child := asyncagents.Caller{SessionID: top.SessionID, Agent: "general"}
	for i := 0; i < 3; i++ {
		n, err := m.Launch(context.Background(), asyncagents.LaunchInput{Caller: child, Description: "d", Agent: "general", Prompt: "RUN:echo nested"})
		if err != nil {
			break
		}
		asyncagentstest.Await(t, m, child, n.ID)
	}
	u, _ := m.TreeUsage(caller)
	if u.Tokens() > 240 {
		t.Errorf("caller's tree used %v over a tree budget of 200 (nested launches not refused)", u)
	}
}

type slowReadClient struct {
	dropClient
}

func (c *slowReadClient) Messages(ctx context.Context, id string, limit int) ([]opencode.Message, error) {
	time.Sleep(300 * time.Millisecond)
	return c.dropClient.Messages(ctx, id, limit)
}

// C-4: a run whose last step reaches its budget ended anyway: it is decided (completed, with
// its result), not aborted, however late its read.
func TestBudgetReachedByTheLastStepCompletes(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t)
	c := &slowReadClient{dropClient{FakeClient: f, drop: func(ev opencode.Event) bool {
		return ev.Type == opencode.EventSessionIdle || ev.Type == opencode.EventSessionStatus
	}}}
	m := asyncagentstest.NewManager(t, c, asyncagents.WithTaskBudget(asyncagents.Budget{Tokens: 200}),
		asyncagents.WithPollInterval(20*time.Millisecond), asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply))
	caller := asyncagentstest.NewParent(t, f)
	task := asyncagentstest.Launch(t, m, caller, "RUN:echo x")
	got := asyncagentstest.Await(t, m, caller, task.ID)
	if got.Status != asyncagents.StatusCompleted {
		t.Errorf("task %s: %q (the run had completed)", got.Status, got.Error)
	}
}

// Under WithBudgetPause a run that reaches its budget is stopped but kept: the task is
// cancelled, Paused, with what it did so far as its result; its parent is told it paused;
// Resume with a larger budget goes on in the same session.
func TestRealServerBudgetPausesTheRun(t *testing.T) {
	t.Parallel()
	srv := shared.Get(t)
	c := srv.Client()
	m := asyncagentstest.NewManager(t, c, asyncagents.WithTaskBudget(asyncagents.Budget{Tokens: 10_000}), asyncagents.WithBudgetPause(true),
		asyncagents.WithPollInterval(100*time.Millisecond), asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply))
	caller := asyncagentstest.NewParent(t, c)
	task := asyncagentstest.Launch(t, m, caller, "RUN:sleep 0 ||| sleep 0 ||| sleep 90 ||| echo never")
	got := asyncagentstest.Await(t, m, caller, task.ID)
	if got.Status != asyncagents.StatusCancelled || !got.Paused || !strings.HasPrefix(got.Error, "paused: the run used") || got.Result == "" {
		t.Fatalf("task %s paused=%v: %q, result %q", got.Status, got.Paused, got.Error, got.Result)
	}
	if notes := asyncagentstest.AwaitNotifications(t, c, caller.SessionID, 1); !strings.Contains(notes[0], "paused at its budget") {
		t.Errorf("notification %q does not say the task paused", notes[0])
	}
	if out := asyncagents.FormatOutput(asyncagents.Output{Task: got}, time.Now()); !strings.Contains(out, "What it did so far") {
		t.Errorf("output of a paused task:\n%s", out)
	}
	if _, err := m.Resume(context.Background(), caller, task.ID, "RUN:echo resumed", asyncagents.ResumeBudget(asyncagents.Budget{Tokens: 100_000})); err != nil {
		t.Fatal(err)
	}
	again := asyncagentstest.Await(t, m, caller, task.ID)
	if again.Status != asyncagents.StatusCompleted || again.Paused || !strings.Contains(again.Result, "resumed") || again.Budget.Tokens != 100_000 {
		t.Errorf("resumed with a larger budget: %s paused=%v %q budget %v", again.Status, again.Paused, again.Result, again.Budget)
	}
}
