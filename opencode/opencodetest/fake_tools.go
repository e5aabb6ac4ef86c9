package opencodetest

import (
	"encoding/json"
	"path"
	"time"

	"github.com/asyncagents/asyncagents/opencode"
)

// ToolFunc decides the outcome of a tool call in a [FakeClient]. Returning ok == false leaves
// the call to the fake's defaults: the simulated shell for "bash", and for any other tool a
// completed part with an empty output. It is called without locks held and must not block.
type ToolFunc func(call ToolCall) (result ToolResult, ok bool)

// ToolResult is the outcome of a tool call in a [FakeClient].
type ToolResult struct {
	// Output is the tool part's state.output when it completes.
	Output string
	// Title is state.title; the bash default is the command.
	Title string
	// Metadata is state.metadata; the bash default is {"output", "exit", "truncated"}.
	Metadata map[string]any
	// Error, when not empty, ends the part with status "error" and this text instead.
	Error string
	// Permission, when not empty, makes the call ask this permission for Patterns first, as
	// external_directory is asked for a bash command outside the project: permission.asked,
	// the session stays busy until a reply or an abort. The session's permission rules are
	// checked first: "allow" runs the call, "deny" ends it with status "error".
	Permission string
	Patterns   []string
	// Sleep is how long the call runs (real time; an abort ends it).
	Sleep time.Duration
}

func toolTitle(p *partJSON) string {
	if p.Tool == "bash" {
		var in struct {
			Command string `json:"command"`
		}
		_ = json.Unmarshal(p.State.Input, &in)
		return in.Command
	}
	return p.State.Title
}

// runTool runs one tool call of the current step: pending, running, a permission request if
// one is needed, then completed (or error). It reports turnHalted when a rejection without a
// message stops the loop, and false when the run was stopped.
func (f *FakeClient) runTool(r *fakeRun, call ToolCall) (turnEnd, bool) {
	input := json.RawMessage(call.Arguments)
	if !json.Valid(input) {
		input = json.RawMessage(`{}`)
	}
	p := f.addPart(r, &partJSON{Type: opencode.PartTool, Tool: call.Name, CallID: call.ID,
		State: &stateJSON{Status: opencode.ToolPending, Input: json.RawMessage(`{}`), Raw: ptr("")}})
	p.State = &stateJSON{Status: opencode.ToolRunning, Input: input, Time: &partTimeJSON{Start: f.ms()}}
	r.tool = p
	f.emitPart(r.s, p)

	res, live := f.toolResult(r, call)
	if !live {
		return turnStopped, false
	}
	if res.Permission != "" {
		var end turnEnd
		if res, end = f.permit(r, p, call, res); end != turnDone {
			return end, end != turnStopped
		}
	}
	if res.Error != "" {
		f.toolError(r, p, res.Error)
		return turnDone, true
	}
	if !f.completeTool(r, p, input, res) {
		return turnStopped, false
	}
	return turnDone, true
}

// toolResult decides the outcome of a call: the ToolFunc's, else the fake's default. It
// reports false when the run was stopped while the ToolFunc ran.
func (f *FakeClient) toolResult(r *fakeRun, call ToolCall) (ToolResult, bool) {
	res, ok := ToolResult{}, false
	if fn := f.cfg.tool; fn != nil {
		f.mu.Unlock()
		res, ok = fn(call)
		f.mu.Lock()
		if r.aborted {
			return res, false
		}
	}
	if !ok {
		res = f.defaultTool(call, r.s.info.Directory)
	}
	return res, true
}

// completeTool runs the call for res.Sleep and completes its part with res. It reports
// false when the run was stopped meanwhile.
func (f *FakeClient) completeTool(r *fakeRun, p *partJSON, input json.RawMessage, res ToolResult) bool {
	p.State.Metadata = map[string]any{"output": ""}
	f.emitPart(r.s, p)
	if res.Sleep > 0 && !f.wait(r, nil, res.Sleep) {
		return false
	}
	if res.Output != "" && res.Output != "(no output)" {
		p.State.Metadata = map[string]any{"output": res.Output}
		f.emitPart(r.s, p)
	}
	if res.Metadata == nil {
		res.Metadata = map[string]any{}
	}
	p.State = &stateJSON{Status: opencode.ToolCompleted, Input: input, Output: ptr(res.Output), Title: res.Title,
		Metadata: res.Metadata, Time: &partTimeJSON{Start: p.State.Time.Start, End: f.ms()}}
	r.tool = nil
	f.emitPart(r.s, p)
	return true
}

func (f *FakeClient) toolError(r *fakeRun, p *partJSON, msg string) {
	p.State = &stateJSON{Status: opencode.ToolError, Input: p.State.Input, Error: msg,
		Time: &partTimeJSON{Start: p.State.Time.Start, End: f.ms()}}
	r.tool = nil
	f.emitPart(r.s, p)
}

// defaultTool is the fake's own outcome for a call in dir: the simulated shell for bash.
func (f *FakeClient) defaultTool(call ToolCall, dir string) ToolResult {
	if call.Name != "bash" {
		return ToolResult{}
	}
	var in struct {
		Command string `json:"command"`
	}
	_ = json.Unmarshal([]byte(call.Arguments), &in)
	out, exit, sleep := runShell(in.Command, dir)
	if out == "" {
		out = "(no output)"
	}
	res := ToolResult{Output: out, Title: in.Command, Sleep: sleep,
		Metadata: map[string]any{"output": out, "exit": exit, "truncated": false}}
	if dirs := externalDirs(in.Command, dir); len(dirs) > 0 {
		res.Permission = "external_directory"
		for _, d := range dirs {
			res.Patterns = append(res.Patterns, path.Join(d, "*"))
		}
	}
	return res
}
