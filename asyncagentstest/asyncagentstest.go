package asyncagentstest

import (
	"context"
	"strings"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/internal/poll"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// TB is the part of [testing.TB] the functions use: *testing.T, *testing.B and
// *testing.F implement it, and so can the test object of another framework. Fatalf must
// end the test's goroutine, as t.Fatalf does (when it returns, the function that called
// it returns zero values at once).
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(f func())
}

// AwaitTimeout is how long the waits of this package wait: [Await] for a task to end,
// measured by the Manager's clock ([asyncagents.WithClock]); [AwaitTask], [AwaitBusy] and
// [AwaitNotifications] by the wall clock.
const AwaitTimeout = time.Minute

// NewFakeClient returns a new in-memory OpenCode, [opencodetest.NewFakeClient] with opts,
// and closes it when the test and its subtests have ended (t.Cleanup).
func NewFakeClient(t TB, opts ...opencodetest.FakeOption) *opencodetest.FakeClient {
	t.Helper()
	f := opencodetest.NewFakeClient(opts...)
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// NewManager returns a Manager on client, made by [asyncagents.New] with opts; when New
// fails (a nil client, a bad option, the Store's Load error) the test fails at once. The
// Manager is closed when the test and its subtests have ended, before the cleanups
// registered earlier run (those of the client, when NewFakeClient made it).
func NewManager(t TB, client opencode.Client, opts ...asyncagents.Option) *asyncagents.Manager {
	t.Helper()
	m, err := asyncagents.New(client, opts...)
	if err != nil {
		t.Fatalf("asyncagentstest: New: %v", err)
		return nil
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	return m
}

// NewParent creates a session titled "parent" on client (POST /session) and returns it as
// the caller of the tasks a test launches: Caller{SessionID: the session's id, Agent:
// "build"}. The test fails at once when the session cannot be created.
func NewParent(t TB, client opencode.Client) asyncagents.Caller {
	t.Helper()
	s, err := client.CreateSession(context.Background(), opencode.CreateSessionRequest{Title: "parent"})
	if err != nil {
		t.Fatalf("asyncagentstest: create the parent session: %v", err)
		return asyncagents.Caller{}
	}
	return asyncagents.Caller{SessionID: s.ID, Agent: "build"}
}

// Launch launches a task for caller ([asyncagents.Manager.Launch]) with prompt, the
// description "test" and the agent "general" (a subagent of every OpenCode server), and
// returns it once its start is over (Task.Starting unset, as [AwaitTask] reads it): with its
// session (Task.SessionID) and its prompt sent, running, or queued under a concurrency
// limit; or ended, when its start failed. The test fails at once when Launch returns an
// error or the start is not over within [AwaitTimeout].
func Launch(t TB, m *asyncagents.Manager, caller asyncagents.Caller, prompt string) asyncagents.Task {
	t.Helper()
	task, err := m.Launch(context.Background(), asyncagents.LaunchInput{Caller: caller, Description: "test", Agent: "general", Prompt: prompt})
	if err != nil {
		t.Fatalf("asyncagentstest: Launch: %v", err)
		return asyncagents.Task{}
	}
	return Started(t, m, task)
}

// Started waits until task's start is over, as [Launch] does, and returns the task then.
func Started(t TB, m *asyncagents.Manager, task asyncagents.Task) asyncagents.Task {
	t.Helper()
	if !task.Starting {
		return task
	}
	return AwaitTask(t, m, task.ID, func(tk asyncagents.Task) bool { return !tk.Starting || tk.Status.Terminal() })
}

// Await waits until the caller's task id ends, however it ends (completed, error or
// cancelled), and returns the ended task. It calls [asyncagents.Manager.Output] with Block
// and [AwaitTimeout], so a completed task is marked retrieved, as by any Output. The test
// fails at once when Output returns an error (ErrTaskNotFound for an id that is not the
// caller's, …) or the task has not ended within AwaitTimeout.
func Await(t TB, m *asyncagents.Manager, caller asyncagents.Caller, id string) asyncagents.Task {
	t.Helper()
	out, err := m.Output(context.Background(), caller, id, asyncagents.OutputOptions{Block: true, Timeout: AwaitTimeout})
	if err != nil {
		t.Fatalf("asyncagentstest: await %s: %v", id, err)
		return asyncagents.Task{}
	}
	if out.TimedOut {
		t.Fatalf("asyncagentstest: task %s is still %s after %v", id, out.Task.Status, AwaitTimeout)
		return asyncagents.Task{}
	}
	return out.Task
}

// pollEvery is how soon the waits of this package look again; they look less often as they
// wait, up to every 250 ms.
const pollEvery = 10 * time.Millisecond

// AwaitTask waits until the Manager's task id, as [asyncagents.Manager.Get] returns it
// (whatever its parent), satisfies cond, and returns it as cond saw it: running after it was
// queued, resumed, notified ([Delivered])… It reads the task every 10 ms at first, then
// less often (up to every 250 ms). The test fails at once when the task has not satisfied
// cond within AwaitTimeout of wall time (not the
// Manager's clock, which a test may hold still), naming the task's last status, or Get's last
// error: a task that is not found, or not yet (another host's), is waited for like one that
// does not satisfy cond.
func AwaitTask(t TB, m *asyncagents.Manager, id string, cond func(asyncagents.Task) bool) asyncagents.Task {
	t.Helper()
	return awaitTask(t, m, id, cond, AwaitTimeout)
}

func awaitTask(t TB, m *asyncagents.Manager, id string, cond func(asyncagents.Task) bool, within time.Duration) asyncagents.Task {
	t.Helper()
	var (
		task asyncagents.Task
		err  error
	)
	if eventually(within, func() bool { task, err = m.Get(id); return err == nil && cond(task) }) {
		return task
	}
	if err != nil {
		t.Fatalf("asyncagentstest: task %s: %v after %v", id, err, within)
	} else {
		t.Fatalf("asyncagentstest: task %s is %s, not as awaited, after %v", id, task.Status, within)
	}
	return asyncagents.Task{}
}

// Delivered reports whether the task's latest notification was delivered to its parent: a
// condition for [AwaitTask].
func Delivered(task asyncagents.Task) bool {
	n := len(task.Notifications)
	return n > 0 && task.Notifications[n-1].State == asyncagents.NotificationDelivered
}

// AwaitBusy waits until session id is busy: until SessionStatus of the client's default
// directory lists it, as OpenCode and the fake do from a run's prompt until the run ends (a
// held run of [opencodetest.WithHeldRuns] stays busy until it is released). It asks every
// 10 ms at first, then less often (up to every 250 ms); the test fails at once when
// SessionStatus fails, or the session is not busy within AwaitTimeout.
func AwaitBusy(t TB, c opencode.Client, id string) {
	t.Helper()
	awaitBusy(t, c, id, AwaitTimeout)
}

func awaitBusy(t TB, c opencode.Client, id string, within time.Duration) {
	t.Helper()
	var err error
	if eventually(within, func() bool {
		var st map[string]opencode.SessionStatus
		st, err = c.SessionStatus(context.Background(), "")
		_, busy := st[id]
		return err != nil || busy
	}) && err == nil {
		return
	}
	if err != nil {
		t.Fatalf("asyncagentstest: session status: %v", err)
		return
	}
	t.Fatalf("asyncagentstest: session %s not busy after %v", id, within)
}

// Release lets the held run of session id take its first model step, the replies answering
// its next steps ([opencodetest.FakeClient.Release]): Release(t, f, task.SessionID,
// opencodetest.Text("done")) makes the task's run answer "done". The test fails at once when
// Release fails (an unknown session).
func Release(t TB, f *opencodetest.FakeClient, id string, replies ...opencodetest.Reply) {
	t.Helper()
	if err := f.Release(id, replies...); err != nil {
		t.Fatalf("asyncagentstest: release %s: %v", id, err)
	}
}

// Notifications returns the visible texts of the task notifications that the parent session
// holds, oldest first, as its messages show them (GET /session/{id}/message): in each user
// message, each text part that is not synthetic, names the task progress ("Task Progress:
// 1/2") and is followed by a synthetic part, the notification's hint. One message may carry
// several (notifications merged into one post). The test fails at once when the messages
// cannot be read.
func Notifications(t TB, c opencode.Client, parent string) []string {
	t.Helper()
	got, err := notifications(c, parent)
	if err != nil {
		t.Fatalf("asyncagentstest: messages of %s: %v", parent, err)
		return nil
	}
	return got
}

func notifications(c opencode.Client, parent string) ([]string, error) {
	msgs, err := c.Messages(context.Background(), parent, 0)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range msgs {
		if m.Info.Role != opencode.RoleUser {
			continue
		}
		for i := 0; i+1 < len(m.Parts); i++ {
			if p := m.Parts[i]; !p.Synthetic && m.Parts[i+1].Synthetic && strings.Contains(p.Text, "Task Progress") {
				out = append(out, p.Text)
				i++
			}
		}
	}
	return out, nil
}

// AwaitNotifications waits until the parent session holds at least n notifications (see
// [Notifications]) and returns them. It reads the parent's messages every 10 ms at first,
// then less often (up to every 250 ms); the test fails at once when they cannot be read, or
// do not hold n notifications within AwaitTimeout.
func AwaitNotifications(t TB, c opencode.Client, parent string, n int) []string {
	t.Helper()
	return awaitNotifications(t, c, parent, n, AwaitTimeout)
}

func awaitNotifications(t TB, c opencode.Client, parent string, n int, within time.Duration) []string {
	t.Helper()
	var (
		got []string
		err error
	)
	if eventually(within, func() bool { got, err = notifications(c, parent); return err != nil || len(got) >= n }) && err == nil {
		return got
	}
	if err != nil {
		t.Fatalf("asyncagentstest: messages of %s: %v", parent, err)
		return nil
	}
	t.Fatalf("asyncagentstest: %s holds %d notifications after %v, want %d: %q", parent, len(got), within, n, got)
	return nil
}

// eventually checks cond every pollEvery at first, then less often, up to every 250 ms,
// until it holds (true) or d has passed (false).
func eventually(d time.Duration, cond func() bool) bool {
	return poll.Until(d, pollEvery, cond)
}
