package asyncagents_test

import (
	"errors"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/asyncagentstest"
	"github.com/asyncagents/asyncagents/opencode"
)

// Several hosts on one real OpenCode server and one real PostgreSQL (issue 35, cases 3, 5 and
// 6): the Managers of these tests share the package's OpenCode server and PostgreSQL server,
// each test with a database of its own.

// A deepest-level task of one host cannot launch through another host's tools (issue 35,
// case 3: "A deepest-level task of host A launched through host B's tools (its deny rule
// names only A's prefix)"), on the real server: its session's rules deny the task tool of
// every bridge (B's included) and OpenCode's own; a launch through B's task tool by the task,
// or by a session under it (an OpenCode subagent of the task), is refused as too deep, also
// right after A launched it, before B has read A's changes (B looks the unknown session up
// in the store).
func TestRealServerDeepestTaskCannotLaunchThroughAnotherHost(t *testing.T) {
	t.Parallel() // a database of its own
	c := shared.Get(t).Client()
	url := sharedPG.Get(t).NewDatabase(t)
	ctx := ctxT(t, 60*time.Second)
	a := asyncagentstest.NewManager(t, c, asyncagents.WithStore(openPG(t, url)), asyncagents.WithToolPrefix("ha"), asyncagents.WithNotifications(false))
	b := asyncagentstest.NewManager(t, c, asyncagents.WithStore(openPG(t, url)), asyncagents.WithToolPrefix("hb"), asyncagents.WithNotifications(false))
	parent := asyncagentstest.NewParent(t, c)
	task := asyncagentstest.Launch(t, a, parent, "SLEEP:2")
	sess, err := c.GetSession(ctx, task.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"ha_task", "hb_task", "task"} {
		if !lastRuleDenies(sess.Permission, tool) {
			t.Errorf("the deepest task's rules %+v do not deny %s", sess.Permission, tool)
		}
	}
	launch := asyncagents.Tools(b)[0]
	if launch.Name != "hb_task" {
		t.Fatalf("B's first tool is %s, want hb_task", launch.Name)
	}
	sub, err := c.CreateSession(ctx, opencode.CreateSessionRequest{ParentID: task.SessionID, Title: "subagent"})
	if err != nil {
		t.Fatal(err)
	}
	for _, caller := range []string{task.SessionID, sub.ID} {
		text, err := launch.Handler(ctx, asyncagents.Caller{SessionID: caller, Agent: "general"},
			[]byte(`{"description":"deeper","agent":"general","prompt":"RUN:echo deeper"}`))
		if !errors.Is(err, asyncagents.ErrNestingDepth) {
			t.Errorf("hb_task called by %s under A's deepest task: %q, %v; want ErrNestingDepth", caller, text, err)
		}
	}
	waitFor(t, 10*time.Second, func() bool { all, _ := b.ListAll(""); return len(all) == 1 })
	time.Sleep(time.Second) // a task B launched would be in its list by now
	if all, _ := b.ListAll(""); len(all) != 1 {
		t.Errorf("B lists %d tasks after the refused launches, want A's one", len(all))
	}
}

// lastRuleDenies reports whether the last of rules whose permission matches tool (OpenCode's
// wildcard, where * matches any run of characters) denies it.
func lastRuleDenies(rules []opencode.PermissionRule, tool string) bool {
	deny := false
	for _, r := range rules {
		if ok, _ := path.Match(r.Permission, tool); ok {
			deny = r.Action == "deny"
		}
	}
	return deny
}

// The per-parent cap and the tree budget hold across hosts (issue 35, case 3: "with
// -max-per-parent 1 on both, one parent had 2 running tasks; the tree budget and the cleared
// usage are per process"), on the real server: with a cap of one on both hosts, a parent with
// a task running on one host cannot start one on the other, nor resume an ended one while the
// other host runs its next; with a tree budget on both, what a parent's task used, cleared on
// one host, still counts on the other.
func TestRealServerLimitsHoldAcrossHosts(t *testing.T) {
	t.Parallel() // a database of its own
	c := shared.Get(t).Client()
	url := sharedPG.Get(t).NewDatabase(t)
	ctx := ctxT(t, 60*time.Second)
	capped := []asyncagents.Option{asyncagents.WithMaxActivePerParent(1), asyncagents.WithNotifications(false), fastPoll}
	a := asyncagentstest.NewManager(t, c, append(capped, asyncagents.WithStore(openPG(t, url)))...)
	b := asyncagentstest.NewManager(t, c, append(capped, asyncagents.WithStore(openPG(t, url)))...)
	parent := asyncagentstest.NewParent(t, c)
	first := asyncagentstest.Launch(t, a, parent, "SLEEP:5") // running through b's launch, also on a slow machine
	in := asyncagents.LaunchInput{Caller: parent, Description: "second", Agent: "general", Prompt: "SLEEP:5"}
	if _, err := b.Launch(ctx, in); !errors.Is(err, asyncagents.ErrTaskLimit) {
		t.Errorf("a second task of the parent on the other host: %v, want ErrTaskLimit", err)
	}
	asyncagentstest.Await(t, a, parent, first.ID)
	var last error
	waitFor(t, 10*time.Second, func() bool { _, last = b.Launch(ctx, in); return last == nil }) // once A has stored the end
	if _, err := a.Resume(ctx, parent, first.ID, "RUN:echo again"); !errors.Is(err, asyncagents.ErrTaskLimit) {
		t.Errorf("a resume of the parent's ended task on A while B runs another: %v, want ErrTaskLimit", err)
	}
	if busy(ctx, c, first.SessionID) {
		t.Error("the ended task's session runs after its refused resume")
	}

	budget := []asyncagents.Option{asyncagents.WithTreeBudget(asyncagents.Budget{Tokens: 1}), asyncagents.WithNotifications(false), fastPoll}
	x := asyncagentstest.NewManager(t, c, append(budget, asyncagents.WithStore(openPG(t, url)))...)
	y := asyncagentstest.NewManager(t, c, append(budget, asyncagents.WithStore(openPG(t, url)))...)
	spender := asyncagentstest.NewParent(t, c)
	if spent := asyncagentstest.Await(t, x, spender, asyncagentstest.Launch(t, x, spender, "RUN:echo spent").ID); spent.Usage.Tokens() == 0 {
		t.Fatalf("the task used no tokens: %+v", spent.Usage)
	}
	if res, err := x.Clear(ctx, spender); err != nil || res.Removed != 1 {
		t.Fatalf("Clear = %+v, %v", res, err)
	}
	if _, err := y.Launch(ctx, asyncagents.LaunchInput{Caller: spender, Description: "more", Agent: "general", Prompt: "RUN:echo more"}); !errors.Is(err, asyncagents.ErrBudget) {
		t.Errorf("a launch on the other host by a parent whose cleared task spent its budget: %v, want ErrBudget", err)
	}
}

// The database is untrusted input (issue 35, case 5: "A host claims rows without checking
// them: a queued row whose id was the user's own session had its prompt (a bash call) sent
// there 0.5 s later, and the reply came back into the row; another row posted a forged
// notification and a turn prompt into a third session"), on the real server: the body of
// TestForgedRowsAreNotActedOn.
func TestRealServerForgedRowsAreNotActedOn(t *testing.T) {
	t.Parallel() // a database of its own
	forgedRowsAreNotActedOn(t, shared.Get(t).Client())
}

// A row a host sealed with the record key is taken in by another host with the key and
// finished there (issue 35, case 5, the other side: rows are refused only when they are not
// a task's), on the real server: a task whose host closed while it ran is claimed by the next
// host, which reads its end from the server.
func TestRealServerSealedRowsAreTakenIn(t *testing.T) {
	t.Parallel() // a database of its own
	c := shared.Get(t).Client()
	url := sharedPG.Get(t).NewDatabase(t)
	key := asyncagents.WithRecordKey([]byte(strings.Repeat("k", 32)))
	first := openPG(t, url)
	a, err := asyncagents.New(c, asyncagents.WithStore(first), key, asyncagents.WithNotifications(false))
	if err != nil {
		t.Fatal(err)
	}
	parent := asyncagentstest.NewParent(t, c)
	task := asyncagentstest.Launch(t, a, parent, "SLEEP:2")
	if err := a.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	first.Close() // gives its leases up
	b := asyncagentstest.NewManager(t, c, asyncagents.WithStore(openPG(t, url)), key, asyncagents.WithNotifications(false), fastPoll)
	got := asyncagentstest.AwaitTask(t, b, task.ID, func(tk asyncagents.Task) bool { return tk.Status.Terminal() })
	if got.Status != asyncagents.StatusCompleted || !strings.HasSuffix(got.Result, "slept 2") {
		t.Errorf("the task taken in ended %s with %q, want completed with a result ending %q", got.Status, got.Result, "slept 2")
	}
}

// Other hosts' changes are read incrementally, as summaries (issue 35, case 6: "Every serve
// reads and decodes the whole task table every second"; "a summary instead of prompts and
// results"), on the real server: a subscriber of one host sees the tasks another host holds
// launched, ended and cleared, each change marked Remote and without the task's prompt or
// result; the host's own tasks are not marked Remote. (H-5: a subscriber of one Manager sees
// the tasks another Manager holds.)
func TestRealServerChangeFeedShowsOtherHostsTasks(t *testing.T) {
	t.Parallel() // a database of its own
	c := shared.Get(t).Client()
	url := sharedPG.Get(t).NewDatabase(t)
	a := asyncagentstest.NewManager(t, c, asyncagents.WithStore(openPG(t, url)), asyncagents.WithNotifications(false), fastPoll)
	b := asyncagentstest.NewManager(t, c, asyncagents.WithStore(openPG(t, url)), asyncagents.WithNotifications(false), fastPoll)
	parent := asyncagentstest.NewParent(t, c)
	before := asyncagentstest.Launch(t, a, parent, "RUN:echo before")
	waitFor(t, 10*time.Second, func() bool { all, _ := b.ListAll(""); return len(all) == 1 })
	sub, tasks, err := b.Subscribe(0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if len(tasks) != 1 || tasks[0].ID != before.ID {
		t.Fatalf("Subscribe on B lists %d tasks, want A's one", len(tasks))
	}
	next := func(what string, ok func(asyncagents.Change) bool) {
		t.Helper()
		timeout := time.After(20 * time.Second)
		for {
			select {
			case ch := <-sub.Changes():
				if ch.Remote && (ch.Task.Prompt != "" || ch.Task.Result != "") {
					t.Errorf("another host's change carries the prompt %q and result %q", ch.Task.Prompt, ch.Task.Result)
				}
				if ok(ch) {
					return
				}
			case <-timeout:
				t.Fatalf("B's subscriber did not see %s", what)
			}
		}
	}
	task := asyncagentstest.Launch(t, a, parent, "SLEEP:1")
	next("A's new task, as another host's", func(ch asyncagents.Change) bool { return ch.Task.ID == task.ID && !ch.Removed && ch.Remote })
	next("A's task completed", func(ch asyncagents.Change) bool {
		return ch.Task.ID == task.ID && ch.Task.Status == asyncagents.StatusCompleted && ch.Remote
	})
	if _, err := a.Clear(t.Context(), parent); err != nil {
		t.Fatal(err)
	}
	next("A's task removed", func(ch asyncagents.Change) bool { return ch.Task.ID == task.ID && ch.Removed && ch.Remote })
	own := asyncagentstest.Launch(t, b, parent, "RUN:echo own")
	next("B's own task, as its own", func(ch asyncagents.Change) bool { return ch.Task.ID == own.ID && !ch.Remote })
}
