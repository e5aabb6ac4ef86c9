package asyncagents_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"regexp"
	"strings"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// The examples run on opencodetest's in-memory OpenCode, whose model follows directives in
// the prompt ("RUN:cmd" runs bash, "QUOTE:prefix" quotes a line of the context). A host
// uses opencode.NewHTTPClient with the address of `opencode serve` instead.

// examplePoint is a fixed time for the fake server's timestamps and ids, so the examples
// print the same ids every run.
var examplePoint = time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)

func ExampleNew() {
	// client, err := opencode.NewHTTPClient("http://127.0.0.1:4096",
	//	opencode.WithBasicAuth("opencode", os.Getenv("OPENCODE_SERVER_PASSWORD")))
	client := opencodetest.NewFakeClient()
	defer client.Close()

	m, err := asyncagents.New(client, asyncagents.WithPollInterval(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close(context.Background())

	_, err = asyncagents.New(client, asyncagents.WithReconcilers(0))
	fmt.Println(errors.Is(err, asyncagents.ErrInvalidInput))
	fmt.Println(err)
	// Output:
	// true
	// asyncagents: invalid input: reconcilers 0 must be 1 to 64
}

func ExampleManager_Launch() {
	ctx := context.Background()
	client := opencodetest.NewFakeClient(opencodetest.WithClock(func() time.Time { return examplePoint }))
	defer client.Close()
	m, err := asyncagents.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close(ctx)

	// The parent session has done some work: a shell command printed a token.
	parent, _ := client.CreateSession(ctx, opencode.CreateSessionRequest{Title: "parent"})
	_, _ = client.Prompt(ctx, parent.ID, opencode.PromptRequest{Parts: []opencode.TextPartInput{
		opencode.NewText("RUN:echo DEPLOY_TOKEN=7f3a")}})

	// A forked task sees that work; a plain one would not.
	caller := asyncagents.Caller{SessionID: parent.ID, Agent: "build"}
	task, err := m.Launch(ctx, asyncagents.LaunchInput{
		Caller: caller, Description: "recall token", Agent: "general", Fork: true,
		Prompt: "QUOTE:DEPLOY_TOKEN=",
	})
	if err != nil {
		log.Fatal(err)
	}

	out, err := m.Output(ctx, caller, task.ID, asyncagents.OutputOptions{Block: true})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(out.Task.Forked, out.Task.ForkStats.FinalMessages, "messages inherited") // the start read them, after Launch
	fmt.Println(out.Task.Status+":", out.Task.Result)
	// Output:
	// true 3 messages inherited
	// completed: Found in the inherited context: DEPLOY_TOKEN=7f3a
}

func ExampleManager_Output() {
	ctx := context.Background()
	client := opencodetest.NewFakeClient()
	defer client.Close()
	m, err := asyncagents.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close(ctx)
	parent, _ := client.CreateSession(ctx, opencode.CreateSessionRequest{Title: "parent"})
	caller := asyncagents.Caller{SessionID: parent.ID, Agent: "build"}

	task, err := m.Launch(ctx, asyncagents.LaunchInput{
		Caller: caller, Description: "count", Agent: "general", Prompt: "RUN:echo 42 files",
	})
	if err != nil {
		log.Fatal(err)
	}
	// Block until the task ends, at most a minute; a timeout is not an error.
	out, err := m.Output(ctx, caller, task.ID, asyncagents.OutputOptions{Block: true, Timeout: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	if out.TimedOut {
		fmt.Println("still running after a minute")
		return
	}
	fmt.Println(out.Task.Status)
	fmt.Println(out.Task.Result)
	fmt.Println("retrieved:", !out.Task.Retrieved.IsZero())
	// Output:
	// completed
	// Ran 1 command(s); last output: 42 files
	// retrieved: true
}

// A host's model loop hands the six tools to its model and runs the calls the model makes:
// it finds the tool by name, passes the caller of the current turn (the session the model
// works in, the message and the agent) and returns the handler's text — or err.Error(),
// which is written for the model — as the tool result.
func Example_tools() {
	ctx := context.Background()
	client := opencodetest.NewFakeClient(opencodetest.WithClock(func() time.Time { return examplePoint }))
	defer client.Close()
	m, err := asyncagents.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close(ctx)
	parent, _ := client.CreateSession(ctx, opencode.CreateSessionRequest{Title: "parent"})

	tools := map[string]asyncagents.Tool{}
	for _, t := range asyncagents.Tools(m) {
		tools[t.Name] = t // and register t.Name, t.Description and t.Parameters with the model
	}

	// The calls a model made during one turn of the parent session.
	turn := asyncagents.Caller{SessionID: parent.ID, MessageID: "msg_turn1", Agent: "build"}
	calls := []struct{ name, args string }{
		{"asyncagents_task", `{"description":"count files","prompt":"RUN:echo 42 files","agent":"general"}`},
		{"asyncagents_list", `{"Status":"running"}`},
		{"asyncagents_cancel", `{"task_id":"ses_nothing"}`},
	}
	for _, call := range calls {
		result := "unknown tool " + call.name
		if tool, ok := tools[call.name]; ok {
			out, err := tool.Handler(ctx, turn, json.RawMessage(call.args))
			if err != nil {
				out = "Error: " + err.Error()
			}
			result = out
		}
		first := strings.SplitN(result, "\n", 2)[0]
		fmt.Printf("%s -> %s\n", call.name, taskIDs.ReplaceAllString(first, "tsk_…")) // ids differ at each run
	}
	// Output:
	// asyncagents_task -> Background task launched: tsk_…
	// asyncagents_list -> Error: asyncagents: invalid input: bad arguments: unexpected additional properties ["Status"]
	// asyncagents_cancel -> Error: asyncagents: task not found: "ses_nothing"
}

// taskIDs matches task ids.
var taskIDs = regexp.MustCompile(`tsk_[0-9A-Za-z]+`)
