// Command demo runs the main job of asyncagents on a real OpenCode server: a parent session
// does tool work in a scratch project, then launches two background tasks through the
// Manager — one plain, one forked with the parent's context — shows their progress, the
// list, the parent's notifications and both outputs, and resumes one.
//
// By default it starts `opencode serve` (the pinned binary from `make opencode`) with the
// scripted model of package opencodetest, whose replies follow directives in the prompts
// (RUN: runs bash commands, QUOTE: quotes a line from the inherited context). With
// OPENCODE_URL set it uses that server and its configured model instead
// (OPENCODE_SERVER_PASSWORD for Basic auth; -agent picks the task agent).
//
//	make demo
//	OPENCODE_URL=http://127.0.0.1:4096 go run ./examples/demo
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

func main() {
	agent := flag.String("agent", "general", "agent that runs the background tasks")
	timeout := flag.Duration("timeout", 3*time.Minute, "give up after this long")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if err := run(ctx, *agent); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

var scratch = map[string]string{
	"main.go":   "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(greet(\"world\"))\n}\n\nfunc greet(name string) string {\n\treturn \"hello, \" + name\n}\n",
	"README.md": "# scratch\n\nA tiny project the demo's agents work in.\n",
}

func run(ctx context.Context, agent string) error {
	client, dir, closeServer, err := connect(ctx)
	if err != nil {
		return err
	}
	defer closeServer()

	step("1. The parent session does real tool work in %s", dir)
	parent, err := client.CreateSession(ctx, opencode.CreateSessionRequest{Title: "demo parent"})
	if err != nil {
		return err
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	token := "DEPLOY_TOKEN=" + hex.EncodeToString(b)
	work := "List the project, count the lines of main.go, and print a deploy token.\n" +
		"RUN:ls ||| wc -l main.go ||| echo " + token
	reply, err := client.Prompt(ctx, parent.ID, opencode.PromptRequest{Parts: []opencode.TextPartInput{opencode.NewText(work)}})
	if err != nil {
		return err
	}
	msgs, err := client.Messages(ctx, parent.ID, 0)
	if err != nil {
		return err
	}
	for _, m := range msgs {
		for _, p := range m.Parts {
			if p.Type == opencode.PartTool && p.State != nil {
				fmt.Printf("   [bash] %s → %s\n", inputCommand(p), oneLine(p.State.Output))
			}
		}
	}
	fmt.Printf("   parent replied: %s\n", oneLine(text(reply)))

	// Two tasks may run at once; a third waits for a slot.
	m, err := asyncagents.New(client, asyncagents.WithPollInterval(time.Second),
		asyncagents.WithConcurrency(asyncagents.Limits{Default: 2}))
	if err != nil {
		return err
	}
	defer m.Close(context.Background())
	caller := asyncagents.Caller{SessionID: parent.ID, Agent: "build"}

	step("2. Launch three background tasks (they return at once; at most two run at a time)")
	plain, err := m.Launch(ctx, asyncagents.LaunchInput{Caller: caller, Agent: agent, Description: "find functions",
		Prompt: "Find the functions defined in main.go.\nRUN:grep -n '^func' main.go"})
	if err != nil {
		return err
	}
	fmt.Printf("   launched %s (plain)\n", plain.DisplayID)
	forked, err := m.Launch(ctx, asyncagents.LaunchInput{Caller: caller, Agent: agent, Description: "recall token", Fork: true,
		Prompt: "Which deploy token did we print earlier? Quote the line.\nQUOTE:DEPLOY_TOKEN="})
	if err != nil {
		return err
	}
	st := forked.ForkStats
	fmt.Printf("   launched %s (forked: %d messages inherited, %d tool results, %d characters of context)\n",
		forked.DisplayID, st.FinalMessages, st.Tier1+st.Tier2+st.Tier3, st.TotalChars)
	fmt.Printf("   the forked prompt does not contain the token; only the parent's bash output does\n")
	later, err := m.Launch(ctx, asyncagents.LaunchInput{Caller: caller, Agent: agent, Description: "count imports",
		Prompt: "Count the imports of main.go.\nRUN:grep -c '\"' main.go"})
	if err != nil {
		return err
	}
	fmt.Printf("   launched %s: %s, place %d in the queue — it starts when one of the two finishes\n",
		later.DisplayID, later.Status, later.QueuePosition)

	step("3. Progress while the parent keeps working")
	if err := watch(ctx, m, caller); err != nil {
		return err
	}

	step("4. The list (asyncagents_list)")
	tools := map[string]asyncagents.Tool{}
	for _, t := range asyncagents.Tools(m) {
		tools[t.Name] = t
	}
	list, err := tools["asyncagents_list"].Handler(ctx, caller, nil)
	if err != nil {
		return err
	}
	fmt.Println(indent(list))

	step("5. The outputs (asyncagents_output)")
	for _, t := range []asyncagents.Task{plain, forked} {
		out, err := tools["asyncagents_output"].Handler(ctx, caller, []byte(`{"task_id":"`+t.DisplayID+`","block":true,"timeout":60}`))
		if err != nil {
			return err
		}
		fmt.Println(indent(out))
		fmt.Println()
	}
	fo, _ := m.Output(ctx, caller, forked.ID, asyncagents.OutputOptions{})
	if strings.Contains(fo.Task.Result, token) {
		fmt.Printf("   ✓ the forked task quoted %s, which it could only know from the parent's context\n", token)
	} else {
		return fmt.Errorf("the forked task did not quote %s: %q", token, fo.Task.Result)
	}

	step("6. Resume the plain task with a follow-up")
	if _, err := m.Resume(ctx, caller, plain.ID, "Now show the greeting function's body.\nRUN:sed -n '/^func greet/,/^}/p' main.go"); err != nil {
		return err
	}
	out, err := m.Output(ctx, caller, plain.ID, asyncagents.OutputOptions{Block: true, Timeout: time.Minute})
	if err != nil {
		return err
	}
	fmt.Println(indent(asyncagents.FormatOutput(out, time.Now())))
	list, _ = tools["asyncagents_list"].Handler(ctx, caller, nil)
	fmt.Println(indent(list))

	if lt, _ := m.Get(later.ID); lt.Status != asyncagents.StatusCompleted {
		return fmt.Errorf("the queued task did not complete: %s %s", lt.Status, lt.Error)
	}

	step("7. Notifications the parent session received")
	return showNotifications(ctx, client, parent.ID, 4)
}

// connect starts a server with the scripted model, or uses OPENCODE_URL.
func connect(ctx context.Context) (*opencode.HTTPClient, string, func(), error) {
	if url := os.Getenv("OPENCODE_URL"); url != "" {
		var opts []opencode.ClientOption
		if pw := os.Getenv("OPENCODE_SERVER_PASSWORD"); pw != "" {
			user := os.Getenv("OPENCODE_SERVER_USERNAME")
			if user == "" {
				user = "opencode"
			}
			opts = append(opts, opencode.WithBasicAuth(user, pw))
		}
		c, err := opencode.NewHTTPClient(url, opts...)
		if err != nil {
			return nil, "", nil, err
		}
		v, err := c.Health(ctx)
		if err != nil {
			return nil, "", nil, err
		}
		step("Using the OpenCode server at %s (version %s) and its configured model", url, v)
		return c, "the server's project", c.CloseIdleConnections, nil
	}
	step("Starting opencode serve with the scripted model")
	srv, err := opencodetest.NewServer(ctx, opencodetest.WithFiles(scratch))
	if err != nil {
		return nil, "", nil, err
	}
	fmt.Printf("   opencode %s at %s (isolated HOME, project %s)\n", srv.Version, srv.URL, srv.Directory)
	c := srv.Client()
	return c, srv.Directory, func() { c.CloseIdleConnections(); srv.Close() }, nil
}

// watch prints each task's status changes until all of the caller's tasks are terminal.
func watch(ctx context.Context, m *asyncagents.Manager, caller asyncagents.Caller) error {
	seen := map[string]string{}
	for {
		tasks, err := m.List(caller, "")
		if err != nil {
			return err
		}
		done := true
		for _, t := range tasks {
			line := fmt.Sprintf("%s — %d tool calls", t.Status, t.Progress.ToolCalls)
			if seen[t.ID] != line {
				seen[t.ID] = line
				fmt.Printf("   %s%s %q: %s (%s)\n", t.DisplayID, t.Markers(), t.Description, line,
					t.Duration(time.Now()).Round(time.Millisecond))
			}
			done = done && t.Status.Terminal()
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func showNotifications(ctx context.Context, c *opencode.HTTPClient, parent string, want int) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		msgs, err := c.Messages(ctx, parent, 0)
		if err != nil {
			return err
		}
		var notes []string
		for _, m := range msgs {
			for i, p := range m.Parts {
				if p.Type == opencode.PartText && !p.Synthetic && (strings.HasPrefix(p.Text, "✓") || strings.HasPrefix(p.Text, "✗") || strings.HasPrefix(p.Text, "⊘")) {
					note := p.Text
					if i+1 < len(m.Parts) && m.Parts[i+1].Synthetic {
						note += "\n(hidden hint) " + m.Parts[i+1].Text
					}
					notes = append(notes, note)
				}
			}
		}
		if len(notes) >= want || time.Now().After(deadline) {
			for _, n := range notes {
				fmt.Println(indent(n))
				fmt.Println()
			}
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func step(format string, args ...any) { fmt.Printf("\n== "+format+"\n", args...) }

func indent(s string) string { return "   " + strings.ReplaceAll(s, "\n", "\n   ") }

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 100 {
		s = s[:100] + "…"
	}
	return s
}

func text(m *opencode.Message) string {
	var parts []string
	for _, p := range m.Parts {
		if p.Type == opencode.PartText {
			parts = append(parts, p.Text)
		}
	}
	return strings.Join(parts, "\n")
}

func inputCommand(p opencode.Part) string {
	var in struct {
		Command string `json:"command"`
	}
	_ = json.Unmarshal(p.State.Input, &in)
	return in.Command
}
