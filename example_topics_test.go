package asyncagents_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// One example per question hosts ask: resume, cancel, watching every task, concurrency
// limits, permission requests and a store that outlives the process. Like the others they
// run on opencodetest's in-memory OpenCode; with WithHeldRuns a run waits, busy, until the
// example releases it with the reply its model gives.

// exampleParent creates a parent session on client and returns it as a caller.
func exampleParent(ctx context.Context, client opencode.Client) asyncagents.Caller {
	parent, err := client.CreateSession(ctx, opencode.CreateSessionRequest{Title: "parent"})
	if err != nil {
		log.Fatal(err)
	}
	return asyncagents.Caller{SessionID: parent.ID, Agent: "build"}
}

// A follow-up to a task that ended goes to the same session, which still holds the
// first run's messages; the task runs again and ends with the follow-up's reply.
func ExampleManager_Resume() {
	ctx := context.Background()
	client := opencodetest.NewFakeClient()
	defer client.Close()
	m, err := asyncagents.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close(ctx)
	caller := exampleParent(ctx, client)

	task, err := m.Launch(ctx, asyncagents.LaunchInput{
		Caller: caller, Description: "count files", Agent: "general", Prompt: "RUN:echo 42 files",
	})
	if err != nil {
		log.Fatal(err)
	}
	out, err := m.Output(ctx, caller, task.ID, asyncagents.OutputOptions{Block: true})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(out.Task.Status+":", out.Task.Result)

	task, err = m.Resume(ctx, caller, task.ID, "RUN:echo 7 of them are tests")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.Status, "- follow-ups sent:", task.ResumeCount)

	out, err = m.Output(ctx, caller, task.ID, asyncagents.OutputOptions{Block: true})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(out.Task.Status+":", out.Task.Result)
	// Output:
	// completed: Ran 1 command(s); last output: 42 files
	// resumed - follow-ups sent: 1
	// completed: Ran 1 command(s); last output: 7 of them are tests
}

// Cancel aborts a running task's session; the task ends cancelled and its parent is told.
// A task that is not active cannot be cancelled.
func ExampleManager_Cancel() {
	ctx := context.Background()
	client := opencodetest.NewFakeClient(opencodetest.WithHeldRuns()) // runs wait: the task stays running
	defer client.Close()
	m, err := asyncagents.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close(ctx)
	caller := exampleParent(ctx, client)

	task, err := m.Launch(ctx, asyncagents.LaunchInput{
		Caller: caller, Description: "long scan", Agent: "general", Prompt: "Scan the whole repository.",
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.Status)

	task, err = m.Cancel(ctx, caller, task.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.Status)

	_, err = m.Cancel(ctx, caller, task.ID)
	fmt.Println(errors.Is(err, asyncagents.ErrNotRunning))
	// Output:
	// running
	// cancelled
	// true
}

// A host's status page shows every task of the Manager, whatever its parent: ListAll for
// a look, Subscribe for the tasks as they are now and every change from then on.
func ExampleManager_Subscribe() {
	ctx := context.Background()
	client := opencodetest.NewFakeClient(opencodetest.WithHeldRuns())
	defer client.Close()
	m, err := asyncagents.New(client, asyncagents.WithNotifications(false))
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close(ctx)
	alice, bob := exampleParent(ctx, client), exampleParent(ctx, client)

	first, err := m.Launch(ctx, asyncagents.LaunchInput{Caller: alice, Description: "lint", Agent: "general", Prompt: "lint"})
	if err != nil {
		log.Fatal(err)
	}
	sub, tasks, err := m.Subscribe(0)
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	for _, t := range tasks {
		fmt.Printf("now: %s %s\n", t.Description, t.Status)
	}

	second, err := m.Launch(ctx, asyncagents.LaunchInput{Caller: bob, Description: "test", Agent: "general", Prompt: "test"})
	if err != nil {
		log.Fatal(err)
	}
	_ = client.Release(sessionOfTask(m, first), opencodetest.Text("no findings"))

	// Print each change of status, until both tasks completed; the second task's run is
	// released when the first one completed.
	last := map[string]asyncagents.Status{first.ID: asyncagents.StatusRunning}
	for done := 0; done < 2; {
		c, ok := <-sub.Changes()
		if !ok {
			log.Fatal(sub.Err()) // ErrLagged: the reader fell a whole buffer behind
		}
		if last[c.Task.ID] == c.Task.Status {
			continue // another change: a tool call counted, a notification's progress, …
		}
		last[c.Task.ID] = c.Task.Status
		fmt.Printf("change: %s %s\n", c.Task.Description, c.Task.Status)
		if c.Task.Status == asyncagents.StatusCompleted {
			done++
		}
		if c.Task.ID == first.ID && c.Task.Status == asyncagents.StatusCompleted {
			_ = client.Release(sessionOfTask(m, second), opencodetest.Text("all pass"))
		}
	}

	completed, err := m.ListAll(asyncagents.StatusCompleted)
	if err != nil {
		log.Fatal(err)
	}
	for _, t := range completed { // newest first
		fmt.Printf("completed: %s: %s\n", t.Description, t.Result)
	}
	// Output:
	// now: lint running
	// change: test running
	// change: lint completed
	// change: test completed
	// completed: test: all pass
	// completed: lint: no findings
}

// With a limit of one running task, a second launch is queued and starts as soon as the
// first run ends: here, when the first is released.
func ExampleWithConcurrency() {
	ctx := context.Background()
	client := opencodetest.NewFakeClient(opencodetest.WithHeldRuns())
	defer client.Close()
	m, err := asyncagents.New(client,
		asyncagents.WithConcurrency(asyncagents.Limits{Default: 1}), // Providers and Models set other limits
		asyncagents.WithNotifications(false))
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close(ctx)
	caller := exampleParent(ctx, client)

	first, err := m.Launch(ctx, asyncagents.LaunchInput{Caller: caller, Description: "first", Agent: "general", Prompt: "one"})
	if err != nil {
		log.Fatal(err)
	}
	second, err := m.Launch(ctx, asyncagents.LaunchInput{Caller: caller, Description: "second", Agent: "general", Prompt: "two"})
	if err != nil {
		log.Fatal(err)
	}
	first, second = startedTask(m, first), startedTask(m, second) // Launch returns before the start
	fmt.Println(first.Description, first.Status)
	fmt.Println(second.Description, second.Status, "at position", second.QueuePosition)

	// Follow both tasks from now on.
	sub, tasks, err := m.Subscribe(0)
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	history := map[string][]asyncagents.Status{}
	for _, t := range tasks {
		history[t.Description] = []asyncagents.Status{t.Status}
	}
	_ = client.Release(sessionOfTask(m, first), opencodetest.Text("one done"))
	_ = client.Release(sessionOfTask(m, second), opencodetest.Text("two done")) // kept until its run begins
	for c := range sub.Changes() {
		h := history[c.Task.Description]
		if len(h) == 0 || h[len(h)-1] != c.Task.Status {
			history[c.Task.Description] = append(h, c.Task.Status)
		}
		if c.Task.ID == second.ID && c.Task.Status == asyncagents.StatusCompleted {
			break
		}
	}
	fmt.Println("first:", history["first"])
	fmt.Println("second:", history["second"])

	first, _ = m.Get(first.ID)
	second, _ = m.Get(second.ID)
	fmt.Println("second started when first ended:", !second.Started.Before(first.Completed))
	// Output:
	// first running
	// second queued at position 1
	// first: [running completed]
	// second: [queued running completed]
	// second started when first ended: true
}

// A permission policy answers the requests of task sessions, which otherwise wait for an
// answer that nobody gives: here OpenCode asks before a command reads a path outside the
// project, and the policy allows it once. ReplyAll(PermissionOnce) would allow every request.
func ExampleWithPermissionPolicy() {
	ctx := context.Background()
	client := opencodetest.NewFakeClient()
	defer client.Close()
	policy := func(t asyncagents.Task, req asyncagents.PendingPermission) asyncagents.PermissionReply {
		fmt.Printf("%q asks %s\n", t.Description, req)
		if req.Permission == "external_directory" {
			return asyncagents.PermissionOnce
		}
		return asyncagents.PermissionReject
	}
	m, err := asyncagents.New(client, asyncagents.WithPermissionPolicy(policy))
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close(ctx)
	caller := exampleParent(ctx, client)

	task, err := m.Launch(ctx, asyncagents.LaunchInput{
		Caller: caller, Description: "read config", Agent: "general", Prompt: "RUN:cat /no/such/file.txt",
	})
	if err != nil {
		log.Fatal(err)
	}
	out, err := m.Output(ctx, caller, task.ID, asyncagents.OutputOptions{Block: true})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(out.Task.Status+":", out.Task.Result)
	// Output:
	// "read config" asks external_directory /no/such/*
	// completed: Ran 1 command(s); last output: cat: /no/such/file.txt: No such file or directory
}

// With a FileStore, a Manager that starts after a restart of the host finds the tasks of
// the last one, and follows their runs to the end: here a task launched before the restart
// completes after it.
func ExampleFileStore_restart() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "asyncagents-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "tasks.jsonl")
	client := opencodetest.NewFakeClient(opencodetest.WithHeldRuns()) // the OpenCode server, which keeps running
	defer client.Close()
	caller := exampleParent(ctx, client)

	// Before the restart.
	store, err := asyncagents.NewFileStore(path)
	if err != nil {
		log.Fatal(err)
	}
	m, err := asyncagents.New(client, asyncagents.WithStore(store))
	if err != nil {
		log.Fatal(err)
	}
	task, err := m.Launch(ctx, asyncagents.LaunchInput{
		Caller: caller, Description: "migrate", Agent: "general", Prompt: "Migrate the schema.",
	})
	if err != nil {
		log.Fatal(err)
	}
	sid := sessionOfTask(m, task)        // its start made its session and sent its prompt
	if err := m.Close(ctx); err != nil { // the host stops: the Manager first, then its store
		log.Fatal(err)
	}
	if err := store.Close(); err != nil {
		log.Fatal(err)
	}
	_ = client.Release(sid, opencodetest.Text("schema migrated")) // the run ends while the host is down

	// After the restart.
	store, err = asyncagents.NewFileStore(path)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	m, err = asyncagents.New(client, asyncagents.WithStore(store))
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close(ctx) // runs before store.Close
	tasks, err := m.List(caller, "")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(tasks), "task:", tasks[0].Description)
	out, err := m.Output(ctx, caller, task.ID, asyncagents.OutputOptions{Block: true, Timeout: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(out.Task.Status+":", out.Task.Result)
	// Output:
	// 1 task: migrate
	// completed: schema migrated
}

// sessionOfTask returns the session task runs in, once its start is over: a launch returns
// before (Task.Starting).
func sessionOfTask(m *asyncagents.Manager, task asyncagents.Task) string {
	return startedTask(m, task).SessionID
}

// startedTask returns task as it is once its start is over.
func startedTask(m *asyncagents.Manager, task asyncagents.Task) asyncagents.Task {
	for range 1000 {
		if t, err := m.Get(task.ID); err != nil || !t.Starting {
			return t
		}
		time.Sleep(5 * time.Millisecond)
	}
	return task
}
