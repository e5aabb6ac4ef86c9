package asyncagentstest

import (
	"context"
	"time"

	"github.com/asyncagents/asyncagents"
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

// AwaitTimeout is how long [Await] waits for a task to end, measured by the Manager's
// clock ([asyncagents.WithClock]).
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
// returns it as Launch does: running, or queued under a concurrency limit. The test fails
// at once when Launch returns an error.
func Launch(t TB, m *asyncagents.Manager, caller asyncagents.Caller, prompt string) asyncagents.Task {
	t.Helper()
	task, err := m.Launch(context.Background(), asyncagents.LaunchInput{Caller: caller, Description: "test", Agent: "general", Prompt: prompt})
	if err != nil {
		t.Fatalf("asyncagentstest: Launch: %v", err)
		return asyncagents.Task{}
	}
	return task
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
