package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/mcpserver"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// syncBuffer is a bytes.Buffer for one writer goroutine and readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var bridgeLine = regexp.MustCompile(`MCP bridge: +http://([0-9.:]+)/mcp`)

// serving is an `asyncagents serve` run in the test's process.
type serving struct {
	addr string // host:port it listens on
	out  *syncBuffer
	stop func() int // stops it as SIGINT would and returns its exit code
}

// startServe runs `asyncagents serve args…` until the test ends (or stop) and waits until it
// is ready.
func startServe(t *testing.T, args ...string) *serving {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out, errOut := &syncBuffer{}, &syncBuffer{}
	code := make(chan int, 1)
	go func() { code <- run(ctx, append([]string{"serve"}, args...), out, errOut) }()
	var once sync.Once
	exit := -1
	stop := func() int {
		once.Do(func() { cancel(); exit = <-code })
		return exit
	}
	t.Cleanup(func() { stop() })
	ok := testmain.Eventually(30*time.Second, func() bool {
		select {
		case c := <-code:
			code <- c
			return true
		default:
			return strings.Contains(out.String(), "Ready.")
		}
	})
	if !ok || !strings.Contains(out.String(), "Ready.") {
		t.Fatalf("serve did not get ready:\n%s\n%s", out, errOut)
	}
	m := bridgeLine.FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("serve printed no bridge URL:\n%s", out)
	}
	return &serving{addr: m[1], out: out, stop: stop}
}

// callTool has the parent's scripted model call a tool through OpenCode and returns the
// tool part.
func callTool(t *testing.T, c *opencode.HTTPClient, parent, name, args string) opencode.Part {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.Prompt(ctx, parent, opencode.PromptRequest{Parts: []opencode.TextPartInput{opencode.NewText("TOOL:" + name + " " + args)}}); err != nil {
		t.Fatal(err)
	}
	msgs, err := c.Messages(ctx, parent, 4)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(msgs) - 1; i >= 0; i-- {
		for _, p := range msgs[i].Parts {
			if p.Type == opencode.PartTool && p.Tool == name && p.State != nil {
				return p
			}
		}
	}
	t.Fatalf("the model did not call %s", name)
	return opencode.Part{}
}

// B-4: serve registers the bridge with the project's instance (POST /mcp), the parent's
// model launches a task through OpenCode → MCP → the bridge, the status API and `tasks`
// show it, SIGINT stops serve with exit 0, and `tasks` then reads the store.
func TestServeRegistersAndServes(t *testing.T) {
	srv := opencodetest.Start(t)
	state := t.TempDir()
	store, tokenFile := filepath.Join(state, "tasks.jsonl"), filepath.Join(state, "token")
	s := startServe(t, "-url", srv.URL, "-listen", "127.0.0.1:0", "-store", store, "-token-file", tokenFile, "-dir", srv.Directory)
	if !strings.Contains(s.out.String(), srv.Directory+": registered") {
		t.Fatalf("serve did not register with the project:\n%s", s.out)
	}

	c := srv.Client()
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
		code, out, _ := runCmd(t, "tasks", "-listen", s.addr, "-token-file", tokenFile, "-json")
		tasks = nil
		_ = json.Unmarshal([]byte(out), &tasks)
		return code == exitOK && len(tasks) == 1 && tasks[0].Status == asyncagents.StatusCompleted
	}) {
		t.Fatalf("tasks from serve: %+v", tasks)
	}
	if tasks[0].ParentSessionID != parent.ID || tasks[0].ParentMessageID == "" || tasks[0].ParentAgent != "build" {
		t.Errorf("the task's caller: %s %s %s; want %s, a message, build", tasks[0].ParentSessionID, tasks[0].ParentMessageID, tasks[0].ParentAgent, parent.ID)
	}

	resp, err := http.Get("http://" + s.addr + "/api/tasks")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("status API without the token: %s", resp.Status)
	}

	if code := s.stop(); code != exitOK {
		t.Fatalf("serve after SIGINT: exit %d\n%s", code, s.out)
	}
	code, out, errOut := runCmd(t, "tasks", "-listen", s.addr, "-store", store, "-token-file", tokenFile)
	if code != exitOK || !strings.Contains(out, store) || !strings.Contains(out, tasks[0].ID) || !strings.Contains(out, "completed") {
		t.Errorf("tasks from the store: exit %d\n%s%s", code, out, errOut)
	}
}

// B-3, B-4: the entry `install` writes (token read by OpenCode from the token file) and the
// companion plugin work: OpenCode connects to the bridge with the file's token, and a call
// carries the plugin's caller.
func TestServeWithInstalledEntryAndPlugin(t *testing.T) {
	state := t.TempDir()
	tokenFile := filepath.Join(state, "token")
	if _, err := loadToken(tokenFile, true); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	addr := "127.0.0.1:" + strconv.Itoa(port)
	srv := opencodetest.Start(t,
		opencodetest.WithPlugins(map[string]string{"asyncagents.js": mcpserver.Plugin("asyncagents")}),
		opencodetest.WithMCP("asyncagents", projectEntry("http://"+addr+"/mcp", tokenFile)))
	s := startServe(t, "-url", srv.URL, "-listen", addr, "-store", filepath.Join(state, "tasks.jsonl"), "-token-file", tokenFile,
		"-dir", srv.Directory)
	if !strings.Contains(s.out.String(), "connected") {
		t.Fatalf("serve did not connect the project's entry:\n%s", s.out)
	}
	c := srv.Client()
	parent, err := c.CreateSession(context.Background(), opencode.CreateSessionRequest{Title: "parent"})
	if err != nil {
		t.Fatal(err)
	}
	part := callTool(t, c, parent.ID, "asyncagents_list", `{}`)
	if part.State.Status != "completed" {
		t.Fatalf("asyncagents_list through OpenCode: %s %s", part.State.Status, part.State.Error)
	}
	var input map[string]any
	_ = json.Unmarshal(part.State.Input, &input)
	if _, ok := input["_caller"]; !ok {
		t.Errorf("the plugin did not add _caller to the call: %s", part.State.Input)
	}
}
