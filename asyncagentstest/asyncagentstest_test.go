package asyncagentstest_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/asyncagentstest"
	"github.com/asyncagents/asyncagents/internal/fakeclock"
	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

var shared opencodetest.Shared

// goleak runs after the tests: every Manager and FakeClient the helpers made is closed.
func TestMain(m *testing.M) { testmain.Run(m, shared.Close) }

// recorder is a TB that records failures; its Fatalf returns, so the function under test
// must return zero values at once. Cleanups are the test's.
type recorder struct {
	*testing.T
	failures []string
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
}

// failure calls f with a recorder and returns the failures it reported, "" for none. It may
// run on another goroutine than the test's.
func failure(t *testing.T, f func(tb asyncagentstest.TB) any) string {
	t.Helper()
	r := &recorder{T: t}
	v := f(r)
	if len(r.failures) > 1 {
		t.Errorf("more than one failure: %q", r.failures)
	}
	if len(r.failures) == 1 && !reflect.ValueOf(v).IsZero() {
		t.Errorf("after the failure %q it returned %+v, want the zero value", r.failures[0], v)
	}
	return strings.Join(r.failures, "")
}

// *testing.T, *testing.B and *testing.F are TBs.
var (
	_ asyncagentstest.TB = (*testing.T)(nil)
	_ asyncagentstest.TB = (*testing.B)(nil)
	_ asyncagentstest.TB = (*testing.F)(nil)
)

// NewFakeClient's client is closed when the test ends.
func TestNewFakeClientClosedAtEnd(t *testing.T) {
	var f *opencodetest.FakeClient
	t.Run("inner", func(t *testing.T) {
		f = asyncagentstest.NewFakeClient(t)
		if _, err := f.CreateSession(t.Context(), opencode.CreateSessionRequest{}); err != nil {
			t.Fatal(err)
		}
	})
	if _, err := f.CreateSession(t.Context(), opencode.CreateSessionRequest{}); err == nil {
		t.Fatal("CreateSession after the test ended: no error, want the fake closed")
	}
}

// NewManager's Manager is closed when the test ends, before the cleanups registered before
// it, the client's included.
func TestNewManagerClosedFirst(t *testing.T) {
	var m *asyncagents.Manager
	var clientOpen bool
	t.Run("inner", func(t *testing.T) {
		f := asyncagentstest.NewFakeClient(t)
		t.Cleanup(func() {
			_, err := m.Get("ses_x")
			if !errors.Is(err, asyncagents.ErrClosed) {
				t.Errorf("Get in an earlier cleanup = %v, want ErrClosed", err)
			}
			_, err = f.CreateSession(context.Background(), opencode.CreateSessionRequest{})
			clientOpen = err == nil
		})
		m = asyncagentstest.NewManager(t, f)
		if _, err := m.ListAll(""); err != nil {
			t.Fatal(err)
		}
	})
	if !clientOpen {
		t.Error("the client was closed before the Manager")
	}
	if _, err := m.Get("ses_x"); !errors.Is(err, asyncagents.ErrClosed) {
		t.Errorf("Get after the test = %v, want ErrClosed", err)
	}
}

// NewManager fails the test when New fails.
func TestNewManagerFailsOnBadOption(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t)
	got := failure(t, func(tb asyncagentstest.TB) any {
		return asyncagentstest.NewManager(tb, f, asyncagents.WithReconcilers(0))
	})
	if !strings.Contains(got, "reconcilers 0 must be 1 to 64") {
		t.Errorf("failure = %q", got)
	}
	got = failure(t, func(tb asyncagentstest.TB) any { return asyncagentstest.NewManager(tb, nil) })
	if !strings.Contains(got, asyncagents.ErrInvalidInput.Error()) {
		t.Errorf("nil client: failure = %q", got)
	}
}

// NewParent creates a session titled "parent" and returns it as a caller with agent
// "build"; it fails the test when the session cannot be created.
func TestNewParent(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t)
	caller := asyncagentstest.NewParent(t, f)
	s, err := f.GetSession(t.Context(), caller.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	if s.Title != "parent" || caller.Agent != "build" || caller.MessageID != "" {
		t.Errorf("session %q, caller %+v", s.Title, caller)
	}
	f.FailCalls("CreateSession", 1, nil)
	if got := failure(t, func(tb asyncagentstest.TB) any { return asyncagentstest.NewParent(tb, f) }); !strings.Contains(got, "create the parent session") {
		t.Errorf("failure = %q", got)
	}
}

// Launch launches with the description "test" and the agent "general", returns the task
// running or queued, and fails the test when Launch fails.
func TestLaunch(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	m := asyncagentstest.NewManager(t, f, asyncagents.WithConcurrency(asyncagents.Limits{Default: 1}),
		asyncagents.WithNotifications(false))
	caller := asyncagentstest.NewParent(t, f)
	first := asyncagentstest.Launch(t, m, caller, "one")
	second := asyncagentstest.Launch(t, m, caller, "two")
	if first.Description != "test" || first.Agent != "general" || first.Prompt != "one" ||
		first.ParentSessionID != caller.SessionID || first.Status != asyncagents.StatusRunning {
		t.Errorf("first = %+v", first)
	}
	if second.Status != asyncagents.StatusQueued {
		t.Errorf("second = %s, want queued", second.Status)
	}
	if got := failure(t, func(tb asyncagentstest.TB) any { return asyncagentstest.Launch(tb, m, caller, "") }); !strings.Contains(got, asyncagents.ErrInvalidInput.Error()) {
		t.Errorf("empty prompt: failure = %q", got)
	}
	for _, id := range []string{first.ID, second.ID} {
		if _, err := m.Cancel(t.Context(), caller, id); err != nil {
			t.Fatal(err)
		}
	}
}

// Await returns the task once it ended, however it ended; a completed one is marked
// retrieved.
func TestAwaitReturnsEndedTask(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	m := asyncagentstest.NewManager(t, f, asyncagents.WithNotifications(false))
	caller := asyncagentstest.NewParent(t, f)

	done := asyncagentstest.Launch(t, m, caller, "work")
	if err := f.Release(done.SessionID, opencodetest.Text("all done")); err != nil {
		t.Fatal(err)
	}
	failed := asyncagentstest.Launch(t, m, caller, "work")
	if err := f.Release(failed.SessionID, opencodetest.Fail(400)); err != nil {
		t.Fatal(err)
	}
	cancelled := asyncagentstest.Launch(t, m, caller, "work")
	if _, err := m.Cancel(t.Context(), caller, cancelled.ID); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id     string
		status asyncagents.Status
	}{{done.ID, asyncagents.StatusCompleted}, {failed.ID, asyncagents.StatusError}, {cancelled.ID, asyncagents.StatusCancelled}} {
		got := asyncagentstest.Await(t, m, caller, tc.id)
		if got.Status != tc.status || got.Retrieved.IsZero() != (tc.status != asyncagents.StatusCompleted) {
			t.Errorf("%s: status %s, retrieved %v; want %s", tc.id, got.Status, got.Retrieved, tc.status)
		}
	}
	if got := asyncagentstest.Await(t, m, caller, done.ID); got.Result != "all done" {
		t.Errorf("result = %q", got.Result)
	}
}

// Await fails the test when Output fails, and when the task has not ended within
// AwaitTimeout of the Manager's clock.
func TestAwaitFails(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	clock := fakeclock.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	m := asyncagentstest.NewManager(t, f, asyncagents.WithClock(clock), asyncagents.WithNotifications(false))
	caller := asyncagentstest.NewParent(t, f)

	if got := failure(t, func(tb asyncagentstest.TB) any { return asyncagentstest.Await(tb, m, caller, "ses_unknown") }); !strings.Contains(got, asyncagents.ErrTaskNotFound.Error()) {
		t.Errorf("unknown id: failure = %q", got)
	}
	other := asyncagentstest.NewParent(t, f)
	task := asyncagentstest.Launch(t, m, caller, "held")
	if got := failure(t, func(tb asyncagentstest.TB) any { return asyncagentstest.Await(tb, m, other, task.ID) }); !strings.Contains(got, asyncagents.ErrTaskNotFound.Error()) {
		t.Errorf("another caller's task: failure = %q", got)
	}

	got := make(chan string, 1)
	go func() {
		got <- failure(t, func(tb asyncagentstest.TB) any { return asyncagentstest.Await(tb, m, caller, task.ID) })
	}()
	if !clock.WaitFor(asyncagentstest.AwaitTimeout, t.Context().Done()) {
		t.Fatal("Await set no timer of AwaitTimeout")
	}
	clock.Advance(asyncagentstest.AwaitTimeout - time.Millisecond)
	select {
	case msg := <-got:
		t.Fatalf("Await returned before AwaitTimeout: %q", msg)
	default:
	}
	clock.Advance(time.Millisecond)
	if msg := <-got; !strings.Contains(msg, "is still running after 1m0s") {
		t.Errorf("timeout: failure = %q", msg)
	}
	if _, err := m.Cancel(t.Context(), caller, task.ID); err != nil {
		t.Fatal(err)
	}
}

// The same helpers run on the real OpenCode server: a task is busy while its model streams,
// ends, and its parent holds the notification.
func TestOnRealServer(t *testing.T) {
	srv := shared.Get(t)
	m := asyncagentstest.NewManager(t, srv.Client())
	caller := asyncagentstest.NewParent(t, srv.Client())
	launched := asyncagentstest.Launch(t, m, caller, "RUN:sleep 1 ||| echo real")
	asyncagentstest.AwaitBusy(t, srv.Client(), launched.SessionID)
	task := asyncagentstest.Await(t, m, caller, launched.ID)
	if task.Status != asyncagents.StatusCompleted || !strings.Contains(task.Result, "real") {
		t.Errorf("task = %s %q %q", task.Status, task.Result, task.Error)
	}
	asyncagentstest.AwaitTask(t, m, task.ID, asyncagentstest.Delivered)
	if got := asyncagentstest.AwaitNotifications(t, srv.Client(), caller.SessionID, 1); len(got) != 1 || !strings.HasPrefix(got[0], `✓ Agent "test" finished in `) {
		t.Errorf("notifications = %q", got)
	}
}

// AwaitTask returns the task once it satisfies the condition, whatever its parent: here once
// it runs, after it was queued, and once its parent was notified of its end.
func TestAwaitTask(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	m := asyncagentstest.NewManager(t, f, asyncagents.WithConcurrency(asyncagents.Limits{Default: 1}),
		asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply))
	caller := asyncagentstest.NewParent(t, f)
	first := asyncagentstest.Launch(t, m, caller, "one")
	second := asyncagentstest.Launch(t, m, caller, "two")
	asyncagentstest.Release(t, f, first.SessionID, opencodetest.Text("first done"))
	running := func(task asyncagents.Task) bool { return task.Status == asyncagents.StatusRunning }
	if got := asyncagentstest.AwaitTask(t, m, second.ID, running); got.ID != second.ID || got.Status != asyncagents.StatusRunning {
		t.Errorf("AwaitTask(running) = %s %s", got.ID, got.Status)
	}
	got := asyncagentstest.AwaitTask(t, m, first.ID, asyncagentstest.Delivered)
	if got.Status != asyncagents.StatusCompleted || len(got.Notifications) != 1 || got.Notifications[0].Delivered.IsZero() {
		t.Errorf("AwaitTask(Delivered) = %s, %+v", got.Status, got.Notifications)
	}
	if asyncagentstest.Delivered(second) {
		t.Error("Delivered of a running task without a notification")
	}
	if _, err := m.Cancel(t.Context(), caller, second.ID); err != nil {
		t.Fatal(err)
	}
}

// heldTask launches a task whose run is held, on a new fake and a Manager that sends no
// notifications, and returns them, the caller and the task.
func heldTask(t *testing.T) (*opencodetest.FakeClient, *asyncagents.Manager, asyncagents.Caller, asyncagents.Task) {
	t.Helper()
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	m := asyncagentstest.NewManager(t, f, asyncagents.WithNotifications(false))
	caller := asyncagentstest.NewParent(t, f)
	return f, m, caller, asyncagentstest.Launch(t, m, caller, "held")
}

// AwaitTask fails the test when the task does not satisfy the condition in time, naming its
// status, or Get's error for a task it cannot find.
func TestAwaitTaskFails(t *testing.T) {
	_, m, caller, task := heldTask(t)
	never := func(asyncagents.Task) bool { return false }
	if got := failure(t, func(tb asyncagentstest.TB) any {
		return asyncagentstest.AwaitTaskWithin(tb, m, task.ID, never, 50*time.Millisecond)
	}); !strings.Contains(got, "is running, not as awaited, after 50ms") {
		t.Errorf("condition never met: failure = %q", got)
	}
	if got := failure(t, func(tb asyncagentstest.TB) any {
		return asyncagentstest.AwaitTaskWithin(tb, m, "ses_unknown", never, 50*time.Millisecond)
	}); !strings.Contains(got, asyncagents.ErrTaskNotFound.Error()) {
		t.Errorf("unknown task: failure = %q", got)
	}
	if _, err := m.Cancel(t.Context(), caller, task.ID); err != nil {
		t.Fatal(err)
	}
}

// AwaitBusy returns once the session's run is under way (a held run is), and fails the test
// when the session is not busy in time or its status cannot be read.
func TestAwaitBusy(t *testing.T) {
	f, m, caller, task := heldTask(t)
	asyncagentstest.AwaitBusy(t, f, task.SessionID)
	if st, err := f.SessionStatus(t.Context(), ""); err != nil || st[task.SessionID].Type != "busy" {
		t.Errorf("after AwaitBusy: %v, %v", st, err)
	}
	if got := failure(t, func(tb asyncagentstest.TB) any {
		asyncagentstest.AwaitBusyWithin(tb, f, caller.SessionID, 50*time.Millisecond)
		return struct{}{}
	}); !strings.Contains(got, "session "+caller.SessionID+" not busy after 50ms") {
		t.Errorf("idle session: failure = %q", got)
	}
	f.FailCalls("SessionStatus", 1, errors.New("status unavailable"))
	if got := failure(t, func(tb asyncagentstest.TB) any {
		asyncagentstest.AwaitBusyWithin(tb, f, task.SessionID, time.Minute)
		return struct{}{}
	}); !strings.Contains(got, "status unavailable") {
		t.Errorf("failing SessionStatus: failure = %q", got)
	}
	asyncagentstest.Release(t, f, task.SessionID, opencodetest.Text("done"))
	if got := asyncagentstest.Await(t, m, caller, task.ID); got.Result != "done" {
		t.Errorf("released run: %s %q", got.Status, got.Result)
	}
}

// Release lets a held run go on with the replies given, and fails the test for a session the
// fake does not know.
func TestRelease(t *testing.T) {
	f, m, caller, task := heldTask(t)
	asyncagentstest.Release(t, f, task.SessionID, opencodetest.Fail(400))
	if got := asyncagentstest.Await(t, m, caller, task.ID); got.Status != asyncagents.StatusError {
		t.Errorf("run released with a failure: %s %q", got.Status, got.Result)
	}
	if got := failure(t, func(tb asyncagentstest.TB) any {
		asyncagentstest.Release(tb, f, "ses_unknown")
		return struct{}{}
	}); !strings.Contains(got, "release ses_unknown") || !strings.Contains(got, "not found") {
		t.Errorf("unknown session: failure = %q", got)
	}
}

// Notifications returns the visible text of each notification the parent holds, oldest
// first, also of notifications merged into one message; AwaitNotifications waits for them,
// and fails the test when they do not come in time or the parent cannot be read.
func TestNotifications(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	m := asyncagentstest.NewManager(t, f, asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply))
	caller := asyncagentstest.NewParent(t, f)
	if got := asyncagentstest.Notifications(t, f, caller.SessionID); len(got) != 0 {
		t.Errorf("before any run ended: %q", got)
	}
	var ids []string
	for range 3 {
		ids = append(ids, asyncagentstest.Launch(t, m, caller, "held").SessionID)
	}
	for _, id := range ids {
		asyncagentstest.Release(t, f, id, opencodetest.Text("done"))
	}
	got := asyncagentstest.AwaitNotifications(t, f, caller.SessionID, 3)
	if len(got) != 3 {
		t.Fatalf("notifications = %q, want 3", got)
	}
	for i, n := range got {
		if !strings.HasPrefix(n, `✓ Agent "test" finished in `) || !strings.HasSuffix(n, "/3") {
			t.Errorf("notification %d = %q", i, n)
		}
	}
	if again := asyncagentstest.Notifications(t, f, caller.SessionID); !reflect.DeepEqual(again, got) {
		t.Errorf("Notifications = %q, AwaitNotifications = %q", again, got)
	}
	if got := failure(t, func(tb asyncagentstest.TB) any {
		return asyncagentstest.AwaitNotificationsWithin(tb, f, caller.SessionID, 4, 50*time.Millisecond)
	}); !strings.Contains(got, "holds 3 notifications after 50ms, want 4") {
		t.Errorf("a fourth that never comes: failure = %q", got)
	}
	merged := asyncagentstest.NewParent(t, f) // a message of the user, and one of two notifications
	for _, parts := range [][]opencode.TextPartInput{
		{opencode.NewText("hello, Task Progress: 0/0")},
		{opencode.NewText("✓ first\nTask Progress: 1/2"), opencode.NewSyntheticText("hint 1"),
			opencode.NewText("✗ second\nTask Progress: 2/2"), opencode.NewSyntheticText("hint 2")},
	} {
		if _, err := f.Prompt(t.Context(), merged.SessionID, opencode.PromptRequest{NoReply: true, Parts: parts}); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := asyncagentstest.Notifications(t, f, merged.SessionID), []string{"✓ first\nTask Progress: 1/2", "✗ second\nTask Progress: 2/2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("merged notifications = %q, want %q", got, want)
	}
	for _, read := range []func(tb asyncagentstest.TB) any{
		func(tb asyncagentstest.TB) any { return asyncagentstest.Notifications(tb, f, "ses_unknown") },
		func(tb asyncagentstest.TB) any { return asyncagentstest.AwaitNotifications(tb, f, "ses_unknown", 1) },
	} {
		if got := failure(t, read); !strings.Contains(got, "messages of ses_unknown") {
			t.Errorf("unknown parent: failure = %q", got)
		}
	}
}
