package opencodetest_test

import (
	"context"
	"fmt"
	"time"

	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// A prompt with a RUN: directive makes the scripted model call bash, then answer; the events
// end with session.idle, as on the real server.
func ExampleFakeClient() {
	ctx := context.Background()
	f := opencodetest.NewFakeClient(opencodetest.WithClock(func() time.Time { return time.UnixMilli(1795310573870) }))
	defer f.Close()

	s, _ := f.CreateSession(ctx, opencode.CreateSessionRequest{Title: "demo"})
	events, _ := f.Events(ctx)
	defer events.Close()
	_ = f.PromptAsync(ctx, s.ID, opencode.PromptRequest{Parts: []opencode.TextPartInput{opencode.NewText("RUN:echo hello")}})
	for ev, err := range events.All() {
		if p, _ := ev.Decode(); err != nil || (ev.Type == opencode.EventSessionIdle && p.SessionID == s.ID) {
			break
		}
	}

	msgs, _ := f.Messages(ctx, s.ID, 0)
	for _, m := range msgs {
		fmt.Print(m.Info.Role)
		if m.Info.Finish != "" {
			fmt.Printf(" (%s)", m.Info.Finish)
		}
		for _, p := range m.Parts {
			switch p.Type {
			case opencode.PartText:
				fmt.Printf(" text %q", p.Text)
			case opencode.PartTool:
				fmt.Printf(" %s %s %q", p.Tool, p.State.Status, p.State.Output)
			}
		}
		fmt.Println()
	}
	// Output:
	// user text "RUN:echo hello"
	// assistant (tool-calls) bash completed "hello\n"
	// assistant (stop) text "Ran 1 command(s); last output: hello"
}

// With held runs a test decides when, and how, each run goes on.
func ExampleWithHeldRuns() {
	ctx := context.Background()
	f := opencodetest.NewFakeClient(opencodetest.WithHeldRuns())
	defer f.Close()
	hello := opencode.PromptRequest{Parts: []opencode.TextPartInput{opencode.NewText("hello")}}

	busy, _ := f.CreateSession(ctx, opencode.CreateSessionRequest{Title: "stays busy"})
	_ = f.PromptAsync(ctx, busy.ID, hello)
	status, _ := f.SessionStatus(ctx, "")
	fmt.Println(status[busy.ID].Type)

	failing, _ := f.CreateSession(ctx, opencode.CreateSessionRequest{Title: "fails"})
	_ = f.Release(failing.ID, opencodetest.Fail(400)) // its next run's first model call fails
	m, _ := f.Prompt(ctx, failing.ID, hello)
	fmt.Println(m.Info.Error.Name, m.Info.Error.Message())
	// Output:
	// busy
	// APIError scripted failure (HTTP 400)
}

// The conformance checks pass on the fake, as they do on a real server.
func ExampleTestClient() {
	f := opencodetest.NewFakeClient()
	defer f.Close()
	err := opencodetest.TestClient(context.Background(), f, opencodetest.Harness{Directory: f.Directory(), Requests: f.Requests})
	fmt.Println(err)
	// Output: <nil>
}
