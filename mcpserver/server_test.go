package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/mcpserver"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// §10: the MCP tools are the Manager's tools without the prefix (OpenCode adds
// "<server>_"), with the same descriptions and schemas.
func TestToolsList(t *testing.T) {
	t.Parallel()
	b := newBridge(t)
	res, err := b.connect(t, nil).ListTools(ctxT(t, 10*time.Second), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]asyncagents.Tool{}
	for _, tool := range asyncagents.Tools(b.m) {
		want[strings.TrimPrefix(tool.Name, "asyncagents_")] = tool
	}
	if len(res.Tools) != len(want) {
		t.Fatalf("%d tools, want %d", len(res.Tools), len(want))
	}
	for _, got := range res.Tools {
		w, ok := want[got.Name]
		if !ok {
			t.Fatalf("unexpected tool %q", got.Name)
		}
		gs, _ := json.Marshal(got.InputSchema)
		var a, b any
		_ = json.Unmarshal(gs, &a)
		_ = json.Unmarshal(w.Parameters, &b)
		if got.Description != w.Description || !jsonEqual(a, b) {
			t.Errorf("tool %s: description %q schema %s, want %q %s", got.Name, got.Description, gs, w.Description, w.Parameters)
		}
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// B-1: the lookup finds the running tool part with the call's tool and input; the Manager
// records its session, message and agent as the task's parent.
func TestLookupCaller(t *testing.T) {
	t.Parallel()
	b := newBridge(t, mcpserver.WithCallerModes(mcpserver.CallerFromLookup))
	args := `{"description":"scan","prompt":"look around","agent":"general"}`
	sid, part := b.running(t, "asyncagents_task", args)
	cs := b.connect(t, nil)
	text, isErr := result(t, cs, &mcp.CallToolParams{Name: "task", Arguments: raw(args)})
	if isErr || !strings.Contains(text, "background") {
		t.Fatalf("task: %q (error %t)", text, isErr)
	}
	assertParent(t, b, sid, part.MessageID, "build")
	if got := b.logs.find("mcpserver: caller"); len(got) != 1 || got[0]["mode"] != "lookup" || got[0]["callID"] != part.CallID {
		t.Fatalf("caller logs = %v", got)
	}
}

// assertParent checks that the caller's one task has the parent session, message and agent.
func assertParent(t *testing.T, b *bridge, sid, msgID, agent string) {
	t.Helper()
	tasks, err := b.m.List(asyncagents.Caller{SessionID: sid}, "")
	if err != nil || len(tasks) != 1 {
		t.Fatalf("List = %v, %v", tasks, err)
	}
	if tk := tasks[0]; tk.ParentSessionID != sid || tk.ParentMessageID != msgID || tk.ParentAgent != agent {
		t.Fatalf("task parent = %s %s %s, want %s %s %s", tk.ParentSessionID, tk.ParentMessageID, tk.ParentAgent, sid, msgID, agent)
	}
}

// B-1: prompts stored behind the running step (notifications that arrive meanwhile) do not
// hide its tool part.
func TestCallerBehindQueuedPrompts(t *testing.T) {
	t.Parallel()
	b := newBridge(t, mcpserver.WithCallerModes(mcpserver.CallerFromLookup))
	args := `{"description":"scan","prompt":"behind prompts","agent":"general"}`
	sid, part := b.running(t, "asyncagents_task", args)
	for i := range 9 {
		if _, err := b.fake.Prompt(ctxT(t, 10*time.Second), sid, opencode.PromptRequest{NoReply: true,
			Parts: []opencode.TextPartInput{opencode.NewText(fmt.Sprint("notification ", i))}}); err != nil {
			t.Fatal(err)
		}
	}
	if msgs, _ := b.fake.Messages(ctxT(t, 5*time.Second), sid, 4); len(msgs) != 4 || msgs[0].Info.Role != opencode.RoleUser {
		t.Fatalf("the newest messages: %+v", msgs)
	}
	text, isErr := result(t, b.connect(t, nil), &mcp.CallToolParams{Name: "task", Arguments: raw(args)})
	if isErr {
		t.Fatal(text)
	}
	assertParent(t, b, sid, part.MessageID, "build")
}

// B-1: _caller from the plugin, signed with the token, is checked against the session's
// running tool part and removed before the handler's strict decoding.
func TestPluginCaller(t *testing.T) {
	t.Parallel()
	b := newBridge(t)
	sid := b.session(t)
	part, args := b.pluginCall(t, sid, "asyncagents_task", `{"description":"scan","prompt":"plugin caller","agent":"general"}`)
	cs := b.connect(t, nil)
	text, isErr := result(t, cs, &mcp.CallToolParams{Name: "task", Arguments: raw(args)})
	if isErr {
		t.Fatalf("task: %s", text)
	}
	assertParent(t, b, sid, part.MessageID, "build")
	if got := b.logs.find("mcpserver: caller"); len(got) != 1 || got[0]["mode"] != "plugin" || got[0]["callID"] != part.CallID {
		t.Fatalf("caller logs = %v", got)
	}
	// The call id is taken now: the same _caller again is refused.
	text, isErr = result(t, cs, &mcp.CallToolParams{Name: "task", Arguments: raw(args)})
	if !isErr || !strings.Contains(text, mcpserver.ErrUnknownCaller.Error()) || !strings.Contains(text, "being answered") {
		t.Fatalf("replayed _caller: %q (error %t)", text, isErr)
	}
}

// B-1: a _caller that is not the plugin's — unsigned, signed with another key, naming a
// call of another tool, with other arguments, finished, malformed, huge — never names the
// caller; nothing runs for the session it names, and the errors quote no more than a
// short cut of what was sent.
func TestForgedCallerRefused(t *testing.T) {
	t.Parallel()
	b := newBridge(t, mcpserver.WithLookupWait(100*time.Millisecond))
	victim := b.session(t)
	part, _ := b.pluginCall(t, victim, "asyncagents_list", `{}`)
	cs := b.connect(t, nil)
	huge := strings.Repeat("x", 1<<20)
	call := func(tool, args, want string) {
		t.Helper()
		text, isErr := result(t, cs, &mcp.CallToolParams{Name: tool, Arguments: raw(args)})
		if !isErr || !strings.HasPrefix(text, mcpserver.ErrUnknownCaller.Error()) || !strings.Contains(text, want) || len(text) > 400 {
			t.Errorf("%s %s: %q (error %t), want %q", tool, cut(args), cut(text), isErr, want)
		}
	}
	caller := func(c map[string]any) string {
		b, _ := json.Marshal(map[string]any{"_caller": c})
		return string(b)
	}
	id := part.CallID
	for _, tc := range []struct{ args, want string }{
		{withCaller(`{}`, victim, id, ""), "not signed"},
		{withCaller(`{}`, victim, id, "another key"), "bad signature"},
		{caller(map[string]any{"sessionID": victim, "callID": id, "sig": strings.Repeat("0", 64)}), "bad signature"},
		{withCaller(`{"status":"completed"}`, victim, id, testToken), "has other arguments"},
		{withCaller(`{}`, victim, "call_made_up", testToken), "is not a running call"},
		{withCaller(`{}`, "ses_doesnotexist", id, testToken), "does not exist"},
		{caller(map[string]any{"sessionID": huge, "callID": id}), "sessionID is not a session id"},
		{caller(map[string]any{"sessionID": "../../config", "callID": id}), "sessionID is not a session id"},
		{caller(map[string]any{"sessionID": "ses_" + strings.Repeat("a", 65), "callID": id}), "sessionID is not a session id"},
		{caller(map[string]any{"sessionID": victim, "callID": huge}), "callID is not a call id"},
		{caller(map[string]any{"sessionID": victim, "callID": "a/b"}), "callID is not a call id"},
		{caller(map[string]any{"sessionID": victim}), "callID is not a call id"},
		{`{"_caller":"ses_x"}`, "not {"}, {`{"_caller":null}`, "sessionID is not"}, {`{"_caller":[]}`, "not {"},
		{`{"_caller":{"sessionID":1}}`, "not {"},
	} {
		call("list", tc.args, tc.want)
	}
	call("clear", withCaller(`{}`, victim, id, testToken), "another tool")
	if logs := b.logs.text(); len(logs) > 20000 {
		t.Errorf("%d bytes of logs", len(logs))
	}
	_ = b.fake.Abort(ctxT(t, 5*time.Second), victim)
	call("list", withCaller(`{}`, victim, id, testToken), "not running")
	if got := b.logs.find("mcpserver: caller"); len(got) != 0 {
		t.Fatalf("resolved %v", got)
	}
}

func cut(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

// B-1 (issue 16a): sessions A and B run the same call with the same arguments; B's model,
// without the plugin, adds a _caller naming A's call. With a token, B's _caller is not
// signed: the call is resolved as any other, by the stored arguments, which are B's own
// (its _caller included) — B's call runs for B, A's for A. Without a token, B's _caller
// names a call whose stored arguments differ (A's has none): refused.
func TestForgedCallerOfIdenticalCall(t *testing.T) {
	t.Parallel()
	for _, token := range []string{testToken, ""} {
		t.Run(fmt.Sprintf("token=%t", token != ""), func(t *testing.T) {
			t.Parallel()
			b := newBridgeWith(t, token, mcpserver.WithLookupWait(300*time.Millisecond))
			a, other := b.session(t), b.session(t)
			tk, err := b.m.Launch(ctxT(t, 10*time.Second), asyncagents.LaunchInput{Caller: asyncagents.Caller{SessionID: a},
				Description: "A's own", Prompt: "SLEEP:30", Agent: "general"})
			if err != nil {
				t.Fatal(err)
			}
			args := fmt.Sprintf(`{"task_id":%q,"block":true,"timeout":0.3}`, tk.ID)
			partA := b.callAs(t, a, "asyncagents_output", args)
			forged := withCaller(args, a, partA.CallID, "")
			partB := b.callAs(t, other, "asyncagents_output", forged)
			cs := b.connect(t, nil)

			text, isErr := result(t, cs, &mcp.CallToolParams{Name: "output", Arguments: raw(forged)})
			if token != "" {
				if !isErr || !strings.Contains(text, asyncagents.ErrTaskNotFound.Error()) {
					t.Fatalf("B's call: %q (error %t), want B's own answer: task not found", text, isErr)
				}
				if got := b.logs.find("mcpserver: caller"); len(got) != 1 || got[0]["session"] != other || got[0]["callID"] != partB.CallID {
					t.Fatalf("B's call resolved as %v", got)
				}
			} else if !isErr || !strings.HasPrefix(text, mcpserver.ErrUnknownCaller.Error()) || !strings.Contains(text, "without _caller") {
				t.Fatalf("B's call: %q (error %t), want refused", text, isErr)
			}
			text, isErr = result(t, cs, &mcp.CallToolParams{Name: "output", Arguments: raw(args)})
			if isErr || !strings.Contains(text, "A's own") {
				t.Fatalf("A's call: %q (error %t)", text, isErr)
			}
			for _, c := range b.logs.find("mcpserver: caller") {
				if c["session"] == a && c["callID"] != partA.CallID {
					t.Fatalf("resolved as A: %v", c)
				}
			}
		})
	}
}

// B-1: two sessions running the same call: the lookup refuses it, with a text that asks
// to call again; it never picks one.
func TestLookupAmbiguous(t *testing.T) {
	t.Parallel()
	b := newBridge(t, mcpserver.WithCallerModes(mcpserver.CallerFromLookup), mcpserver.WithLookupWait(200*time.Millisecond))
	b.running(t, "asyncagents_list", `{}`)
	b.running(t, "asyncagents_list", `{}`)
	text, isErr := result(t, b.connect(t, nil), &mcp.CallToolParams{Name: "list", Arguments: raw(`{}`)})
	if !isErr || !strings.HasPrefix(text, mcpserver.ErrAmbiguousCaller.Error()) || !strings.Contains(text, "call the tool again") {
		t.Fatalf("ambiguous call: %q (error %t)", text, isErr)
	}
}

// B-1: no running call matches: the lookup gives up after the lookup wait.
func TestLookupUnknown(t *testing.T) {
	t.Parallel()
	b := newBridge(t, mcpserver.WithLookupWait(150*time.Millisecond))
	start := time.Now()
	text, isErr := result(t, b.connect(t, nil), &mcp.CallToolParams{Name: "list", Arguments: raw(`{}`)})
	if !isErr || text != mcpserver.ErrUnknownCaller.Error() {
		t.Fatalf("unknown caller: %q (error %t)", text, isErr)
	}
	if d := time.Since(start); d < 150*time.Millisecond || d > 2*time.Second {
		t.Fatalf("gave up after %v", d)
	}
}

// allModes turns CallerFromMeta on beside the default modes.
var allModes = mcpserver.WithCallerModes(mcpserver.CallerFromMeta, mcpserver.CallerFromPlugin, mcpserver.CallerFromLookup)

// B-1: with CallerFromMeta on, _meta.sessionID (OpenCode 2) names the session; message and
// agent come from its running part.
func TestMetaSessionID(t *testing.T) {
	t.Parallel()
	b := newBridge(t, allModes)
	args := `{"description":"scan","prompt":"meta caller","agent":"general"}`
	sid, part := b.running(t, "asyncagents_task", args)
	text, isErr := result(t, b.connect(t, nil), &mcp.CallToolParams{Name: "task", Arguments: raw(args),
		Meta: mcp.Meta{"sessionID": sid}})
	if isErr {
		t.Fatal(text)
	}
	assertParent(t, b, sid, part.MessageID, "build")
	if got := b.logs.find("mcpserver: caller"); len(got) != 1 || got[0]["mode"] != "meta" {
		t.Fatalf("caller logs = %v", got)
	}
	// An unknown session.
	text, isErr = result(t, b.connect(t, nil), &mcp.CallToolParams{Name: "list", Arguments: raw(`{}`),
		Meta: mcp.Meta{"sessionID": "ses_unknown"}})
	if !isErr || !strings.HasPrefix(text, mcpserver.ErrUnknownCaller.Error()) {
		t.Fatalf("unknown meta session: %q", text)
	}
	// Not a session id: refused before it is used, and not repeated.
	for _, sid := range []string{"../../config", "ses_" + strings.Repeat("a", 65), strings.Repeat("x", 1<<20), "ses_a/b"} {
		text, isErr = result(t, b.connect(t, nil), &mcp.CallToolParams{Name: "list", Arguments: raw(`{}`),
			Meta: mcp.Meta{"sessionID": sid}})
		if !isErr || !strings.HasPrefix(text, mcpserver.ErrUnknownCaller.Error()) || !strings.Contains(text, "not a session id") || len(text) > 200 {
			t.Fatalf("meta session %s: %q", cut(sid), cut(text))
		}
	}
}

// A client that holds the token and names another session in _meta.sessionID (a child
// session that read the token file and posts to the bridge itself) is refused by default:
// the bridge does not read _meta, the lookup finds no session making the call, and no task
// is launched for the named session. Only with CallerFromMeta on, for a host whose MCP
// client is trusted to send the caller's own session, does the same call run for it.
//
// Issue 35 item 7. B-1: a forged caller is refused.
func TestForgedMetaSessionIDRefusedByDefault(t *testing.T) {
	t.Parallel()
	const args = `{"description":"forged","prompt":"as another session","agent":"general"}`
	for _, tc := range []struct {
		name   string
		opts   []mcpserver.Option
		honour bool
	}{
		{"default", nil, false},
		{"CallerFromMeta on", []mcpserver.Option{allModes}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newBridge(t, tc.opts...)
			victim := b.session(t)
			text, isErr := result(t, b.connect(t, nil), &mcp.CallToolParams{Name: "task", Arguments: raw(args),
				Meta: mcp.Meta{"sessionID": victim}})
			tasks, err := b.m.List(asyncagents.Caller{SessionID: victim}, "")
			if err != nil {
				t.Fatal(err)
			}
			if !tc.honour {
				if !isErr || !strings.HasPrefix(text, mcpserver.ErrUnknownCaller.Error()) || len(tasks) != 0 {
					t.Fatalf("forged _meta.sessionID: %q (error %t), %d tasks of the named session", text, isErr, len(tasks))
				}
				if got := b.logs.find("mcpserver: _meta.sessionID ignored (CallerFromMeta is off)"); len(got) != 1 {
					t.Fatalf("ignored-meta logs = %v", got)
				}
				return
			}
			if isErr || len(tasks) != 1 || tasks[0].ParentSessionID != victim {
				t.Fatalf("trusted _meta.sessionID: %q (error %t), tasks %+v", text, isErr, tasks)
			}
			if got := b.logs.find("mcpserver: caller"); len(got) != 1 || got[0]["mode"] != "meta" {
				t.Fatalf("caller logs = %v", got)
			}
		})
	}
}

// L: a handler's error is an error result with its text; bad arguments never reach the
// Manager.
func TestHandlerErrors(t *testing.T) {
	t.Parallel()
	b := newBridge(t)
	_, args := b.pluginCall(t, b.session(t), "asyncagents_output", `{"task_id":"ses_nope"}`)
	cs := b.connect(t, nil)
	text, isErr := result(t, cs, &mcp.CallToolParams{Name: "output", Arguments: raw(args)})
	if !isErr || !strings.Contains(text, asyncagents.ErrTaskNotFound.Error()) {
		t.Fatalf("unknown task: %q (error %t)", text, isErr)
	}
	b.running(t, "asyncagents_list", `{"bogus":1}`)
	for _, args := range []string{`{"bogus":1}`, `[1,2]`, `"text"`, `5`} {
		text, isErr := result(t, cs, &mcp.CallToolParams{Name: "list", Arguments: raw(args)})
		if !isErr || !strings.Contains(text, asyncagents.ErrInvalidInput.Error()) {
			t.Errorf("list %s: %q (error %t)", args, text, isErr)
		}
	}
}

// slowTask launches, for a new session, a task whose run takes 30 s, and makes the session
// call the output tool with args (its "%s" is the task id) until aborted. It returns the
// session and the arguments.
func slowTask(t *testing.T, b *bridge, args string) (string, string) {
	t.Helper()
	sid := b.session(t)
	tk, err := b.m.Launch(ctxT(t, 10*time.Second), asyncagents.LaunchInput{Caller: asyncagents.Caller{SessionID: sid},
		Description: "slow", Prompt: "SLEEP:30", Agent: "general"})
	if err != nil {
		t.Fatal(err)
	}
	args = fmt.Sprintf(args, tk.ID)
	b.call(t, sid, "asyncagents_output", args)
	return sid, args
}

// B-2: progress notifications with the request's token every keepalive period while a
// call runs; none after it ended.
func TestKeepalive(t *testing.T) {
	t.Parallel()
	b := newBridge(t, mcpserver.WithKeepalive(40*time.Millisecond))
	_, args := slowTask(t, b, `{"task_id":"%s","block":true,"timeout":0.6}`)
	var (
		mu     sync.Mutex
		tokens []any
		last   float64
	)
	cs := b.connect(t, func(p *mcp.ProgressNotificationParams) {
		mu.Lock()
		defer mu.Unlock()
		tokens = append(tokens, p.ProgressToken)
		if p.Progress <= last {
			t.Errorf("progress %v after %v", p.Progress, last)
		}
		last = p.Progress
	})
	params := &mcp.CallToolParams{Name: "output", Arguments: raw(args)}
	params.SetProgressToken("tok-1")
	start := time.Now()
	res, err := cs.CallTool(ctxT(t, 10*time.Second), params)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if res.IsError || took < 600*time.Millisecond || !strings.Contains(textOf(res), "running") {
		t.Fatalf("output after %v: %s", took, textOf(res))
	}
	// The client handles notifications on goroutines of their own: one sent just before the
	// result may be handled after CallTool returned. Let those land, then none may follow.
	time.Sleep(150 * time.Millisecond)
	mu.Lock()
	got := slices.Clone(tokens)
	mu.Unlock()
	if want := int(took / (40 * time.Millisecond)); len(got) < want/2 || len(got) > want+1 {
		t.Fatalf("%d progress notifications in %v, want about %d", len(got), took, want)
	}
	for _, tok := range got {
		if tok != "tok-1" {
			t.Fatalf("progress token %v", tok)
		}
	}
	time.Sleep(300 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if len(tokens) != len(got) {
		t.Fatalf("%d progress notifications after the result", len(tokens)-len(got))
	}
}

// B-2: when the client cancels a call, the handler's context ends.
func TestCancelEndsHandler(t *testing.T) {
	t.Parallel()
	b := newBridge(t)
	_, args := slowTask(t, b, `{"task_id":"%s","block":true,"timeout":600}`)
	cs := b.connect(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "output", Arguments: raw(args)})
		done <- err
	}()
	if !testmain.Eventually(10*time.Second, func() bool { return len(b.logs.find("mcpserver: caller")) > 0 }) {
		t.Fatal("the call did not start")
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("CallTool = %v", err)
	}
	if !testmain.Eventually(10*time.Second, func() bool {
		got := b.logs.find("mcpserver: call done")
		return len(got) == 1 && got[0]["cause"] == context.Canceled.Error()
	}) {
		t.Fatalf("the handler did not end: %v", b.logs.find("mcpserver: call done"))
	}
}

// Close ends the calls in progress and refuses requests afterwards.
func TestClose(t *testing.T) {
	t.Parallel()
	b := newBridge(t)
	_, args := slowTask(t, b, `{"task_id":"%s","block":true,"timeout":600}`)
	cs := b.connect(t, nil)
	done := make(chan struct{})
	var res *mcp.CallToolResult
	go func() {
		defer close(done)
		res, _ = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "output", Arguments: raw(args)})
	}()
	if !testmain.Eventually(10*time.Second, func() bool { return len(b.logs.find("mcpserver: caller")) > 0 }) {
		t.Fatal("the call did not start")
	}
	start := time.Now()
	if err := b.srv.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Close took %v", d)
	}
	<-done
	if res != nil && !res.IsError {
		t.Fatalf("call after Close: %s", textOf(res))
	}
	if got := b.logs.find("mcpserver: call done"); len(got) != 1 || got[0]["cause"] != mcpserver.ErrClosed.Error() {
		t.Fatalf("call done: %v", got)
	}
	resp, err := http.Post(b.http.URL, "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("after Close: HTTP %d", resp.StatusCode)
	}
	_ = b.srv.Close() // idempotent
}

// The bearer token: missing or wrong is 401, and the token is not logged.
func TestToken(t *testing.T) {
	t.Parallel()
	b := newBridge(t)
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	for _, auth := range []string{"", "Bearer", "Bearer wrong", "Basic " + testToken, "Bearer " + testToken + "x", "bearer " + testToken[1:]} {
		req, _ := http.NewRequest(http.MethodPost, b.http.URL, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("Authorization %q: HTTP %d", auth, resp.StatusCode)
		}
	}
	b.connect(t, nil) // the right token; the scheme is case-insensitive
	req, _ := http.NewRequest(http.MethodPost, b.http.URL, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("lower-case scheme: HTTP %d", resp.StatusCode)
	}
	if logs := b.logs.text(); strings.Contains(logs, testToken[2:10]) || !strings.Contains(logs, "without a valid bearer token") {
		t.Fatalf("logs:\n%s", logs)
	}
}

// R: nothing panics on garbage requests; malformed JSON-RPC is answered, not crashed on.
func TestGarbageRequests(t *testing.T) {
	t.Parallel()
	b := newBridge(t, mcpserver.WithLookupWait(0), allModes)
	cs := b.connect(t, nil)
	for _, args := range []string{`{}`, `{"_caller":5}`, `{"_caller":{"sessionID":"","callID":""}}`, `{"_caller":{"sessionID":{},"callID":[]}}`,
		`{"task_id":"` + strings.Repeat("x", 10000) + `"}`, `{"a":{"b":{"c":[1,2,{"d":null}]}}}`, `null`, `true`, `"\u0000"`} {
		for _, name := range []string{"task", "output", "cancel", "list", "clear"} {
			for _, meta := range []mcp.Meta{nil, {"sessionID": 5}, {"sessionID": ""}, {"sessionID": strings.Repeat("ses_", 50)}, {"sessionID": []any{1}}} {
				res, err := cs.CallTool(ctxT(t, 10*time.Second), &mcp.CallToolParams{Name: name, Arguments: raw(args), Meta: meta})
				if err != nil {
					t.Fatalf("%s %s %v: %v", name, args, meta, err)
				}
				if !res.IsError {
					t.Errorf("%s %s %v: accepted: %s", name, args, meta, textOf(res))
				}
			}
		}
	}
	if _, err := cs.CallTool(ctxT(t, 10*time.Second), &mcp.CallToolParams{Name: "nope", Arguments: raw(`{}`)}); err == nil {
		t.Error("unknown tool accepted")
	}
	for _, body := range []string{``, `{`, `[]`, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":5}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list","arguments":"x","_meta":7}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":{},"arguments":[]}}`} {
		req, _ := http.NewRequest(http.MethodPost, b.http.URL, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 500 {
			t.Errorf("%q: HTTP %d", body, resp.StatusCode)
		}
	}
	if got := b.logs.find("mcpserver: panic in a call"); len(got) != 0 {
		t.Fatalf("panics: %v", got)
	}
}

func TestNewErrors(t *testing.T) {
	t.Parallel()
	fake := opencodetest.NewFakeClient()
	defer fake.Close()
	m, err := asyncagents.New(fake)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	for name, opts := range map[string][]mcpserver.Option{
		"empty token":    {mcpserver.WithToken("")},
		"no directory":   {mcpserver.WithDirectories()},
		"nil logger":     {mcpserver.WithLogger(nil)},
		"keepalive 0":    {mcpserver.WithKeepalive(0)},
		"negative wait":  {mcpserver.WithLookupWait(-time.Second)},
		"no mode":        {mcpserver.WithCallerModes()},
		"unknown mode":   {mcpserver.WithCallerModes(mcpserver.CallerMode(9))},
		"unknown mode 0": {mcpserver.WithCallerModes(0)},
		"origin host":    {mcpserver.WithAllowedOrigins("evil.example")},
		"origin path":    {mcpserver.WithAllowedOrigins("http://localhost:1/x")},
		"origin scheme":  {mcpserver.WithAllowedOrigins("ftp://localhost")},
		"origin user":    {mcpserver.WithAllowedOrigins("http://u@localhost")},
		"origin null":    {mcpserver.WithAllowedOrigins("null")},
		"timeout 0":      {mcpserver.WithSessionTimeout(0)},
		"timeout 999ms":  {mcpserver.WithSessionTimeout(999 * time.Millisecond)},
		"max sessions 0": {mcpserver.WithMaxSessions(0)},
	} {
		if _, err := mcpserver.New(m, fake, opts...); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := mcpserver.New(nil, fake); err == nil {
		t.Error("nil Manager: no error")
	}
	if _, err := mcpserver.New(m, nil); err == nil {
		t.Error("nil client: no error")
	}
	s, err := mcpserver.New(m, fake, mcpserver.WithDirectories("", "/elsewhere"), mcpserver.WithLogger(slog.Default()),
		mcpserver.WithAllowedOrigins("http://localhost:6274", "https://x.example/"), mcpserver.WithAllowedOrigins(),
		mcpserver.WithSessionTimeout(time.Second), mcpserver.WithMaxSessions(1))
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
}

// B-3: the plugin adds {sessionID, callID} in place to the arguments of the prefix's tools,
// and leaves other tools alone; with a token file it signs them with the token (as the
// bridge checks), and removes _caller when it cannot read the file. Runs the file in
// Node.js when it is installed (OpenCode runs it in Bun).
func TestPluginScript(t *testing.T) {
	t.Parallel()
	src := mcpserver.Plugin("my-tools")
	if strings.Contains(src, "import ") || strings.Contains(src, "require(") {
		t.Fatalf("the plugin imports something:\n%s", src)
	}
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("  tok-123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	signing := mcpserver.Plugin("my-tools", mcpserver.WithTokenFile(tokenFile))
	for _, imp := range regexp.MustCompile(`(?m)^import .* from "([^"]+)";$`).FindAllStringSubmatch(signing, -1) {
		if imp[1] != "node:fs" && imp[1] != "node:crypto" {
			t.Fatalf("the signing plugin imports %s", imp[1])
		}
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not installed")
	}
	script := `const mod = await import("data:text/javascript;base64," + Buffer.from(process.argv[1]).toString("base64"));
const hooks = await Object.values(mod)[0]({});
const out = [];
for (const tool of ["my-tools_list", "my-tools_task", "bash", "my-tools", "other_list"]) {
  const output = { args: { a: 1, _caller: "forged" } };
  await hooks["tool.execute.before"]({ tool, sessionID: "ses_1", callID: "call_" + tool }, output);
  out.push(output.args);
}
const none = { args: undefined };
await hooks["tool.execute.before"]({ tool: "my-tools_list", sessionID: "ses_1", callID: "c" }, none);
out.push(none.args ?? null);
console.log(JSON.stringify(out));`
	run := func(src string) string {
		t.Helper()
		got, err := exec.CommandContext(ctxT(t, 30*time.Second), node, "--input-type=module", "-e", script, src).CombinedOutput()
		if err != nil {
			t.Fatalf("node: %v\n%s", err, got)
		}
		return strings.TrimSpace(string(got))
	}
	others := `{"a":1,"_caller":"forged"},{"a":1,"_caller":"forged"},{"a":1,"_caller":"forged"},null]`
	want := `[{"a":1,"_caller":{"sessionID":"ses_1","callID":"call_my-tools_list"}},` +
		`{"a":1,"_caller":{"sessionID":"ses_1","callID":"call_my-tools_task"}},` + others
	if got := run(src); got != want {
		t.Fatalf("plugin:\n got %s\nwant %s", got, want)
	}
	want = fmt.Sprintf(`[{"a":1,"_caller":{"sessionID":"ses_1","callID":"call_my-tools_list","sig":%q}},`+
		`{"a":1,"_caller":{"sessionID":"ses_1","callID":"call_my-tools_task","sig":%q}},`,
		sign("tok-123", "ses_1", "call_my-tools_list"), sign("tok-123", "ses_1", "call_my-tools_task")) + others
	if got := run(signing); got != want {
		t.Fatalf("signing plugin:\n got %s\nwant %s", got, want)
	}
	if err := os.Remove(tokenFile); err != nil {
		t.Fatal(err)
	}
	want = `[{"a":1},{"a":1},` + others
	if got := run(signing); got != want {
		t.Fatalf("signing plugin without its token file:\n got %s\nwant %s", got, want)
	}
}

func TestRemoteConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ url, token, want string }{
		{"http://127.0.0.1:7/mcp", "tok", `{"type":"remote","url":"http://127.0.0.1:7/mcp","headers":{"Authorization":"Bearer tok"},"oauth":false}`},
		{"http://127.0.0.1:7/mcp", "", `{"type":"remote","url":"http://127.0.0.1:7/mcp","oauth":false}`},
	} {
		b, err := json.Marshal(mcpserver.RemoteConfig(tc.url, tc.token))
		if err != nil || string(b) != tc.want {
			t.Errorf("RemoteConfig(%q, %q) = %s, %v; want %s", tc.url, tc.token, b, err, tc.want)
		}
	}
}
