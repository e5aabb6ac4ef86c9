package opencodetest_test

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// shared is the real server the package's tests share, started on first use.
var shared opencodetest.Shared

func TestMain(m *testing.M) { testmain.Run(m, shared.Close) }

func req(msgs ...opencodetest.ChatMessage) *opencodetest.Request {
	return &opencodetest.Request{Messages: msgs}
}

func TestDirectives(t *testing.T) {
	u := func(s string) opencodetest.ChatMessage { return opencodetest.ChatMessage{Role: "user", Content: s} }
	tool := func(s string) opencodetest.ChatMessage { return opencodetest.ChatMessage{Role: "tool", Content: s} }
	cases := []struct {
		name string
		r    *opencodetest.Request
		want opencodetest.Reply
	}{
		{"run first", req(u("RUN:echo a ||| ls")), opencodetest.Bash("echo a")},
		{"run second", req(u("RUN:echo a ||| ls"), tool("a\n")), opencodetest.Bash("ls")},
		{"run done", req(u("RUN:echo a ||| ls"), tool("a\n"), tool("x\n")), opencodetest.Text("Ran 2 command(s); last output: x")},
		{"tool", req(u(`TOOL:read {"filePath":"a"}`)), opencodetest.CallTool("read", `{"filePath":"a"}`)},
		{"quote", req(opencodetest.ChatMessage{Role: "user", Content: "ctx\nTOKEN=42\n"}, u("QUOTE:TOKEN=")), opencodetest.Text("Found in the inherited context: TOKEN=42")},
		{"quote missing", req(u("QUOTE:TOKEN=")), opencodetest.Text("QUOTE: not found")},
		{"fail", req(u("FAIL:503")), opencodetest.Fail(503)},
		{"sleep", req(u("SLEEP:1.5")), opencodetest.Slow(1500*time.Millisecond, "slept 1.5")},
		{"plain", req(u("hello")), opencodetest.Text("reply to hello")},
	}
	for _, tc := range cases {
		got := opencodetest.Directive(tc.r)
		if got.Text != tc.want.Text || got.Status != tc.want.Status || got.Delay != tc.want.Delay || len(got.ToolCalls) != len(tc.want.ToolCalls) ||
			(len(got.ToolCalls) == 1 && (got.ToolCalls[0].Name != tc.want.ToolCalls[0].Name || got.ToolCalls[0].Arguments != tc.want.ToolCalls[0].Arguments)) {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// The wire format @ai-sdk/openai-compatible reads: SSE chat.completion.chunk frames.
func TestModelStreamsChunksAndRecords(t *testing.T) {
	m := opencodetest.NewModel()
	defer m.Close()
	m.Enqueue(opencodetest.Bash("pwd"))
	m.FailNext(1, 500)
	body := `{"model":"m1","stream":true,"messages":[{"role":"system","content":"sys"},{"role":"user","content":[{"type":"text","text":"go"}]}],"tools":[{"type":"function","function":{"name":"bash"}}]}`
	post := func() (*http.Response, string) {
		resp, err := http.Post(m.BaseURL()+"/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			b.WriteString(sc.Text() + "\n")
		}
		return resp, b.String()
	}
	if resp, _ := post(); resp.StatusCode != 500 {
		t.Fatalf("FailNext: status %d", resp.StatusCode)
	}
	resp, s := post()
	if resp.StatusCode != 200 || !strings.Contains(s, `"tool_calls":[{`) || !strings.Contains(s, `"finish_reason":"tool_calls"`) || !strings.HasSuffix(s, "data: [DONE]\n\n") {
		t.Fatalf("stream = %s", s)
	}
	reqs := m.Requests()
	if len(reqs) != 2 || reqs[1].Kind != opencodetest.KindChat || reqs[1].Tools[0] != "bash" {
		t.Fatalf("requests = %+v", reqs)
	}
	if _, last := reqs[1].LastUser(); last != "go" || reqs[1].System() != "sys\n" {
		t.Errorf("parsed request = %+v", reqs[1])
	}
}

// Close stops the process group; the server's files stay inside its own folders.
func TestServerCloseAndIsolation(t *testing.T) {
	srv, err := opencodetest.NewServer(context.Background(), opencodetest.WithFiles(map[string]string{"sub/a.txt": "A"}))
	if errors.Is(err, opencodetest.ErrNoBinary) && os.Getenv("CI") != "true" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(srv.Directory, "sub", "a.txt")); err != nil || string(b) != "A" {
		t.Fatalf("project file: %q, %v", b, err)
	}
	if !strings.HasPrefix(srv.Home, filepath.Dir(srv.Directory)) {
		t.Errorf("HOME %s outside the server's folder", srv.Home)
	}
	c := srv.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := c.CreateSession(ctx, opencode.CreateSessionRequest{Title: "bg"})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := c.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	// A long-running tool: its shell is a child in the server's process group.
	if err := c.PromptAsync(ctx, s.ID, opencode.PromptRequest{Parts: []opencode.TextPartInput{opencode.NewText("RUN:sleep 60")}}); err != nil {
		t.Fatal(err)
	}
	for ev, err := range stream.All() {
		if err != nil {
			t.Fatalf("waiting for the bash tool to run: %v", err)
		}
		if p, _ := ev.Decode(); ev.Type == opencode.EventMessagePartUpdate && p.SessionID == s.ID && p.Part != nil &&
			p.Part.Type == opencode.PartTool && p.Part.State.Status == opencode.ToolRunning {
			break
		}
	}
	if _, err := os.Stat(filepath.Join(srv.Home, ".local", "share", "opencode")); err != nil {
		t.Errorf("no data under the isolated HOME: %v", err)
	}
	pid := srv.PID()
	srv.Close()
	if processAlive(pid) {
		t.Errorf("server process %d still alive after Close", pid)
	}
	if groupAlive(pid) {
		t.Errorf("process group %d still has members after Close", pid)
	}
	if _, err := os.Stat(srv.Directory); !os.IsNotExist(err) {
		t.Errorf("folders not removed: %v", err)
	}
	srv.Close() // idempotent
}
