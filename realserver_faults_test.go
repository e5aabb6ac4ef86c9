package asyncagents_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/asyncagentstest"
	"github.com/asyncagents/asyncagents/internal/fakeclock"
	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// Faults on the real server (§8 "nothing is lost"): a fault proxy (opencodetest.Proxy)
// stands between the Manager's client and `opencode serve` and refuses, delays, resets,
// drops and cuts; Server.Restart restarts the server itself. Every test is parallel; the
// restart test has a server of its own so the others keep the shared one.

// proxied returns a proxy in front of srv and a client that reaches srv through it.
func proxied(t *testing.T, srv *opencodetest.Server) (*opencodetest.Proxy, *opencode.HTTPClient) {
	t.Helper()
	p := opencodetest.NewProxy(srv.URL)
	t.Cleanup(p.Close)
	c, err := opencode.NewHTTPClient(p.URL, opencode.WithDirectory(srv.Directory))
	if err != nil {
		t.Fatal(err)
	}
	return p, c
}

// parentDown makes every route of a parent session fail as f says (f.Pattern is set here).
func parentDown(p *opencodetest.Proxy, parent string, f opencodetest.Fault) (remove func()) {
	f.Pattern = "/session/" + parent
	whole := p.Inject(f)
	f.Pattern = "/session/" + parent + "/{rest...}"
	below := p.Inject(f)
	return func() { whole.Remove(); below.Remove() }
}

// note returns task id's notification (the first), or a zero one.
func note(m *asyncagents.Manager, id string) asyncagents.Notification {
	tk, err := m.Get(id)
	if err != nil || len(tk.Notifications) == 0 {
		return asyncagents.Notification{}
	}
	return tk.Notifications[0]
}

// delivered reports whether every task's latest notification was delivered.
func delivered(m *asyncagents.Manager, ids ...string) bool {
	for _, id := range ids {
		if tk, err := m.Get(id); err != nil || !asyncagentstest.Delivered(tk) {
			return false
		}
	}
	return true
}

// settle closes m, after which no notification can come, and checks that each parent has
// exactly the wanted number of notifications, each starting with prefix.
func settle(t *testing.T, m *asyncagents.Manager, c opencode.Client, prefix string, want map[string]int) {
	t.Helper()
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for parent, n := range want {
		got := asyncagentstest.Notifications(t, c, parent)
		if len(got) != n {
			t.Errorf("parent %s got %d notifications, want %d: %q", parent, len(got), n, got)
		}
		for _, s := range got {
			if !strings.HasPrefix(s, prefix) {
				t.Errorf("parent %s notification %q, want it to start with %q", parent, s, prefix)
			}
		}
	}
}

// lastIsAssistant reports whether session id's last message is an assistant message: the
// run's step has started.
func lastIsAssistant(ctx context.Context, c opencode.Client, id string) bool {
	msgs, err := c.Messages(ctx, id, 1)
	return err == nil && len(msgs) == 1 && msgs[0].Info.Role == opencode.RoleAssistant
}

// waitMidRun waits until every task's session is busy with a step under way.
func waitMidRun(t *testing.T, ctx context.Context, c opencode.Client, tasks []asyncagents.Task) {
	t.Helper()
	waitFor(t, 30*time.Second, func() bool {
		st, err := c.SessionStatus(ctx, "")
		for _, tk := range tasks {
			if _, busy := st[tk.SessionID]; err != nil || !busy || !lastIsAssistant(ctx, c, tk.SessionID) {
				return false
			}
		}
		return true
	})
}

// T-23, §8: the server restarts while tasks run. The runs are gone (the sessions are idle
// and their last steps never finish), so each task ends in error ("interrupted") within a
// few poll intervals, a blocked Output returns, and each parent is told once per task. The
// Manager talks to the server through a proxy, which answers 503 while the server is down
// and starting, so the Manager sees the server go away and come back, and nothing in between.
func TestFaultServerRestartBehindAProxyInterruptsRuns(t *testing.T) {
	t.Parallel()
	restartWhileRunning(t, opencodetest.Start(t), true)
}

// T-23, §8: as TestFaultServerRestartBehindAProxyInterruptsRuns, with the Manager talking to
// the server directly, as a host whose server restarts on its fixed port does. OpenCode
// 1.18.33 accepts connections a moment before it is ready and never answers the requests
// that arrive then (observed: no answer after 40 s): the Manager's request timeout frees the
// status poll that lands in that moment.
func TestFaultServerRestartOnItsPortInterruptsRuns(t *testing.T) {
	t.Parallel()
	restartWhileRunning(t, opencodetest.Start(t), false)
}

func restartWhileRunning(t *testing.T, srv *opencodetest.Server, shielded bool) {
	var (
		proxy *opencodetest.Proxy
		c     = srv.Client()
	)
	if shielded {
		proxy, c = proxied(t, srv)
	}
	ctx := ctxT(t, 120*time.Second)
	m := asyncagentstest.NewManager(t, c, asyncagents.WithPollInterval(200*time.Millisecond), asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply),
		asyncagents.WithRequestTimeout(2*time.Second))
	p1, p2 := asyncagentstest.NewParent(t, c), asyncagentstest.NewParent(t, c)
	tasks := []asyncagents.Task{
		asyncagentstest.Launch(t, m, p1, "SLEEP:30"),     // the model is streaming
		asyncagentstest.Launch(t, m, p1, "RUN:sleep 30"), // a tool is running
		asyncagentstest.Launch(t, m, p2, "SLEEP:30"),
	}
	waitMidRun(t, ctx, c, tasks)
	type result struct {
		out asyncagents.Output
		err error
	}
	blocked := make(chan result, 1)
	go func() {
		out, err := m.Output(ctx, p1, tasks[0].ID, asyncagents.OutputOptions{Block: true, Timeout: 90 * time.Second})
		blocked <- result{out, err}
	}()

	start, oldURL := time.Now(), srv.URL
	if shielded {
		down := proxy.Inject(opencodetest.Fault{Pattern: "/", Status: 503})
		defer down.Remove()
		if err := srv.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		proxy.SetUpstream(srv.URL)
		down.Remove()
	} else if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	t.Logf("restart took %v (%s → %s)", restarted.Sub(start), oldURL, srv.URL)
	if !shielded && srv.URL != oldURL {
		t.Skip("the server's port was taken during the restart: the direct client cannot follow")
	}
	ended := func() bool {
		for _, tk := range tasks {
			if got, err := m.Get(tk.ID); err != nil || got.Status != asyncagents.StatusError {
				return false
			}
		}
		return true
	}
	decided := false
	t.Cleanup(func() { // what the server shows when the Manager did not decide
		if !decided {
			for _, tk := range tasks {
				got, _ := m.Get(tk.ID)
				msgs, err := srv.Client().Messages(context.Background(), tk.SessionID, 2)
				t.Logf("task %s %s %q; last messages (%v):", tk.ID, got.Status, got.Error, err)
				for _, msg := range msgs {
					b, _ := json.Marshal(msg.Info)
					t.Logf("  %s", b)
				}
			}
		}
	})
	if decided = testmain.Eventually(15*time.Second, ended); !decided {
		t.Fatal("interrupted runs not decided 15 s after the server was back")
	}
	t.Logf("all tasks ended %v after the server was back", time.Since(restarted))
	for _, tk := range tasks {
		if got, _ := m.Get(tk.ID); !strings.Contains(got.Error, "interrupted") {
			t.Errorf("task %s error = %q, want interrupted", tk.ID, got.Error)
		}
	}
	select {
	case r := <-blocked:
		if r.err != nil || r.out.TimedOut || r.out.Task.Status != asyncagents.StatusError {
			t.Errorf("blocked Output = %+v, %v", r.out, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("blocked Output did not return")
	}
	for _, id := range []string{tasks[0].ID, tasks[1].ID, tasks[2].ID} {
		asyncagentstest.AwaitTask(t, m, id, asyncagentstest.Delivered)
	}
	t.Logf("all notifications delivered %v after the server was back", time.Since(restarted))
	settle(t, m, srv.Client(), "✗ Agent ", map[string]int{p1.SessionID: 2, p2.SessionID: 1})
}

// T-7: with the event stream refused (503) and every prompt_async held 300–800 ms, so the
// poll can find a task's session idle before its prompt arrives, every task still completes
// and each parent is told, from the status poll alone.
func TestFaultPollFallbackWithoutEvents(t *testing.T) {
	t.Parallel()
	srv := shared.Get(t)
	proxy, c := proxied(t, srv)
	refused := proxy.Inject(opencodetest.Fault{Pattern: "GET /global/event", Status: 503})
	proxy.Inject(opencodetest.Fault{Pattern: "POST /session/{id}/prompt_async", Delay: 300 * time.Millisecond, Jitter: 500 * time.Millisecond})
	ctx := ctxT(t, 90*time.Second)
	m := asyncagentstest.NewManager(t, c, asyncagents.WithPollInterval(100*time.Millisecond), asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply))
	parents := []asyncagents.Caller{asyncagentstest.NewParent(t, c), asyncagentstest.NewParent(t, c), asyncagentstest.NewParent(t, c)}

	start := time.Now()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		tasks []asyncagents.Task
	)
	for i, p := range parents {
		for j := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tk, err := m.Launch(ctx, asyncagents.LaunchInput{Caller: p, Description: fmt.Sprintf("t%d.%d", i, j), Agent: "general",
					Prompt: fmt.Sprintf("RUN:echo x%d%d", i, j)})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				tasks = append(tasks, tk)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for _, tk := range tasks {
		out, err := m.Output(ctx, asyncagents.Caller{SessionID: tk.ParentSessionID}, tk.ID, asyncagents.OutputOptions{Block: true, Timeout: 30 * time.Second})
		if err != nil || out.Task.Status != asyncagents.StatusCompleted || !strings.Contains(out.Task.Result, "last output: x") {
			msgs, _ := srv.Client().Messages(context.Background(), tk.SessionID, 0)
			for _, msg := range msgs {
				b, _ := json.Marshal(msg)
				t.Logf("  message %.1500s", b)
			}
			t.Fatalf("task %s: %+v, %v", tk.Description, out.Task, err)
		}
		msgs, _ := c.Messages(ctx, tk.SessionID, 1)
		if len(msgs) == 1 {
			ended := time.UnixMilli(msgs[0].Info.Time.Completed)
			t.Logf("task %s: launched %v, run ended on the server %v, completed %v later", tk.Description,
				tk.Started.Sub(start), ended.Sub(start), out.Task.Completed.Sub(ended))
		}
	}
	t.Logf("6 tasks completed by polling in %v", time.Since(start))
	for _, tk := range tasks {
		asyncagentstest.AwaitTask(t, m, tk.ID, asyncagentstest.Delivered)
	}
	t.Logf("and notified in %v", time.Since(start))
	if refused.Hits() == 0 || proxy.EventStreams() != 0 {
		t.Errorf("event stream refused %d times, %d open", refused.Hits(), proxy.EventStreams())
	}
	want := map[string]int{}
	for _, p := range parents {
		want[p.SessionID] = 2
	}
	settle(t, m, srv.Client(), "✓ Agent ", want)
}

// N, §8: a parent unreachable (every route answers 503) for many delivery attempts — more
// than the handful a short retry budget allows — gets its notification once it is back,
// exactly once. The Manager's clock is fake so that minutes of backoff pass at once; the
// server, the proxy and every request are real.
func TestFaultParentOutageNotifiedOnce(t *testing.T) {
	t.Parallel()
	srv := shared.Get(t)
	proxy, c := proxied(t, srv)
	clock := fakeclock.New(time.Now())
	m := asyncagentstest.NewManager(t, c, fastPoll, asyncagents.WithClock(clock), asyncagents.WithNotifyHorizon(24*time.Hour))
	parent := asyncagentstest.NewParent(t, c)
	task := asyncagentstest.Launch(t, m, parent, "RUN:echo outage")
	restore := parentDown(proxy, parent.SessionID, opencodetest.Fault{Status: 503})
	defer restore()

	const failures = 10
	waitFor(t, 60*time.Second, func() bool {
		clock.Advance(30 * time.Second) // drives the poll and the delivery backoff
		return note(m, task.ID).Attempts >= failures
	})
	n := note(m, task.ID)
	if n.State != asyncagents.NotificationPending || !strings.Contains(n.Error, "503") || len(asyncagentstest.Notifications(t, srv.Client(), parent.SessionID)) != 0 {
		t.Fatalf("during the outage: %+v", n)
	}
	t.Logf("%d failed attempts over %v of the Manager's time", n.Attempts, clock.Now().Sub(n.Created))
	restore()
	failed := note(m, task.ID).Attempts
	waitFor(t, 30*time.Second, func() bool {
		clock.Advance(time.Minute)
		return note(m, task.ID).State == asyncagents.NotificationDelivered
	})
	// One attempt in flight at the restore may still have failed.
	if n := note(m, task.ID); n.Attempts != failed+1 && n.Attempts != failed+2 {
		t.Errorf("delivered after %d attempts, %d of them failed before the parent was back", n.Attempts, failed)
	}
	settle(t, m, srv.Client(), "✓ Agent ", map[string]int{parent.SessionID: 1})
}

// N, §8: the first notification post reaches the server but its answer is lost (the
// connection breaks): the retry finds the message by its id and does not post it again. And
// one the server acknowledged (204) and never stored is found missing and posted again.
func TestFaultLostNotificationResponse(t *testing.T) {
	t.Parallel()
	srv := shared.Get(t)
	for _, tc := range []struct {
		name   string
		policy asyncagents.NotifyPolicy
		route  string
		fault  opencodetest.Fault
	}{
		{"prompt_async", asyncagents.NotifyPerRun, "POST /session/%s/prompt_async", opencodetest.Fault{DropResponse: true, Times: 1}},
		{"noReply message", asyncagents.NotifyNoReply, "POST /session/%s/message", opencodetest.Fault{DropResponse: true, Times: 1}},
		// OpenCode answers 204 and never stores the message (seen right after a restart).
		{"prompt_async acknowledged, not stored", asyncagents.NotifyPerRun, "POST /session/%s/prompt_async",
			opencodetest.Fault{Status: http.StatusNoContent, Times: 1}},
		// The same two faults on the prompt asking for the parent's turn (one turn per wave).
		{"turn prompt", asyncagents.NotifyPerWave, "POST /session/%s/prompt_async", opencodetest.Fault{DropResponse: true, Times: 1}},
		{"turn prompt acknowledged, not stored", asyncagents.NotifyPerWave, "POST /session/%s/prompt_async",
			opencodetest.Fault{Status: http.StatusNoContent, Times: 1}},
		// The post fails at once but reaches the server only after the retry posted it again
		// (a server slow to act on a request its client gave up on, or a host that stopped
		// mid-post): the two posts are one message, and one turn.
		{"noReply message lands late", asyncagents.NotifyNoReply, "POST /session/%s/message",
			opencodetest.Fault{Late: true, Delay: 2 * time.Second, Times: 1}},
		{"prompt_async lands late", asyncagents.NotifyPerRun, "POST /session/%s/prompt_async",
			opencodetest.Fault{Late: true, Delay: 2 * time.Second, Times: 1}},
		{"turn prompt lands late", asyncagents.NotifyPerWave, "POST /session/%s/prompt_async",
			opencodetest.Fault{Late: true, Delay: 2 * time.Second, Times: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			proxy, c := proxied(t, srv)
			m := asyncagentstest.NewManager(t, c, asyncagents.WithNotifyPolicy(tc.policy), asyncagents.WithPollInterval(200*time.Millisecond))
			asyncagents.SetLossGrace(m, 2*time.Second) // a minute by default
			parent := asyncagentstest.NewParent(t, c)
			tc.fault.Pattern = fmt.Sprintf(tc.route, parent.SessionID)
			drop := proxy.Inject(tc.fault)
			task := asyncagentstest.Launch(t, m, parent, "RUN:echo lost")
			want := 2 // the lost post, then the check that found it or the post again
			if tc.policy == asyncagents.NotifyPerWave && tc.fault.Status == http.StatusNoContent {
				want = 1 // found missing later: asked again without a failed attempt
			}
			waitFor(t, 40*time.Second, func() bool {
				return delivered(m, task.ID) && note(m, task.ID).Attempts >= want && drop.Hits() == 1
			})
			if n := note(m, task.ID); n.Attempts != want || drop.Hits() != 1 {
				t.Errorf("notification %+v after %d dropped answers; want %d attempts", n, drop.Hits(), want)
			}
			if tc.policy == asyncagents.NotifyPerWave {
				waitFor(t, 30*time.Second, func() bool {
					return note(m, task.ID).Turn == asyncagents.TurnAsked && countTurnPrompts(t, srv.Client(), parent.SessionID) == 1
				})
				time.Sleep(3 * time.Second) // a turn prompt posted twice would be stored by now
				if n := countTurnPrompts(t, srv.Client(), parent.SessionID); n != 1 {
					t.Errorf("the parent has %d turn prompts, want 1", n)
				}
			}
			if tc.fault.Late {
				time.Sleep(tc.fault.Delay + time.Second) // the late request has landed
			}
			turns := 1 // the notification's prompt, or the turn prompt
			if tc.policy == asyncagents.NotifyNoReply {
				turns = 0
			}
			waitFor(t, 30*time.Second, func() bool {
				return countReplies(t, srv.Client(), parent.SessionID) >= turns && !busy(t.Context(), srv.Client(), parent.SessionID)
			})
			if n := countReplies(t, srv.Client(), parent.SessionID); n != turns {
				t.Errorf("the parent replied %d times, want %d", n, turns)
			}
			settle(t, m, srv.Client(), "✓ Agent ", map[string]int{parent.SessionID: 1})
		})
	}
}

// countReplies returns how many assistant messages the parent session has.
func countReplies(t *testing.T, c opencode.Client, parent string) int {
	t.Helper()
	return countMessages(t, c, parent, func(msg opencode.Message) bool { return msg.Info.Role == opencode.RoleAssistant })
}

// countTurnPrompts returns how many prompts asking for a turn the parent session has.
func countTurnPrompts(t *testing.T, c opencode.Client, parent string) int {
	t.Helper()
	return countMessages(t, c, parent, func(msg opencode.Message) bool {
		return msg.Info.Role == opencode.RoleUser && len(msg.Parts) == 1 && strings.Contains(msg.Parts[0].Text, "reported since your last turn")
	})
}

// countMessages returns how many messages of session id match.
func countMessages(t *testing.T, c opencode.Client, id string, match func(opencode.Message) bool) int {
	t.Helper()
	msgs, err := c.Messages(context.Background(), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, msg := range msgs {
		if match(msg) {
			n++
		}
	}
	return n
}

// N: while parent A is unreachable (its connections reset), parent B's notification is
// delivered promptly, and A's retries go on; A gets its own once it is back. The Manager's
// clock is fake, so A's retries come when the test advances it; B's delivery needs no
// advance at all.
func TestFaultUnreachableParentDelaysNoOther(t *testing.T) {
	t.Parallel()
	srv := shared.Get(t)
	proxy, c := proxied(t, srv)
	clock := fakeclock.New(time.Now())
	m := asyncagentstest.NewManager(t, c, fastPoll, asyncagents.WithClock(clock))
	a, b := asyncagentstest.NewParent(t, c), asyncagentstest.NewParent(t, c)
	ta := asyncagentstest.Launch(t, m, a, "RUN:echo a")
	restore := parentDown(proxy, a.SessionID, opencodetest.Fault{Reset: true})
	defer restore()
	waitFor(t, 30*time.Second, func() bool { return note(m, ta.ID).Attempts >= 1 })

	start := time.Now()
	tb := asyncagentstest.Launch(t, m, b, "RUN:echo b")
	asyncagentstest.AwaitTask(t, m, tb.ID, func(tk asyncagents.Task) bool {
		return tk.Status.Terminal()
	})
	ended := time.Now()
	if !testmain.Eventually(3*time.Second, func() bool { return delivered(m, tb.ID) }) {
		t.Fatalf("B not notified 3 s after its task ended, behind unreachable A: %+v", note(m, tb.ID))
	}
	t.Logf("B's task ran %v; notified %v after it ended", ended.Sub(start), time.Since(ended))
	before := note(m, ta.ID).Attempts
	waitFor(t, 30*time.Second, func() bool {
		clock.Advance(30 * time.Second)
		return note(m, ta.ID).Attempts >= before+3
	})
	if n := note(m, ta.ID); n.State != asyncagents.NotificationPending {
		t.Fatalf("A while down: %+v", n)
	}
	restore()
	waitFor(t, 30*time.Second, func() bool {
		clock.Advance(time.Minute)
		return delivered(m, ta.ID)
	})
	settle(t, m, srv.Client(), "✓ Agent ", map[string]int{a.SessionID: 1, b.SessionID: 1})
}

// N: parents whose requests hang — the server accepted the connection and never answers, as
// a stuck server or a half-open connection does — do not hold up another parent's
// notification: each attempt is bounded by the request timeout and more parents than that
// are served at once. Spec §4: "one unreachable parent never delays another".
func TestFaultHungParentsDelayNoOther(t *testing.T) {
	t.Parallel()
	srv := shared.Get(t)
	proxy, c := proxied(t, srv)
	m := asyncagentstest.NewManager(t, c, asyncagents.WithPollInterval(200*time.Millisecond), asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply),
		asyncagents.WithRequestTimeout(2*time.Second))
	const hung = 8
	var held []*opencodetest.Injection
	var stuck []string
	for range hung {
		p := asyncagentstest.NewParent(t, c)
		stuck = append(stuck, track(asyncagentstest.Launch(t, m, p, "RUN:echo stuck")))
		held = append(held, proxy.Inject(opencodetest.Fault{Pattern: "/session/" + p.SessionID + "/{rest...}", Delay: time.Hour}))
	}
	waitFor(t, 30*time.Second, func() bool {
		for _, h := range held {
			if h.Hits() == 0 {
				return false
			}
		}
		return true
	})
	b := asyncagentstest.NewParent(t, c)
	tb := asyncagentstest.Launch(t, m, b, "RUN:echo b")
	asyncagentstest.Await(t, m, b, tb.ID)
	if !testmain.Eventually(5*time.Second, func() bool { return delivered(m, tb.ID) }) {
		tk, _ := m.Get(tb.ID)
		t.Errorf("B's notification not delivered 5 s after its task ended (%s) while %d parents hang: %+v", tk.Status, hung, note(m, tb.ID))
	}
	for _, h := range held { // the hung parents are retried, not abandoned
		h.Remove()
	}
	for _, id := range stuck {
		asyncagentstest.AwaitTask(t, m, id, asyncagentstest.Delivered)
	}
}

// T-19, T-20: the host restarts. A Manager on a FileStore closes while its tasks run (they
// go on on the server); one finishes while no Manager runs. A new Manager on the same file
// (once the first store is closed: the file is locked until then) finishes every task and
// tells each parent once per task.
func TestFaultHostRestartOnFileStore(t *testing.T) {
	t.Parallel()
	srv := shared.Get(t)
	c := srv.Client()
	ctx := ctxT(t, 90*time.Second)
	path := filepath.Join(t.TempDir(), "tasks.json")
	store1, err := asyncagents.NewFileStore(path)
	if err != nil {
		t.Fatal(err)
	}
	m1 := asyncagentstest.NewManager(t, c, asyncagents.WithStore(store1), asyncagents.WithPollInterval(200*time.Millisecond), asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply))
	p1, p2 := asyncagentstest.NewParent(t, c), asyncagentstest.NewParent(t, c)
	early := asyncagentstest.Launch(t, m1, p1, "SLEEP:1") // ends while no Manager runs
	late := asyncagentstest.Launch(t, m1, p1, "SLEEP:4")  // still running when the next Manager starts
	other := asyncagentstest.Launch(t, m1, p2, "SLEEP:2")
	if err := m1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m1.Get(early.ID); !errors.Is(err, asyncagents.ErrClosed) {
		t.Errorf("Get after Close = %v", err)
	}
	asyncagentstest.AwaitBusy(t, c, late.SessionID) // T-20: Close left it running
	if _, err := asyncagents.NewFileStore(path); !errors.Is(err, asyncagents.ErrStoreLocked) {
		t.Fatalf("second store while the first is open: %v, want ErrStoreLocked", err)
	}
	if err := store1.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, func() bool { // the early task finishes with no Manager watching
		msgs, err := c.Messages(ctx, early.SessionID, 1)
		return err == nil && len(msgs) == 1 && msgs[0].Info.Finish == "stop" && !busy(ctx, c, early.SessionID)
	})

	store2 := openFileStore(t, path)
	m2 := asyncagentstest.NewManager(t, c, asyncagents.WithStore(store2), asyncagents.WithPollInterval(200*time.Millisecond), asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply))
	for _, tk := range []asyncagents.Task{early, late, other} {
		caller := asyncagents.Caller{SessionID: tk.ParentSessionID}
		out, err := m2.Output(ctx, caller, tk.ID, asyncagents.OutputOptions{Block: true, Timeout: 30 * time.Second})
		if err != nil || out.Task.Status != asyncagents.StatusCompleted || !strings.Contains(out.Task.Result, "slept ") ||
			out.Task.BatchID != tk.BatchID || out.Task.Description != tk.Description {
			t.Fatalf("task %s after the host restart: %+v, %v", tk.ID, out.Task, err)
		}
	}
	for _, id := range []string{early.ID, late.ID, other.ID} {
		asyncagentstest.AwaitTask(t, m2, id, asyncagentstest.Delivered)
	}
	settle(t, m2, c, "✓ Agent ", map[string]int{p1.SessionID: 2, p2.SessionID: 1})
}

// T-6, §8: events the server never sent in that order — session.idle before the reply
// starts and again mid-run, session.status idle, idles of unknown sessions, a malformed
// frame — and the event stream cut in the middle of the runs: every task completes with its
// real result, once, and each parent is told once per task.
func TestFaultEventStreamCutAndInjectedIdle(t *testing.T) {
	t.Parallel()
	srv := shared.Get(t)
	proxy, c := proxied(t, srv)
	ctx := ctxT(t, 90*time.Second)
	m := asyncagentstest.NewManager(t, c, asyncagents.WithPollInterval(time.Second), asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply))
	waitFor(t, 10*time.Second, func() bool { return proxy.EventStreams() == 1 })
	idle := func(tk asyncagents.Task) {
		props := json.RawMessage(fmt.Sprintf(`{"sessionID":%q}`, tk.ID))
		proxy.SendEvent(tk.Directory, opencode.Event{Type: opencode.EventSessionIdle, Properties: props})
		proxy.SendEvent(tk.Directory, opencode.Event{Type: opencode.EventSessionStatus,
			Properties: json.RawMessage(fmt.Sprintf(`{"sessionID":%q,"status":{"type":"idle"}}`, tk.ID))})
	}
	p1, p2 := asyncagentstest.NewParent(t, c), asyncagentstest.NewParent(t, c)
	var tasks []asyncagents.Task
	for _, l := range []struct {
		p      asyncagents.Caller
		prompt string
	}{{p1, "SLEEP:5"}, {p1, "RUN:echo one ||| echo two"}, {p2, "SLEEP:5.5"}} {
		tk := asyncagentstest.Launch(t, m, l.p, l.prompt)
		idle(tk) // before the reply has started
		tasks = append(tasks, tk)
	}
	proxy.SendEvent(srv.Directory, opencode.Event{Type: opencode.EventSessionIdle, Properties: json.RawMessage(`{"sessionID":"ses_nosuchsession"}`)})
	proxy.SendEvent(srv.Directory, opencode.Event{Type: opencode.EventSessionIdle, Properties: json.RawMessage(`{"sessionID":5}`)})
	waitFor(t, 30*time.Second, func() bool { return busy(ctx, c, tasks[0].SessionID) && lastIsAssistant(ctx, c, tasks[0].SessionID) })
	idle(tasks[0]) // mid-run, while the model streams
	idle(tasks[2])
	if n := proxy.CutEvents(); n != 1 {
		t.Fatalf("cut %d streams", n)
	}
	waitFor(t, 15*time.Second, func() bool { return proxy.EventStreams() == 1 }) // reconnected

	want := []string{"slept 5", "Ran 2 command(s); last output: two", "slept 5.5"}
	for i, tk := range tasks {
		out, err := m.Output(ctx, asyncagents.Caller{SessionID: tk.ParentSessionID}, tk.ID, asyncagents.OutputOptions{Block: true, Timeout: 30 * time.Second})
		if err != nil || out.Task.Status != asyncagents.StatusCompleted || !strings.HasSuffix(out.Task.Result, want[i]) {
			t.Errorf("task %q: %+v, %v; want completed with %q", tk.Prompt, out.Task, err, want[i])
		}
		idle(tk) // late duplicates
	}
	for _, id := range []string{tasks[0].ID, tasks[1].ID, tasks[2].ID} {
		asyncagentstest.AwaitTask(t, m, id, asyncagentstest.Delivered)
	}
	for _, tk := range tasks {
		if got, _ := m.Get(tk.ID); len(got.Notifications) != 1 || got.Status != asyncagents.StatusCompleted {
			t.Errorf("task %s: %s with notifications %+v", tk.ID, got.Status, got.Notifications)
		}
	}
	settle(t, m, srv.Client(), "✓ Agent ", map[string]int{p1.SessionID: 2, p2.SessionID: 1})
}

// T-23, §8: the server is SIGKILLed while one task's model streams and another's bash tool
// runs, and comes back on the same port and data. Nothing was written for the cut runs (no
// finish, no error, no completion time), yet each task ends in error ("interrupted") soon
// after the server is back, with one notification.
func TestFaultServerKilledInterruptsRuns(t *testing.T) {
	t.Parallel()
	srv := opencodetest.Start(t)
	c := srv.Client()
	ctx := ctxT(t, 120*time.Second)
	m := asyncagentstest.NewManager(t, c, fastPoll) // the defaults, as asyncagents serve runs
	// Right after its restart OpenCode may acknowledge a notification and never store it: it
	// is posted again once that is seen, a minute later by default.
	asyncagents.SetLossGrace(m, 3*time.Second)
	p := asyncagentstest.NewParent(t, c)
	tasks := []asyncagents.Task{
		asyncagentstest.Launch(t, m, p, "SLEEP:30"),     // the model is streaming
		asyncagentstest.Launch(t, m, p, "RUN:sleep 30"), // a tool is running
	}
	waitMidRun(t, ctx, c, tasks)
	oldURL := srv.URL
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if srv.URL != oldURL {
		t.Skip("the server's port was taken during the restart: the direct client cannot follow")
	}
	back := time.Now()
	ended := func() bool {
		for _, tk := range tasks {
			if got, err := m.Get(tk.ID); err != nil || got.Status != asyncagents.StatusError {
				return false
			}
		}
		return true
	}
	if !testmain.Eventually(20*time.Second, ended) {
		for _, tk := range tasks {
			got, _ := m.Get(tk.ID)
			msgs, err := srv.Client().Messages(context.Background(), tk.SessionID, 3)
			t.Logf("task %s %s %q; last messages (%v):", tk.ID, got.Status, got.Error, err)
			for _, msg := range msgs {
				b, _ := json.Marshal(msg)
				t.Logf("  %s", b)
			}
		}
		t.Fatal("runs cut by the crash not decided 20 s after the server was back")
	}
	t.Logf("all tasks ended %v after the server was back", time.Since(back))
	for _, tk := range tasks {
		if got, _ := m.Get(tk.ID); !strings.Contains(got.Error, "interrupted") {
			t.Errorf("task %s error = %q, want interrupted", tk.ID, got.Error)
		}
	}
	for _, id := range []string{tasks[0].ID, tasks[1].ID} {
		asyncagentstest.AwaitTask(t, m, id, asyncagentstest.Delivered)
	}
	asyncagentstest.AwaitNotifications(t, srv.Client(), p.SessionID, 2)
	settle(t, m, srv.Client(), "✗ Agent ", map[string]int{p.SessionID: 2})
}

// prompts returns the user messages of session id that carry text, and the number of text
// parts each has.
func prompts(t *testing.T, c opencode.Client, id, text string) []int {
	t.Helper()
	msgs, err := c.Messages(context.Background(), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	var parts []int
	for _, msg := range msgs {
		n := 0
		for _, p := range msg.Parts {
			if p.Type == opencode.PartText && p.Text == text {
				n++
			}
		}
		if msg.Info.Role == opencode.RoleUser && n > 0 {
			parts = append(parts, n)
		}
	}
	return parts
}

// T-4, T-18, T-21, §8: the answer to a run's prompt is lost, or the prompt never reaches the
// server, or the server answers and drops it. Launches, forked launches, queued starts and
// follow-ups alike: the run goes on as the server runs it and ends completed, with one
// notification, and the server got the prompt once (one message, one text part).
func TestFaultLostPromptReachesServerOnce(t *testing.T) {
	t.Parallel()
	srv := shared.Get(t)
	type scenario struct {
		name  string
		fault func(child string) opencodetest.Fault // the fault on the run's prompt
		fork  bool
	}
	dropped := func(child string) opencodetest.Fault {
		return opencodetest.Fault{Pattern: "POST /session/" + child + "/prompt_async", DropResponse: true, Times: 1}
	}
	for _, sc := range []scenario{
		{name: "answer lost", fault: dropped},
		{name: "not forwarded", fault: func(child string) opencodetest.Fault {
			return opencodetest.Fault{Pattern: "POST /session/" + child + "/prompt_async", Reset: true, Times: 1}
		}},
		{name: "acknowledged and dropped", fault: func(child string) opencodetest.Fault {
			return opencodetest.Fault{Pattern: "POST /session/" + child + "/prompt_async", Status: http.StatusNoContent, Times: 1}
		}},
		{name: "forked, context answer lost", fork: true},
	} {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			proxy, c := proxied(t, srv)
			ctx := ctxT(t, 90*time.Second)
			m := asyncagentstest.NewManager(t, c, asyncagents.WithPollInterval(200*time.Millisecond), asyncagents.WithFollowUpQueue(1),
				asyncagents.WithConcurrency(asyncagents.Limits{Default: 1}))
			asyncagents.SetLossGrace(m, 5*time.Second) // a minute by default
			parent := asyncagentstest.NewParent(t, c)
			in := asyncagents.LaunchInput{Caller: parent, Description: "lost", Agent: "general", Prompt: "RUN:echo first"}
			if sc.fork {
				ps, _ := parentWithWork(t, c)
				parent = asyncagents.Caller{SessionID: ps.ID, Agent: "build"}
				in.Caller = parent
				// The first POST …/message of a forked launch is its context (the
				// notification, posted without reply too, comes after the run).
				inj := proxy.Inject(opencodetest.Fault{Pattern: "POST /session/{id}/message", DropResponse: true, Times: 1})
				in.Fork = true
				task, err := m.Launch(ctx, in)
				if err == nil {
					task = asyncagentstest.Started(t, m, task)
				}
				if err != nil || inj.Hits() != 1 {
					t.Fatalf("forked launch with its context's answer lost = %+v, %v (%d hits)", task, err, inj.Hits())
				}
				if got := asyncagentstest.Await(t, m, parent, task.ID); got.Status != asyncagents.StatusCompleted {
					t.Fatalf("task = %s %q", got.Status, got.Error)
				}
				msgs, err := c.Messages(ctx, task.SessionID, 0)
				if err != nil || len(msgs) == 0 || len(msgs[0].Parts) != 1 || !msgs[0].Parts[0].Synthetic {
					t.Fatalf("context messages = %+v, %v; want one synthetic part first", msgs, err)
				}
				settle(t, m, srv.Client(), "✓ Agent ", map[string]int{parent.SessionID: 1})
				return
			}
			// A blocker holds the one slot, so that the task under test is queued and its
			// session known before its prompt is sent.
			blocker := asyncagentstest.Launch(t, m, parent, "SLEEP:4") // holds the slot through the launch below, also on a slow machine
			task, err := m.Launch(ctx, in)
			if err == nil {
				task = asyncagentstest.Started(t, m, task)
			}
			if err != nil || task.Status != asyncagents.StatusQueued {
				t.Fatalf("second launch = %s, %v; want queued", task.Status, err)
			}
			start := proxy.Inject(sc.fault(task.SessionID)) // its queued start
			if got := asyncagentstest.Await(t, m, parent, task.ID); got.Status != asyncagents.StatusCompleted || !strings.Contains(got.Result, "first") {
				t.Fatalf("queued start with a fault (%d hits): %s %q %q", start.Hits(), got.Status, got.Error, got.Result)
			}
			follow := proxy.Inject(sc.fault(task.SessionID)) // a follow-up
			if _, err := m.Resume(ctx, parent, task.ID, "RUN:echo second"); err != nil {
				t.Fatal(err)
			}
			if got := asyncagentstest.Await(t, m, parent, task.ID); got.Status != asyncagents.StatusCompleted || !strings.Contains(got.Result, "second") {
				t.Fatalf("follow-up with a fault (%d hits): %s %q %q", follow.Hits(), got.Status, got.Error, got.Result)
			}
			if start.Hits() != 1 || follow.Hits() != 1 {
				t.Errorf("faults hit %d and %d times, want 1 each", start.Hits(), follow.Hits())
			}
			for _, p := range []string{"RUN:echo first", "RUN:echo second"} {
				if got := prompts(t, srv.Client(), task.SessionID, p); !slices.Equal(got, []int{1}) {
					t.Errorf("prompt %q reached the server as %v (messages × text parts), want once", p, got)
				}
			}
			for _, id := range []string{blocker.ID, task.ID} {
				asyncagentstest.AwaitTask(t, m, id, asyncagentstest.Delivered)
			}
			// The blocker, the task and its resume.
			settle(t, m, srv.Client(), "✓ ", map[string]int{parent.SessionID: 3})
		})
	}
}
