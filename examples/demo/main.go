// Command demo runs the main job of asyncagents on a real OpenCode server: a parent session
// does tool work in a scratch project; then the parent's own model, inside OpenCode, calls
// the asyncagents tools through the MCP bridge (package mcpserver) to launch three
// background tasks — one plain, one forked with the parent's context, one queued behind a
// concurrency limit — list them, read their outputs and resume one; the demo shows their
// progress and the notifications the parent received.
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
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/mcpserver"
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
	parent, token, err := parentWork(ctx, client)
	if err != nil {
		return err
	}

	// Two tasks may run at once; a third waits for a slot.
	m, err := asyncagents.New(client, asyncagents.WithPollInterval(time.Second),
		asyncagents.WithConcurrency(asyncagents.Limits{Default: 2}))
	if err != nil {
		return err
	}
	defer m.Close(context.Background())
	caller := asyncagents.Caller{SessionID: parent.ID, Agent: "build"}

	step("2. Offer the tools to OpenCode's agents: the MCP bridge, registered with the server")
	closeBridge, err := serveBridge(ctx, m, client, dir)
	if err != nil {
		return err
	}
	defer closeBridge()

	step("3. The parent's model launches three background tasks by calling asyncagents_task")
	plain, forked, err := launchThree(ctx, client, m, caller, agent)
	if err != nil {
		return err
	}

	step("4. Progress while the parent keeps working")
	if err := watch(ctx, m, caller); err != nil {
		return err
	}

	step("5. The parent's model lists its tasks (asyncagents_list)")
	if err := printTool(ctx, client, parent.ID, "asyncagents_list", map[string]any{}); err != nil {
		return err
	}

	step("6. The parent's model reads the outputs (asyncagents_output)")
	if err := readOutputs(ctx, client, m, caller, token, plain, forked); err != nil {
		return err
	}

	step("7. The parent's model resumes the plain task with a follow-up (asyncagents_task with resume)")
	if err := resumePlain(ctx, client, m, caller, plain); err != nil {
		return err
	}

	step("8. Notifications the parent session received")
	return showNotifications(ctx, client, parent.ID, 4)
}

// parentWork has the parent session run bash commands, one of which prints a random deploy
// token, and returns the session and the token.
func parentWork(ctx context.Context, client *opencode.HTTPClient) (*opencode.Session, string, error) {
	parent, err := client.CreateSession(ctx, opencode.CreateSessionRequest{Title: "demo parent"})
	if err != nil {
		return nil, "", err
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	token := "DEPLOY_TOKEN=" + hex.EncodeToString(b)
	work := "List the project, count the lines of main.go, and print a deploy token.\n" +
		"RUN:ls ||| wc -l main.go ||| echo " + token
	reply, err := client.Prompt(ctx, parent.ID, opencode.PromptRequest{Parts: []opencode.TextPartInput{opencode.NewText(work)}})
	if err != nil {
		return nil, "", err
	}
	msgs, err := client.Messages(ctx, parent.ID, 0)
	if err != nil {
		return nil, "", err
	}
	for _, m := range msgs {
		for _, p := range m.Parts {
			if p.Type == opencode.PartTool && p.State != nil {
				fmt.Printf("   [bash] %s → %s\n", inputCommand(p), oneLine(p.State.Output))
			}
		}
	}
	fmt.Printf("   parent replied: %s\n", oneLine(text(reply)))
	return parent, token, nil
}

// launchThree has the parent's model launch two plain tasks and a forked one, which waits
// for a slot, and returns the first plain and the forked task.
func launchThree(ctx context.Context, client *opencode.HTTPClient, m *asyncagents.Manager, caller asyncagents.Caller, agent string) (plain, forked asyncagents.Task, err error) {
	fmt.Println("   (each call goes parent model → OpenCode → MCP → the bridge → the Manager; at most two run at once)")
	launches := []struct {
		what string
		args map[string]any
	}{
		{"plain", map[string]any{"description": "find functions", "agent": agent,
			"prompt": "Find the functions defined in main.go.\nRUN:sleep 2; grep -n '^func' main.go"}},
		{"plain", map[string]any{"description": "count imports", "agent": agent,
			"prompt": "Count the imports of main.go.\nRUN:sleep 2; grep -c '\"' main.go"}},
		{"forked, queued behind the two", map[string]any{"description": "recall token", "agent": agent, "fork": true,
			"prompt": "Which deploy token did we print earlier? Quote the line.\nQUOTE:DEPLOY_TOKEN="}},
	}
	for _, l := range launches {
		out, err := callTool(ctx, client, caller.SessionID, "asyncagents_task", l.args)
		if err != nil {
			return plain, forked, err
		}
		fmt.Printf("   [%s] the model saw:\n%s\n", l.what, indent(indent(out)))
	}
	tasks, err := m.List(caller, "")
	if err != nil {
		return plain, forked, err
	}
	if len(tasks) != 3 {
		return plain, forked, fmt.Errorf("the parent's model launched %d tasks, want 3", len(tasks))
	}
	for _, t := range tasks {
		switch t.Description {
		case "find functions":
			plain = t
		case "recall token":
			forked = t
		}
	}
	if forked.ForkStats == nil || forked.ParentMessageID == "" {
		return plain, forked, fmt.Errorf("the forked task has no fork statistics or caller message: %+v", forked)
	}
	st := forked.ForkStats
	fmt.Printf("   the bridge found the caller: session %s, message %s, agent %s\n", forked.ParentSessionID, forked.ParentMessageID, forked.ParentAgent)
	fmt.Printf("   %s inherited %d messages, %d tool results, %d characters of context; its prompt does not contain the token\n",
		forked.DisplayID, st.FinalMessages, st.Tier1+st.Tier2+st.Tier3, st.TotalChars)
	return plain, forked, nil
}

// printTool has the parent's model call a tool and prints what it saw.
func printTool(ctx context.Context, client *opencode.HTTPClient, parent, name string, args map[string]any) error {
	out, err := callTool(ctx, client, parent, name, args)
	if err != nil {
		return err
	}
	fmt.Println(indent(out))
	return nil
}

// readOutputs has the parent's model read the plain and the forked task's outputs, and checks
// that the forked one quoted the token only the parent's context held.
func readOutputs(ctx context.Context, client *opencode.HTTPClient, m *asyncagents.Manager, caller asyncagents.Caller, token string, plain, forked asyncagents.Task) error {
	for _, t := range []asyncagents.Task{plain, forked} {
		if err := printTool(ctx, client, caller.SessionID, "asyncagents_output", map[string]any{"task_id": t.DisplayID, "block": true, "timeout": 60}); err != nil {
			return err
		}
		fmt.Println()
	}
	fo, _ := m.Output(ctx, caller, forked.ID, asyncagents.OutputOptions{})
	if !strings.Contains(fo.Task.Result, token) {
		return fmt.Errorf("the forked task did not quote %s: %q", token, fo.Task.Result)
	}
	fmt.Printf("   ✓ the forked task quoted %s, which it could only know from the parent's context\n", token)
	return nil
}

// resumePlain has the parent's model send the plain task a follow-up, waits for it, lists the
// tasks and checks that every one completed.
func resumePlain(ctx context.Context, client *opencode.HTTPClient, m *asyncagents.Manager, caller asyncagents.Caller, plain asyncagents.Task) error {
	if err := printTool(ctx, client, caller.SessionID, "asyncagents_task", map[string]any{"resume": plain.DisplayID,
		"prompt": "Now show the greeting function's body.\nRUN:sed -n '/^func greet/,/^}/p' main.go"}); err != nil {
		return err
	}
	res, err := m.Output(ctx, caller, plain.ID, asyncagents.OutputOptions{Block: true, Timeout: time.Minute})
	if err != nil {
		return err
	}
	fmt.Println(indent(asyncagents.FormatOutput(res, time.Now())))
	if err := printTool(ctx, client, caller.SessionID, "asyncagents_list", map[string]any{}); err != nil {
		return err
	}
	tasks, err := m.List(caller, "")
	if err != nil {
		return err
	}
	for _, t := range tasks {
		if t.Status != asyncagents.StatusCompleted {
			return fmt.Errorf("task %q did not complete: %s %s", t.Description, t.Status, t.Error)
		}
	}
	return nil
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

// serveBridge serves the Manager's tools over MCP on a loopback port and registers them
// with the OpenCode instance of dir (POST /mcp), so the server's agents can call them.
func serveBridge(ctx context.Context, m *asyncagents.Manager, client *opencode.HTTPClient, dir string) (func(), error) {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	token := hex.EncodeToString(b)
	var dirs []string
	if dir != "" {
		dirs = append(dirs, dir)
	}
	bridge, err := mcpserver.New(m, client, mcpserver.WithToken(token), mcpserver.WithDirectories(dirs...))
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		bridge.Close()
		return nil, err
	}
	srv := &http.Server{Handler: bridge, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	stop := func() { _ = srv.Close(); <-done; bridge.Close() }
	url := "http://" + ln.Addr().String()
	st, err := client.AddMCP(ctx, dir, m.ToolPrefix(), opencode.MCPConfig{Type: "remote", URL: url,
		OAuth: json.RawMessage("false"), Headers: map[string]string{"Authorization": "Bearer " + token}})
	if err == nil && st.Status != opencode.MCPConnected {
		err = fmt.Errorf("OpenCode did not connect to the bridge: %s %s", st.Status, st.Error)
	}
	if err != nil {
		stop()
		return nil, err
	}
	fmt.Printf("   bridge at %s, registered as MCP server %q: status %s\n", url, m.ToolPrefix(), st.Status)
	return stop, nil
}

// callTool has the parent's model call a tool: with the scripted model a TOOL: directive
// makes it call name with args, through OpenCode. It returns the tool's result as the
// model saw it (the tool part's output). A notification that reaches the parent between
// the prompt and the model's request takes the prompt's place as the last message (the
// scripted model answers that one), so the prompt is sent again, up to three times.
func callTool(ctx context.Context, c *opencode.HTTPClient, parent, name string, args map[string]any) (string, error) {
	b, err := json.Marshal(args)
	if err != nil {
		return "", err
	}
	// The task prompts carry directives for the child's model; escaped, they do not steer
	// the parent's (JSON decodes "\u003a" back to ":").
	spec := strings.NewReplacer("RUN:", `RUN\u003a`, "QUOTE:", `QUOTE\u003a`).Replace(string(b))
	prompt := fmt.Sprintf("Use the %s tool.\nTOOL:%s %s", name, name, spec)
	for range 3 {
		if _, err := c.Prompt(ctx, parent, opencode.PromptRequest{Parts: []opencode.TextPartInput{opencode.NewText(prompt)}}); err != nil {
			return "", err
		}
		msgs, err := c.Messages(ctx, parent, 12)
		if err != nil {
			return "", err
		}
		if out, found, err := toolOutput(msgs, prompt, name); found || err != nil {
			return out, err
		}
	}
	return "", fmt.Errorf("the parent's model did not call %s", name)
}

// toolOutput finds, after the user message with text prompt, the model's call of tool name
// and returns its output; an error for a call that failed.
func toolOutput(msgs []opencode.Message, prompt, name string) (string, bool, error) {
	mine := -1 // our prompt: the last user message with its text
	for i, m := range msgs {
		for _, p := range m.Parts {
			if p.Type == opencode.PartText && p.Text == prompt {
				mine = i
			}
		}
	}
	if mine < 0 {
		return "", false, nil
	}
	for _, m := range msgs[mine+1:] {
		for _, p := range m.Parts {
			if p.Type != opencode.PartTool || p.Tool != name || p.State == nil {
				continue
			}
			if p.State.Status == "error" {
				return "", true, fmt.Errorf("%s failed: %s", name, p.State.Error)
			}
			return p.State.Output, true, nil
		}
	}
	return "", false, nil
}
