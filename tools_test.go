package asyncagents_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

var shared opencodetest.Shared

func TestMain(m *testing.M) { testmain.Run(m, shared.Close) }

func tools(m *asyncagents.Manager) map[string]asyncagents.Tool {
	out := map[string]asyncagents.Tool{}
	for _, t := range asyncagents.Tools(m) {
		out[t.Name] = t
	}
	return out
}

// A Manager on a server that does not exist: enough for argument checks, which fail
// before any request.
func offlineManager(t *testing.T, opts ...asyncagents.Option) *asyncagents.Manager {
	t.Helper()
	c, err := opencode.NewHTTPClient("http://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	m, err := asyncagents.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	return m
}

func TestToolSchemasAndNames(t *testing.T) {
	m := offlineManager(t, asyncagents.WithToolPrefix("bg"))
	want := []string{"bg_task", "bg_output", "bg_cancel", "bg_list", "bg_clear"}
	ts := asyncagents.Tools(m)
	if len(ts) != len(want) {
		t.Fatalf("%d tools", len(ts))
	}
	for i, tool := range ts {
		if tool.Name != want[i] || tool.Description == "" {
			t.Errorf("tool %d = %q", i, tool.Name)
		}
		var schema map[string]any
		if err := json.Unmarshal(tool.Parameters, &schema); err != nil || schema["type"] != "object" {
			t.Errorf("%s schema: %v", tool.Name, err)
		}
	}
}

// SPEC L: bad arguments give a clear error, never a panic, and change nothing.
func TestToolsRejectBadArguments(t *testing.T) {
	m := offlineManager(t)
	ts := tools(m)
	caller := asyncagents.Caller{SessionID: "ses_parent"}
	cases := []struct {
		tool, args string
		want       error
		text       string
	}{
		{"asyncagents_task", `{"prompt": 5}`, asyncagents.ErrInvalidInput, "cannot unmarshal number"},
		{"asyncagents_task", `{"prompt":"p","bogus":1}`, asyncagents.ErrInvalidInput, `unknown field "bogus"`},
		{"asyncagents_task", `{"prompt":"p","agent":"a","description":"d","fork":true,"resume":"ses_x"}`, asyncagents.ErrForkResumeConflict, "mutually exclusive"},
		{"asyncagents_task", `{"description":"d","agent":"a"}`, asyncagents.ErrInvalidInput, "prompt is required"},
		{"asyncagents_task", `{"prompt":"p","agent":"a","description":"d","model":"nomodel"}`, asyncagents.ErrInvalidInput, "providerID/modelID"},
		{"asyncagents_task", `[1,2]`, asyncagents.ErrInvalidInput, "bad arguments"},
		{"asyncagents_task", `{"prompt":"p"} {}`, asyncagents.ErrInvalidInput, "data after"},
		{"asyncagents_output", `{}`, asyncagents.ErrInvalidInput, "empty task id"},
		{"asyncagents_output", `{"task_id":"ses_x","timeout":-1}`, asyncagents.ErrInvalidInput, "negative"},
		{"asyncagents_output", `{"task_id":"ses_abcd1234"}`, asyncagents.ErrTaskNotFound, "not found"},
		{"asyncagents_output", `{"task_id":"ses_ab"}`, asyncagents.ErrTaskNotFound, "at least 4"},
		{"asyncagents_cancel", `{"task_id":true}`, asyncagents.ErrInvalidInput, "cannot unmarshal"},
		{"asyncagents_list", `{"status":"sleeping"}`, asyncagents.ErrInvalidInput, "unknown status"},
		{"asyncagents_clear", `{"all":true}`, asyncagents.ErrInvalidInput, "unknown field"},
		{"asyncagents_task", `{"resume":"ses_abcdefgh","prompt":""}`, asyncagents.ErrInvalidInput, "prompt is required"},
	}
	for _, tc := range cases {
		out, err := ts[tc.tool].Handler(context.Background(), caller, json.RawMessage(tc.args))
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) || out != "" {
			t.Errorf("%s(%s) = %q, %v; want %v containing %q", tc.tool, tc.args, out, err, tc.want, tc.text)
		}
	}
	if out, err := ts["asyncagents_list"].Handler(context.Background(), caller, nil); err != nil || out != "No background tasks found" {
		t.Errorf("empty list = %q, %v", out, err)
	}
	if out, _ := ts["asyncagents_list"].Handler(context.Background(), caller, json.RawMessage(`{"status":"running"}`)); out != `No background tasks found with status "running"` {
		t.Errorf("empty filtered list = %q", out)
	}
}

func TestMarkers(t *testing.T) {
	for _, tc := range []struct {
		t    asyncagents.Task
		want string
	}{
		{asyncagents.Task{}, ""},
		{asyncagents.Task{Forked: true}, " (forked)"},
		{asyncagents.Task{ResumeCount: 2}, " (resumed)"},
		{asyncagents.Task{Forked: true, ResumeCount: 1}, " (forked) (resumed)"},
	} {
		if got := asyncagents.Markers(tc.t); got != tc.want {
			t.Errorf("Markers(%+v) = %q", tc.t, got)
		}
	}
}

// SPEC L, T-13, T-14 through the tools on the real server.
func TestRealServerTools(t *testing.T) {
	srv := shared.Get(t)
	c := srv.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	parent, err := c.CreateSession(ctx, opencode.CreateSessionRequest{Title: "tools parent"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Prompt(ctx, parent.ID, opencode.PromptRequest{Parts: []opencode.TextPartInput{opencode.NewText("RUN:echo tool-ctx-42")}}); err != nil {
		t.Fatal(err)
	}
	m, err := asyncagents.New(c, asyncagents.WithPollInterval(500*time.Millisecond), asyncagents.WithNotifyNoReply(true))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	ts := tools(m)
	caller := asyncagents.Caller{SessionID: parent.ID, Agent: "build"}
	call := func(name, args string) string {
		t.Helper()
		out, err := ts[name].Handler(ctx, caller, json.RawMessage(args))
		if err != nil {
			t.Fatalf("%s(%s): %v", name, args, err)
		}
		return out
	}

	launched := call("asyncagents_task", `{"description":"quote it","prompt":"QUOTE:tool-ctx-","agent":"general","fork":true}`)
	if !strings.Contains(launched, "Background task launched: ses_") || !strings.Contains(launched, "notification") {
		t.Fatalf("launch reply: %s", launched)
	}
	id := strings.Fields(strings.SplitN(launched, "launched: ", 2)[1])[0]
	out := call("asyncagents_output", `{"task_id":"`+id+`","block":true,"timeout":60}`)
	if !strings.Contains(out, "completed") || !strings.Contains(out, "tool-ctx-42") || !strings.Contains(out, id) {
		t.Fatalf("output reply: %s", out)
	}
	call("asyncagents_task", `{"resume":"`+id+`","prompt":"RUN:echo again","agent":"ignored"}`)
	call("asyncagents_output", `{"task_id":"`+id+`","block":true,"timeout":60}`)
	slow := call("asyncagents_task", `{"description":"sleeper","prompt":"SLEEP:30","agent":"general"}`)
	slowID := strings.Fields(strings.SplitN(slow, "launched: ", 2)[1])[0]

	list := call("asyncagents_list", `{}`)
	if !strings.Contains(list, id+" (forked) (resumed) | quote it") || !strings.Contains(list, slowID+" | sleeper") {
		t.Fatalf("list reply: %s", list)
	}
	if got := call("asyncagents_cancel", `{"task_id":"`+slowID+`"}`); !strings.Contains(got, "Cancelled task "+slowID) {
		t.Fatalf("cancel reply: %s", got)
	}
	if got := call("asyncagents_list", `{"status":"cancelled"}`); !strings.Contains(got, slowID) || strings.Contains(got, id+" ") {
		t.Fatalf("filtered list: %s", got)
	}
	if got := call("asyncagents_clear", ``); got != "Cleared 2 background task(s); aborted 0 running." {
		t.Fatalf("clear reply: %s", got)
	}
	if got := call("asyncagents_list", `{}`); got != "No background tasks found" {
		t.Fatalf("list after clear: %s", got)
	}
}
