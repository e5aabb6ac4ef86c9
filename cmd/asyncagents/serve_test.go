package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/mcpserver"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// the bridge's token does not open the status API.
func TestServeRegistersAndServes(t *testing.T) {
	t.Parallel()
	srv, dir, c := project(t)
	state, args := stateArgs(t)
	store, tokenFile, socket := filepath.Join(state, "tasks.jsonl"), filepath.Join(state, "token"), filepath.Join(state, "serve.sock")
	s := startServe(t, append(args, "-url", srv.URL, "-listen", "127.0.0.1:0", "-dir", dir)...)
	if !strings.Contains(s.out.String(), dir+": registered (POST /mcp") {
		t.Fatalf("serve did not register with the project:\n%s", s.out)
	}
	if fi, err := os.Stat(socket); socketSupported && (err != nil || fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600) {
		t.Errorf("socket %s: %v, %v; want a socket of mode 0600", socket, fi.Mode(), err)
	}

	parent, err := c.CreateSession(context.Background(), opencode.CreateSessionRequest{Title: "parent"})
	if err != nil {
		t.Fatal(err)
	}
	part := callTool(t, c, parent.ID, "asyncagents_task", `{"description":"say hi","agent":"general","prompt":"say hi"}`)
	if part.State.Status != "completed" || !strings.Contains(part.State.Output, "background") {
		t.Fatalf("asyncagents_task through OpenCode: %s %s %s", part.State.Status, part.State.Output, part.State.Error)
	}

	var tasks []asyncagents.Task
	if !testmain.Eventually(30*time.Second, func() bool {
		code, out, _ := runCmd(t, append(tasksArgs(s, state), "-json")...)
		tasks = nil
		_ = json.Unmarshal([]byte(out), &tasks)
		return code == exitOK && len(tasks) == 1 && tasks[0].Status == asyncagents.StatusCompleted
	}) {
		t.Fatalf("tasks from serve: %+v", tasks)
	}
	// Issue 33: the log has one line per launch, run end and notification.
	if !testmain.Eventually(30*time.Second, func() bool { return strings.Contains(s.log.String(), "notification delivered") }) {
		t.Errorf("serve logged no notification:\n%s", s.log)
	}
	for _, line := range []string{"task launched", "task ended", "notification delivered"} {
		if n := strings.Count(s.log.String(), "asyncagents: "+line); n != 1 {
			t.Errorf("serve logged %q %d times, want once:\n%s", line, n, s.log)
		}
	}
	if tasks[0].ParentSessionID != parent.ID || tasks[0].ParentMessageID == "" || tasks[0].ParentAgent != "build" {
		t.Errorf("the task's caller: %s %s %s; want %s, a message, build", tasks[0].ParentSessionID, tasks[0].ParentMessageID, tasks[0].ParentAgent, parent.ID)
	}
	code, out, errOut := runCmd(t, tasksArgs(s, state)...)
	if code != exitOK || !strings.Contains(out, "from asyncagents serve at ") || !strings.Contains(out, tasks[0].ID) {
		t.Errorf("tasks from serve: exit %d\n%s%s", code, out, errOut)
	}

	token, err := loadToken(tokenFile, false)
	if err != nil {
		t.Fatal(err)
	}
	auths := []string{"", "Bearer " + token}
	if !socketSupported { // the status API takes the bridge's token there
		auths = auths[:1]
	}
	for _, auth := range auths {
		req, _ := http.NewRequest(http.MethodGet, "http://"+s.addr+"/api/tasks", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("status API over TCP with Authorization %.10q…: %s; want 401", auth, resp.Status)
		}
	}

	// S-2: the status page opens with the login link serve prints, once; it holds no
	// token; `asyncagents login` prints another that works.
	link := regexp.MustCompile(`status page: +(http://\S+/\?login=([\w-]+))`)
	page := link.FindStringSubmatch(s.out.String())
	if page == nil || strings.Contains(page[0], token) {
		t.Fatalf("serve printed no login link for the status page:\n%s", s.out)
	}
	signIn := func(u string) int {
		jar, _ := cookiejar.New(nil)
		browser := &http.Client{Jar: jar}
		resp, err := browser.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return resp.StatusCode
		}
		resp, err = browser.Get("http://" + s.addr + "/api/tasks")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := signIn(page[1]); code != http.StatusOK {
		t.Errorf("status page with the printed link: %d", code)
	}
	if code := signIn(page[1]); code != http.StatusUnauthorized {
		t.Errorf("the printed link a second time: %d, want 401", code)
	}
	loginArgs := append([]string{"login", "-listen", s.addr}, tasksArgs(s, state)[3:]...)
	code, out, errOut = runCmd(t, loginArgs...)
	if again := link.FindStringSubmatch("status page: " + out); code != exitOK || again == nil || again[2] == page[2] {
		t.Fatalf("asyncagents login: exit %d\n%s%s", code, out, errOut)
	} else if code := signIn(again[1]); code != http.StatusOK {
		t.Errorf("status page with the link of asyncagents login: %d", code)
	}

	if code := s.stop(); code != exitOK {
		t.Fatalf("serve after SIGINT: exit %d\n%s", code, s.out)
	}
	if _, err := os.Lstat(socket); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("socket left after serve stopped: %v", err)
	}
	code, out, errOut = runCmd(t, tasksArgs(s, state)...)
	if code != exitOK || !strings.Contains(out, store) || !strings.Contains(out, tasks[0].ID) || !strings.Contains(out, "completed") {
		t.Errorf("tasks from the store: exit %d\n%s%s", code, out, errOut)
	}
}

// B-3, B-4: the entry `install` writes (token read by OpenCode from the token file) and the
// companion plugin work: OpenCode connects to the bridge with the file's token, and a call
// carries the plugin's caller. Issue 3: serve says the entry comes from the project's
// opencode.json, and after a restart of serve it reconnects the instance to the new serve.
func TestServeWithInstalledEntryAndPlugin(t *testing.T) {
	t.Parallel()
	state, args := stateArgs(t)
	tokenFile := filepath.Join(state, "token")
	if _, err := loadToken(tokenFile, true); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	srv := opencodetest.Start(t,
		opencodetest.WithPlugins(map[string]string{"asyncagents.js": mcpserver.Plugin("asyncagents", mcpserver.WithTokenFile(tokenFile))}),
		opencodetest.WithMCP("asyncagents", projectEntry("http://"+addr+"/mcp", tokenFile)))
	args = append(args, "-url", srv.URL, "-listen", addr, "-dir", srv.Directory)
	c := srv.Client()
	parent, err := c.CreateSession(context.Background(), opencode.CreateSessionRequest{Title: "parent"})
	if err != nil {
		t.Fatal(err)
	}
	for run := 1; run <= 2; run++ {
		s := startServe(t, args...)
		if want := srv.Directory + ": connected (entry from " + filepath.Join(srv.Directory, "opencode.json") + ")"; !strings.Contains(s.out.String(), want) {
			t.Fatalf("serve run %d did not say %q:\n%s", run, want, s.out)
		}
		part := callTool(t, c, parent.ID, "asyncagents_list", `{}`)
		if part.State.Status != "completed" {
			t.Fatalf("run %d: asyncagents_list through OpenCode: %s %s", run, part.State.Status, part.State.Error)
		}
		var input struct {
			Caller struct {
				SessionID, CallID, Sig string
			} `json:"_caller"`
		}
		_ = json.Unmarshal(part.State.Input, &input)
		if input.Caller.SessionID != parent.ID || len(input.Caller.Sig) != 64 {
			t.Errorf("run %d: the plugin did not add a signed _caller to the call: %s", run, part.State.Input)
		}
		if code := s.stop(); code != exitOK {
			t.Fatalf("run %d: serve after SIGINT: exit %d\n%s", run, code, s.out)
		}
	}
}

// Issue 3: after a restart of serve, a directory that the last serve registered with
// POST /mcp (the project has no entry) is registered again with the current token — the
// old entry holds the token of its day — and serve says so rather than "from its config".
// An entry in the project's config for another URL is overridden the same way, with a word.
func TestServeRestartRegistersAgain(t *testing.T) {
	t.Parallel()
	srv, dir, c := project(t)
	state, args := stateArgs(t)
	tokenFile := filepath.Join(state, "token")
	args = append(args, "-url", srv.URL, "-listen", freeAddr(t), "-dir", dir)
	parent, err := c.CreateSession(context.Background(), opencode.CreateSessionRequest{Title: "parent"})
	if err != nil {
		t.Fatal(err)
	}
	otherURL := filepath.Join(dir, ".opencode", "opencode.jsonc")
	for run, tc := range []struct {
		before func()
		want   string
	}{
		{nil, ": registered (POST /mcp; until OpenCode restarts)\n"},
		{func() { // a new token: the entry of the first run holds a stale one
			if err := os.Remove(tokenFile); err != nil {
				t.Fatal(err)
			}
		}, ": registered again (POST /mcp, replacing the entry an earlier serve added; until OpenCode restarts)\n"},
		{func() {
			if err := os.MkdirAll(filepath.Dir(otherURL), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(otherURL, []byte(`{"mcp": {"asyncagents": {"type": "remote", "url": "http://127.0.0.1:9/mcp"}}} // mine`), 0o600); err != nil {
				t.Fatal(err)
			}
		}, ": registered (POST /mcp; until OpenCode restarts); " + otherURL + " names another URL for mcp.asyncagents (http://127.0.0.1:9/mcp): run asyncagents install -force to fix it\n"},
	} {
		if tc.before != nil {
			tc.before()
		}
		s := startServe(t, args...)
		if out := s.out.String(); !strings.Contains(out, dir+tc.want) {
			t.Fatalf("serve run %d: want %q:\n%s", run+1, dir+tc.want, out)
		}
		part := callTool(t, c, parent.ID, "asyncagents_list", `{}`)
		if part.State.Status != "completed" {
			t.Fatalf("run %d: asyncagents_list through OpenCode: %s %s", run+1, part.State.Status, part.State.Error)
		}
		if code := s.stop(); code != exitOK {
			t.Fatalf("run %d: serve after SIGINT: exit %d\n%s", run+1, code, s.out)
		}
	}
}

// Issue 2: serve without -dir starts (the bridge finds callers in the server's own
// directory) and prints the entry for opencode.json, as its help says.
func TestServeWithoutDirPrintsEntry(t *testing.T) {
	t.Parallel()
	srv := shared.Get(t)
	state, args := stateArgs(t)
	s := startServe(t, append(args, "-url", srv.URL, "-listen", "127.0.0.1:0")...)
	out := s.out.String()
	i := strings.Index(out, "Add to your project's opencode.json")
	if i < 0 {
		t.Fatalf("serve without -dir printed no entry:\n%s", out)
	}
	snippet := out[strings.Index(out[i:], "\n")+i+1 : strings.Index(out, "Ready.")]
	var got struct {
		MCP map[string]opencode.MCPConfig
	}
	if err := json.Unmarshal([]byte(snippet), &got); err != nil {
		t.Fatalf("the entry is not JSON (%v):\n%s", err, snippet)
	}
	e := got.MCP["asyncagents"]
	if e.URL != "http://"+s.addr+"/mcp" || e.Headers["Authorization"] != "Bearer {file:"+filepath.Join(state, "token")+"}" {
		t.Errorf("the printed entry: %+v", e)
	}
	if code := s.stop(); code != exitOK {
		t.Errorf("serve after SIGINT: exit %d\n%s", code, s.log)
	}
}

// socketClient returns an HTTP client that reaches the serve on the Unix socket path.
func socketClient(t *testing.T, path string) *http.Client {
	t.Helper()
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return dialSocket(ctx, path) }}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// S-3 (issue 11): with serve's read timeout cut to 500 ms, the answers that last longer keep
// working: the status page's event stream (here through the socket) delivers a change
// seconds later, a blocking asyncagents_output called by OpenCode's model waits for the task
// and returns its result, and the bridge's GET stream stays open.
func TestServeLongAnswersOutliveReadTimeout(t *testing.T) {
	if !socketSupported {
		t.Skip("the event stream is read through the socket")
	}
	t.Parallel()
	const readTimeout = 500 * time.Millisecond
	srv, dir, c := project(t)
	state, args := stateArgs(t)
	s := startServeWith(t, func(c *serveConfig) { c.http.readHeader, c.http.read = readTimeout, readTimeout },
		append(args, "-url", srv.URL, "-listen", "127.0.0.1:0", "-dir", dir)...)
	local := socketClient(t, filepath.Join(state, "serve.sock"))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	events, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://localhost/api/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := local.Do(events)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/events through the socket: %s", resp.Status)
	}
	streamStart := time.Now()
	completedAt := make(chan time.Duration, 1)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 4<<20)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "data:") && strings.Contains(sc.Text(), `"status":"completed"`) {
				completedAt <- time.Since(streamStart)
				return
			}
		}
	}()

	mcpGet := openMCPStream(t, ctx, s.addr, filepath.Join(state, "token"))

	parent, err := c.CreateSession(ctx, opencode.CreateSessionRequest{Title: "parent"})
	if err != nil {
		t.Fatal(err)
	}
	part := callTool(t, c, parent.ID, "asyncagents_task", `{"description":"sleep","agent":"general","prompt":"SLEEP:3"}`)
	if part.State.Status != "completed" {
		t.Fatalf("asyncagents_task: %s %s", part.State.Status, part.State.Error)
	}
	id := regexp.MustCompile(`tsk_[0-9A-Za-z]+`).FindString(part.State.Output)
	start := time.Now()
	part = callTool(t, c, parent.ID, "asyncagents_output", `{"task_id":"`+id+`","block":true,"timeout":60}`)
	if part.State.Status != "completed" || !strings.Contains(part.State.Output, "slept 3") {
		t.Errorf("blocking asyncagents_output: %s %q %s", part.State.Status, part.State.Output, part.State.Error)
	}
	if d := time.Since(start); d < 2*readTimeout {
		t.Errorf("the output call took %v only: it did not block past the read timeout", d)
	}
	select {
	case d := <-completedAt:
		if d < readTimeout {
			t.Errorf("the change came %v after the stream opened, before the read timeout: the test proves nothing", d)
		}
	case <-time.After(30 * time.Second):
		t.Error("the event stream delivered no completed task")
	}
	select {
	case err := <-mcpGet:
		t.Errorf("the bridge's GET stream ended: %v", err)
	default:
	}
}

// openMCPStream starts an MCP session with the bridge at addr (initialize, initialized) and
// opens its GET stream; the channel gets the error that ends the stream's body.
func openMCPStream(t *testing.T, ctx context.Context, addr, tokenFile string) <-chan error {
	t.Helper()
	token, err := loadToken(tokenFile, false)
	if err != nil {
		t.Fatal(err)
	}
	post := func(session, body string) *http.Response {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/mcp", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	resp := post("", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"test","version":"1"}}}`)
	session := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || session == "" {
		t.Fatalf("initialize: %s, session %q", resp.Status, session)
	}
	post(session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/mcp", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", session)
	get, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if get.StatusCode != http.StatusOK {
		get.Body.Close()
		t.Fatalf("GET /mcp: %s", get.Status)
	}
	ended := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, get.Body)
		ended <- err
	}()
	t.Cleanup(func() { get.Body.Close() })
	return ended
}

// Serve bounds what a model can start. With -max-per-parent 1 a parent's second launch is an
// error its model reads, while the first still runs; the task tool's description, as OpenCode
// hands it to the model, states the limits; bad values are usage errors.
//
// Issue 17 item 10. S-5: what a model can start is bounded by default (limits, per-parent
// cap, deadline).
func TestServeBoundsWhatModelsStart(t *testing.T) {
	t.Parallel()
	srv, dir, c := project(t)
	_, args := stateArgs(t)
	startServe(t, append(args, "-url", srv.URL, "-listen", freeAddr(t), "-dir", dir,
		"-max-per-parent", "1", "-max-running", "3", "-deadline", "20m", "-stale-timeout", "5m", "-task-budget-tokens", "500000")...)
	parent, err := c.CreateSession(context.Background(), opencode.CreateSessionRequest{Title: "parent"})
	if err != nil {
		t.Fatal(err)
	}
	// The first task runs until the test ends (project aborts it): the second launch is
	// refused while it runs, however long the launches take.
	first := callTool(t, c, parent.ID, "asyncagents_task", `{"description":"slow","agent":"general","prompt":"SLEEP:600"}`)
	if first.State.Status != "completed" || !strings.Contains(first.State.Output, "Background task launched") {
		t.Fatalf("first launch: %s %s %s", first.State.Status, first.State.Output, first.State.Error)
	}
	second := callTool(t, c, parent.ID, "asyncagents_task", `{"description":"more","agent":"general","prompt":"SLEEP:1"}`)
	if text := second.State.Output + second.State.Error; !strings.Contains(text, "too many active tasks") || !strings.Contains(text, "1 active tasks") {
		t.Errorf("second launch over -max-per-parent 1: %s %q", second.State.Status, text)
	}
	var described bool
	for _, r := range srv.Model.Requests() {
		described = described || strings.Contains(string(r.Body), "at most 1 of this session's tasks can be active at once") &&
			strings.Contains(string(r.Body), "beyond 3 running at once") && strings.Contains(string(r.Body), "longer than 20m 0s") &&
			strings.Contains(string(r.Body), "a run that uses 500.0k tokens is stopped")
	}
	if !described {
		t.Error("the model was not told the limits in the task tool's description")
	}
	for _, bad := range [][]string{{"-max-per-parent", "-1"}, {"-limit", "nope"}, {"-limit", "p/m=-2"}, {"-deadline", "-1s"},
		{"-task-budget-tokens", "-5"}, {"-tree-budget-cost", "-0.5"}} {
		if code, _, errOut := runCmd(t, append([]string{"serve"}, bad...)...); code != exitUsage || !strings.Contains(errOut, "bad "+bad[0]) {
			t.Errorf("serve %q: exit %d, %s", bad, code, errOut)
		}
	}
}

// Issue 17 item 6: OpenCode's TUI, run with --port, serves what serve needs: serve registers
// the bridge with it, the model of a session launches a task through the tools, the task
// completes and the parent is notified, as with `opencode serve`.
//
// Not parallel: the TUI renders all the time it runs, so it runs alone, as briefly as it can.
func TestServeBesideTheTUI(t *testing.T) {
	if !socketSupported {
		t.Skip("the TUI runs in a pseudo-terminal of script(1), on Unix")
	}
	srv := opencodetest.Start(t, opencodetest.WithTUI())
	_, args := stateArgs(t)
	s := startServe(t, append(args, "-url", srv.URL, "-listen", freeAddr(t), "-dir", srv.Directory)...)
	if !strings.Contains(s.out.String(), srv.Directory+": registered") {
		t.Fatalf("serve did not register with the TUI's instance:\n%s", s.out)
	}
	c := srv.Client()
	parent, err := c.CreateSession(context.Background(), opencode.CreateSessionRequest{Title: "parent"})
	if err != nil {
		t.Fatal(err)
	}
	part := callTool(t, c, parent.ID, "asyncagents_task", `{"description":"beside the TUI","agent":"general","prompt":"say hello"}`)
	if part.State.Status != "completed" || !strings.Contains(part.State.Output, "Background task launched") {
		t.Fatalf("launch through the TUI's server: %s %s %s", part.State.Status, part.State.Output, part.State.Error)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ok := testmain.Eventually(60*time.Second, func() bool {
		msgs, err := c.Messages(ctx, parent.ID, 0)
		for _, m := range msgs {
			for _, p := range m.Parts {
				if err == nil && strings.HasPrefix(p.Text, `✓ Agent "beside the TUI" finished`) {
					return true
				}
			}
		}
		return false
	})
	if !ok {
		t.Fatalf("the parent in the TUI's server was not notified; serve said:\n%s", s.out)
	}
}

// Serve's notification and fork flags: a bad -notify, -wave-window or -fork-mode is a usage
// error naming it.
func TestServeNotifyFlags(t *testing.T) {
	for _, bad := range [][]string{{"-notify", "sometimes"}, {"-wave-window", "-1s"}, {"-wave-window", "2h"}, {"-fork-mode", "copy"}} {
		if code, _, errOut := runCmd(t, append([]string{"serve"}, bad...)...); code != exitUsage || !strings.Contains(errOut, bad[0]) {
			t.Errorf("serve %q: exit %d, %s", bad, code, errOut)
		}
	}
}
