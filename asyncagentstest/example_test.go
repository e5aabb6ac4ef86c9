package asyncagentstest_test

import (
	"context"
	"fmt"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/asyncagentstest"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// exampleT stands in for the *testing.T of a host's test, which examples do not have: it
// runs the cleanups when the example ends, as a test does, and panics on a failure.
type exampleT struct{ cleanups []func() }

func (t *exampleT) Helper()                           {}
func (t *exampleT) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (t *exampleT) Cleanup(f func())                  { t.cleanups = append(t.cleanups, f) }

func (t *exampleT) end() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}

// startReview is the host's code under test: it launches a review task for the parent.
func startReview(m *asyncagents.Manager, parent asyncagents.Caller) (string, error) {
	// m.Launch(ctx, …) in the host's code; the prompt's directive makes the fake's model
	// run the command and answer with its output.
	task, err := m.Launch(context.Background(), asyncagents.LaunchInput{
		Caller: parent, Description: "review", Agent: "general", Prompt: "RUN:echo 3 files reviewed",
	})
	return task.ID, err
}

// A host's test: a Manager on the fake, a parent session, the host's code launches a task
// and the test awaits its end.
func Example() {
	t := &exampleT{} // in a host's test: func TestReview(t *testing.T)
	defer t.end()

	client := asyncagentstest.NewFakeClient(t)
	m := asyncagentstest.NewManager(t, client, asyncagents.WithNotifications(false))
	parent := asyncagentstest.NewParent(t, client)

	id, err := startReview(m, parent)
	if err != nil {
		t.Fatalf("startReview: %v", err)
	}
	task := asyncagentstest.Await(t, m, parent, id)
	fmt.Println(task.Status)
	fmt.Println(task.Result)
	// Output:
	// completed
	// Ran 1 command(s); last output: 3 files reviewed
}

// With held runs, a task stays running until the test releases it, here with the reply
// its model gives; the test checks what the host shows meanwhile.
func Example_heldRun() {
	t := &exampleT{}
	defer t.end()

	client := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	m := asyncagentstest.NewManager(t, client, asyncagents.WithNotifications(false))
	parent := asyncagentstest.NewParent(t, client)
	task := asyncagentstest.Launch(t, m, parent, "review the diff")

	running, _ := m.List(parent, asyncagents.StatusRunning)
	fmt.Println(len(running), "running")

	if err := client.Release(task.SessionID, opencodetest.Text("LGTM")); err != nil {
		t.Fatalf("Release: %v", err)
	}
	task = asyncagentstest.Await(t, m, parent, task.ID)
	fmt.Println(task.Status, task.Result)
	// Output:
	// 1 running
	// completed LGTM
}

// Replies queued on the fake answer the next model steps of any session: here a failed
// step (HTTP 400 from the model's provider) ends the task in error.
func Example_scriptedReplies() {
	t := &exampleT{}
	defer t.end()

	client := asyncagentstest.NewFakeClient(t)
	client.Enqueue(opencodetest.Fail(400))
	m := asyncagentstest.NewManager(t, client, asyncagents.WithNotifications(false))
	parent := asyncagentstest.NewParent(t, client)

	task := asyncagentstest.Await(t, m, parent, asyncagentstest.Launch(t, m, parent, "review").ID)
	fmt.Println(task.Status)
	fmt.Println(task.Error)
	// Output:
	// error
	// scripted failure (HTTP 400)
}
