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
	s := r.s
	input := json.RawMessage(call.Arguments)
	if !json.Valid(input) {
		input = json.RawMessage(`{}`)
	}
	p := f.addPart(r, &partJSON{Type: opencode.PartTool, Tool: call.Name, CallID: call.ID,
		State: &stateJSON{Status: opencode.ToolPending, Input: json.RawMessage(`{}`), Raw: ptr("")}})
	p.State = &stateJSON{Status: opencode.ToolRunning, Input: input, Time: &partTimeJSON{Start: f.ms()}}
	r.tool = p
	f.emitPart(s, p)

	res, ok := ToolResult{}, false
	if fn := f.cfg.tool; fn != nil {
		f.mu.Unlock()
		res, ok = fn(call)
		f.mu.Lock()
		if r.aborted {
			return turnStopped, false
		}
	}
	if !ok {
		res = f.defaultTool(call, s.info.Directory)
	}
	if res.Permission != "" {
		switch f.evaluate(s, res.Permission, res.Patterns) {
		case "deny":
			res = ToolResult{Error: "The user has specified a rule which prevents you from using this specific tool call. " +
				"Here are some of the relevant rules " + f.relevantRules(s, res.Permission)}
		case "ask":
			reply, ok := f.ask(r, p, call, res)
			if !ok {
				return turnStopped, false
			}
			switch {
			case reply.Reply == opencode.ReplyAlways:
				for _, pat := range res.Patterns {
					s.always = append(s.always, opencode.PermissionRule{Permission: res.Permission, Pattern: pat, Action: "allow"})
				}
			case reply.Reply == opencode.ReplyReject && reply.Message != "":
				res = ToolResult{Error: "The user rejected permission to use this specific tool call with the following feedback: " + reply.Message}
			case reply.Reply == opencode.ReplyReject:
				f.toolError(r, p, "The user rejected permission to use this specific tool call.")
				return turnHalted, true
			}
		}
	}
	if res.Error != "" {
		f.toolError(r, p, res.Error)
		return turnDone, true
	}
	p.State.Metadata = map[string]any{"output": ""}
	f.emitPart(s, p)
	if res.Sleep > 0 && !f.wait(r, nil, res.Sleep) {
		return turnStopped, false
	}
	if res.Output != "" && res.Output != "(no output)" {
		p.State.Metadata = map[string]any{"output": res.Output}
		f.emitPart(s, p)
	}
	if res.Metadata == nil {
		res.Metadata = map[string]any{}
	}
	p.State = &stateJSON{Status: opencode.ToolCompleted, Input: input, Output: ptr(res.Output), Title: res.Title,
		Metadata: res.Metadata, Time: &partTimeJSON{Start: p.State.Time.Start, End: f.ms()}}
	r.tool = nil
	f.emitPart(s, p)
	return turnDone, true
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
