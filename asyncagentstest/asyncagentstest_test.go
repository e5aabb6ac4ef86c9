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
	if err := f.Release(done.ID, opencodetest.Text("all done")); err != nil {
		t.Fatal(err)
	}
	failed := asyncagentstest.Launch(t, m, caller, "work")
	if err := f.Release(failed.ID, opencodetest.Fail(400)); err != nil {
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

// The same helpers run on the real OpenCode server.
func TestOnRealServer(t *testing.T) {
	srv := shared.Get(t)
	m := asyncagentstest.NewManager(t, srv.Client())
	caller := asyncagentstest.NewParent(t, srv.Client())
	task := asyncagentstest.Await(t, m, caller, asyncagentstest.Launch(t, m, caller, "RUN:echo real").ID)
	if task.Status != asyncagents.StatusCompleted || !strings.Contains(task.Result, "real") {
		t.Errorf("task = %s %q %q", task.Status, task.Result, task.Error)
	}
}
