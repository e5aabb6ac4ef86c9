package asyncagents_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/asyncagentstest"
	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
	"github.com/asyncagents/asyncagents/pgstore/pgstoretest"
)

var shared opencodetest.Shared

// sharedPG is the PostgreSQL server of the tests that need a database of their own and
// leave the server running.
var sharedPG pgstoretest.Shared

func TestMain(m *testing.M) { testmain.Run(m, shared.Close, aborting.Close, sharedPG.Close) }

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
	return asyncagentstest.NewManager(t, c, opts...)
}

func TestToolSchemasAndNames(t *testing.T) {
	m := offlineManager(t, asyncagents.WithToolPrefix("bg"))
	want := []string{"bg_task", "bg_output", "bg_cancel", "bg_list", "bg_clear", "bg_merge"}
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

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// The schemas the model sees, compared as JSON values (key order aside) with
// testdata/tool_parameters.json; go test -run TestToolParametersGolden -update rewrites it.
// The file was first written from the hand-written schemas; the schemas derived from the
// argument structs left it unchanged but for key order and an empty "then".
func TestToolParametersGolden(t *testing.T) {
	got := map[string]json.RawMessage{}
	for _, tool := range asyncagents.Tools(offlineManager(t)) {
		got[tool.Name] = tool.Parameters
	}
	file := filepath.Join("testdata", "tool_parameters.json")
	if *update {
		b, err := json.MarshalIndent(got, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (run with -update)", err)
	}
	var want map[string]any
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	for name, params := range got {
		var g any
		if err := json.Unmarshal(params, &g); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if diff := cmp.Diff(want[name], g); diff != "" {
			t.Errorf("%s parameters (-golden +got):\n%s", name, diff)
		}
	}
	if len(want) != len(got) {
		t.Errorf("golden tools %d, tools %d", len(want), len(got))
	}
}

// SPEC L, R: bad arguments give a short error for the model (no Go types, no echo of huge
// values), matching a sentinel, never a panic, and change nothing.
func TestToolsRejectBadArguments(t *testing.T) {
	m := offlineManager(t)
	ts := tools(m)
	caller := asyncagents.Caller{SessionID: "ses_parent"}
	huge := strings.Repeat("x", 1<<20)
	cases := []struct {
		tool, args string
		want       error
		text       string
	}{
		{"asyncagents_task", `{"prompt": 5, "description":"d", "agent":"a"}`, asyncagents.ErrInvalidInput, `prompt: has type "integer", want "string"`},
		{"asyncagents_task", `{"prompt":"p","description":"d","agent":"a","bogus":1}`, asyncagents.ErrInvalidInput, `additional properties ["bogus"]`},
		{"asyncagents_task", `{"prompt":"p","description":"d","agent":"a","Fork":true}`, asyncagents.ErrInvalidInput, `additional properties ["Fork"]`},
		{"asyncagents_task", `{"prompt":"p","agent":"a","description":"d","fork":true,"resume":"ses_x"}`, asyncagents.ErrForkResumeConflict, "mutually exclusive"},
		{"asyncagents_task", `{"description":"d","agent":"a"}`, asyncagents.ErrInvalidInput, `missing properties: ["prompt"]`},
		{"asyncagents_task", `{}`, asyncagents.ErrInvalidInput, `missing properties`},
		{"asyncagents_task", `{"prompt":"p"}`, asyncagents.ErrInvalidInput, `missing properties: ["description" "agent"]`},
		{"asyncagents_task", `{"prompt":"p","agent":"a","description":"d","model":"nomodel"}`, asyncagents.ErrInvalidInput, "providerID/modelID"},
		{"asyncagents_task", `{"prompt":"p","agent":"a","description":" "}`, asyncagents.ErrInvalidInput, "description is required"},
		{"asyncagents_task", `[1,2]`, asyncagents.ErrInvalidInput, "must be a JSON object"},
		{"asyncagents_task", `{"prompt":"p"} {}`, asyncagents.ErrInvalidInput, "one JSON object"},
		{"asyncagents_output", `{}`, asyncagents.ErrInvalidInput, `missing properties: ["task_id"]`},
		{"asyncagents_output", `{"task_id":""}`, asyncagents.ErrInvalidInput, "task id is required"},
		{"asyncagents_output", `{"Task_ID":"ses_abcd1234"}`, asyncagents.ErrInvalidInput, `additional properties ["Task_ID"]`},
		{"asyncagents_output", `{"task_id":"ses_x","timeout":-1}`, asyncagents.ErrInvalidInput, `"timeout": -1 is out of range; give a number of at least 0`},
		{"asyncagents_output", `{"task_id":"ses_abcd1234"}`, asyncagents.ErrTaskNotFound, "not found"},
		{"asyncagents_output", `{"task_id":"ses_ab"}`, asyncagents.ErrTaskNotFound, "at least 4"},
		{"asyncagents_output", `{"task_id":"` + huge + `"}`, asyncagents.ErrTaskNotFound, "xxxx"},
		{"asyncagents_cancel", `{"task_id":true}`, asyncagents.ErrInvalidInput, `want "string"`},
		{"asyncagents_cancel", `{"TASK_ID":"ses_abcd1234"}`, asyncagents.ErrInvalidInput, "additional properties"},
		{"asyncagents_list", `{"status":"sleeping"}`, asyncagents.ErrInvalidInput, "status"},
		{"asyncagents_list", `{"STATUS":"running"}`, asyncagents.ErrInvalidInput, "additional properties"},
		{"asyncagents_clear", `{"all":true}`, asyncagents.ErrInvalidInput, "additional properties"},
		{"asyncagents_task", `{"resume":"ses_abcdefgh","prompt":""}`, asyncagents.ErrInvalidInput, "prompt is required"},
		{"asyncagents_task", `{"prompt":"p","description":"d","agent":"` + huge + `"}`, nil, ""}, // offline: fails on the request, not echoing
		{"asyncagents_task", `{"prompt":"p","description":"d","agent":"a","fork":"` + huge + `"}`, asyncagents.ErrInvalidInput, `want "boolean"`},
		// Numbers a float64 or a time.Duration cannot hold are named, with their range.
		{"asyncagents_task", `{"prompt":"p","description":"d","agent":"a","deadline":1e300}`, asyncagents.ErrInvalidInput,
			`"deadline": 1e+300 is out of range; give a number from 0 to 604800`},
		{"asyncagents_task", `{"prompt":"p","description":"d","agent":"a","deadline":-1}`, asyncagents.ErrInvalidInput,
			`"deadline": -1 is out of range; give a number from 0 to 604800`},
		{"asyncagents_output", `{"task_id":"ses_x","timeout":1e999}`, asyncagents.ErrInvalidInput,
			`"timeout": number 1e999 is out of range; give a number of at least 0`},
		{"asyncagents_output", `{"task_id":"ses_x","timeout":-1e999}`, asyncagents.ErrInvalidInput, `"timeout": number -1e999 is out of range`},
		{"asyncagents_output", `{"task_id":"ses_x","message_limit":1e999999999999}`, asyncagents.ErrInvalidInput,
			`"message_limit": number 1e999999999999 is out of range; give a number from 1 to 100`},
		{"asyncagents_output", `{"task_id":"ses_x","timeout":1` + strings.Repeat("0", 400) + `}`, asyncagents.ErrInvalidInput,
			`"timeout": number 100000000000000000000000… is out of range`},
	}
	for _, tc := range cases {
		out, err := ts[tc.tool].Handler(context.Background(), caller, json.RawMessage(tc.args))
		args := tc.args[:min(len(tc.args), 80)]
		if err == nil || out != "" {
			t.Errorf("%s(%s) = %q, %v; want an error", tc.tool, args, out, err)
			continue
		}
		if msg := err.Error(); len(msg) > 500 || strings.Contains(msg, "struct {") || strings.Contains(msg, "Go ") {
			t.Errorf("%s(%s): error text of %d bytes: %.300s", tc.tool, args, len(msg), msg)
		}
		if tc.want != nil && (!errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text)) {
			t.Errorf("%s(%s) = %v; want %v containing %q", tc.tool, args, err, tc.want, tc.text)
		}
	}
	// Caller problems match a sentinel before any request.
	for _, c := range []asyncagents.Caller{{}, {SessionID: "parent"}, {SessionID: "ses_" + huge}} {
		_, err := ts["asyncagents_list"].Handler(context.Background(), c, nil)
		if !errors.Is(err, asyncagents.ErrInvalidInput) || len(err.Error()) > 200 {
			t.Errorf("list with caller %.40q: %.300v", c.SessionID, err)
		}
	}
	if out, err := ts["asyncagents_list"].Handler(context.Background(), caller, nil); err != nil || out != "No background tasks found" {
		t.Errorf("empty list = %q, %v", out, err)
	}
	if out, _ := ts["asyncagents_list"].Handler(context.Background(), caller, json.RawMessage(`{"status":"running"}`)); out != `No background tasks found with status "running"` {
		t.Errorf("empty filtered list = %q", out)
	}
}

// The schemas say what is required: the task schema requires prompt, and description and
// agent unless resume is set; timeout says what 0 means.
func TestToolSchemasRequired(t *testing.T) {
	ts := tools(offlineManager(t))
	var task struct {
		Required []string `json:"required"`
		Else     struct {
			Required []string `json:"required"`
		} `json:"else"`
	}
	if err := json.Unmarshal(ts["asyncagents_task"].Parameters, &task); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"prompt"}, task.Required); diff != "" {
		t.Error(diff)
	}
	if diff := cmp.Diff([]string{"description", "agent"}, task.Else.Required); diff != "" {
		t.Error(diff)
	}
	if p := string(ts["asyncagents_output"].Parameters); !strings.Contains(p, "0 or absent means 120") || !strings.Contains(p, "more than 600 means 600") {
		t.Errorf("output schema: %s", p)
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
		if got := tc.t.Markers(); got != tc.want {
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
	caller := asyncagentstest.NewParent(t, c)
	if _, err := c.Prompt(ctx, caller.SessionID, opencode.PromptRequest{Parts: []opencode.TextPartInput{opencode.NewText("RUN:echo tool-ctx-42")}}); err != nil {
		t.Fatal(err)
	}
	m := asyncagentstest.NewManager(t, c, fastPoll, asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply))
	ts := tools(m)
	call := func(name, args string) string {
		t.Helper()
		out, err := ts[name].Handler(ctx, caller, json.RawMessage(args))
		if err != nil {
			t.Fatalf("%s(%s): %v", name, args, err)
		}
		return out
	}

	launched := call("asyncagents_task", `{"description":"quote it","prompt":"QUOTE:tool-ctx-","agent":"general","fork":true}`)
	if !strings.Contains(launched, "Background task launched: tsk_") || !strings.Contains(launched, "notification") {
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

// S-5, T-22: the task tool's description states the host's limits, and a deadline longer
// than the host's is refused with the limit named; a launch over the per-parent cap is an
// error the model can act on.
func TestTaskToolStatesTheLimits(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	m := asyncagentstest.NewManager(t, f, fastPoll, asyncagents.WithDeadline(30*time.Minute), asyncagents.WithStaleTimeout(5*time.Minute),
		asyncagents.WithMaxActivePerParent(2), asyncagents.WithConcurrency(asyncagents.Limits{Default: 1}))
	task := tools(m)["asyncagents_task"]
	for _, want := range []string{"at most 2 of this session's tasks can be active at once", "beyond 1 running at once, new tasks wait queued",
		"longer than 30m 0s is stopped", "no activity for 5m 0s is stopped"} {
		if !strings.Contains(task.Description, want) {
			t.Errorf("task tool description lacks %q:\n%s", want, task.Description)
		}
	}
	if d := tools(offlineManager(t))["asyncagents_task"].Description; strings.Contains(d, "Limits") {
		t.Errorf("without limits the description names some: %s", d)
	}
	caller := asyncagentstest.NewParent(t, f)
	if _, err := task.Handler(context.Background(), caller, json.RawMessage(`{"description":"d","prompt":"p","agent":"general","deadline":3600}`)); !errors.Is(err, asyncagents.ErrInvalidInput) ||
		!strings.Contains(err.Error(), "at most 1800 seconds, this host's limit") {
		t.Errorf("deadline over the host's = %v", err)
	}
	for range 2 {
		if _, err := task.Handler(context.Background(), caller, json.RawMessage(`{"description":"d","prompt":"p","agent":"general","deadline":60}`)); err != nil {
			t.Fatal(err)
		}
	}
	_, err := task.Handler(context.Background(), caller, json.RawMessage(`{"description":"d","prompt":"p","agent":"general"}`))
	if !errors.Is(err, asyncagents.ErrTaskLimit) || !strings.Contains(err.Error(), "2 active tasks") {
		t.Errorf("third launch = %v, want ErrTaskLimit", err)
	}
}

// T-22 through the task tool: deadline is in seconds.
func TestTaskToolDeadlineInSeconds(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	m := asyncagentstest.NewManager(t, f)
	caller := asyncagentstest.NewParent(t, f)
	reply, err := tools(m)["asyncagents_task"].Handler(context.Background(), caller,
		json.RawMessage(`{"description":"d","prompt":"p","agent":"general","deadline":90}`))
	if err != nil {
		t.Fatal(err)
	}
	tasks, _ := m.List(caller, "")
	if len(tasks) != 1 || tasks[0].Deadline != 90*time.Second {
		t.Fatalf("reply %q, tasks %+v", reply, tasks)
	}
	if _, err := tools(m)["asyncagents_task"].Handler(context.Background(), caller,
		json.RawMessage(`{"description":"d","prompt":"p","agent":"general","deadline":-1}`)); !errors.Is(err, asyncagents.ErrInvalidInput) {
		t.Errorf("negative deadline: %v", err)
	}
}
