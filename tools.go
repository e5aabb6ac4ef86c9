package asyncagents

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/asyncagents/asyncagents/hints"
	"github.com/asyncagents/asyncagents/opencode"
)

// Tool is one Manager operation offered to a model (SPEC §5): register Name, Description
// and Parameters (a JSON Schema object) with the agent framework, and call Handler with
// the calling session and the model's JSON arguments. Handler returns the text to show the
// model. Bad arguments (malformed JSON, wrong types, unknown fields, missing required ones)
// and failed operations return an error whose text is written for the model; it matches
// the Err… values with errors.Is. Handlers never panic on bad input.
type Tool struct {
	Name        string
	Description string
	Parameters  json.RawMessage
	Handler     func(ctx context.Context, caller Caller, args json.RawMessage) (string, error)
}

// Tools returns the five tools of m, named with its tool prefix (default "asyncagents"):
// <prefix>_task, _output, _cancel, _list and _clear.
func Tools(m *Manager) []Tool {
	p := m.ToolPrefix()
	h := toolHandlers{m: m, prefix: p}
	return []Tool{
		{Name: p + "_task", Description: "Launch a sub-agent in the background, in its own session, and keep working: " +
			"a notification arrives when it ends. Set fork to give it this conversation's context. Set resume to a task id " +
			"(with prompt) to send a follow-up to a finished task instead. fork and resume exclude each other.",
			Parameters: json.RawMessage(taskSchema), Handler: h.task},
		{Name: p + "_output", Description: "Get a background task's status and, when it completed, its result. " +
			"Non-blocking by default; set block to wait until it ends (timeout in seconds, default 120, at most 600).",
			Parameters: json.RawMessage(outputSchema), Handler: h.output},
		{Name: p + "_cancel", Description: "Cancel a running background task.",
			Parameters: json.RawMessage(idSchema), Handler: h.cancel},
		{Name: p + "_list", Description: "List the background tasks of this session, newest first, optionally by status.",
			Parameters: json.RawMessage(listSchema), Handler: h.list},
		{Name: p + "_clear", Description: "Abort this session's running background tasks and forget all its tasks.",
			Parameters: json.RawMessage(`{"type":"object","properties":{},"additionalProperties":false}`), Handler: h.clear},
	}
}

const (
	taskSchema = `{"type":"object","properties":{` +
		`"description":{"type":"string","description":"A short description (3-5 words) of the task"},` +
		`"prompt":{"type":"string","description":"The task for the agent, or the follow-up when resuming"},` +
		`"agent":{"type":"string","description":"The agent to run (for example general or explore)"},` +
		`"fork":{"type":"boolean","description":"Give the agent this conversation's context"},` +
		`"resume":{"type":"string","description":"Id of a finished task to send the prompt to as a follow-up"},` +
		`"model":{"type":"string","description":"Optional model as providerID/modelID"}},` +
		`"required":["prompt"],"additionalProperties":false}`
	outputSchema = `{"type":"object","properties":{` +
		`"task_id":{"type":"string","description":"The task id"},` +
		`"block":{"type":"boolean","description":"Wait until the task ends"},` +
		`"timeout":{"type":"number","minimum":0,"description":"Seconds to wait when blocking (default 120, at most 600)"}},` +
		`"required":["task_id"],"additionalProperties":false}`
	idSchema = `{"type":"object","properties":{"task_id":{"type":"string","description":"The task id"}},` +
		`"required":["task_id"],"additionalProperties":false}`
	listSchema = `{"type":"object","properties":{"status":{"type":"string",` +
		`"enum":["running","completed","error","cancelled","resumed"],"description":"Only tasks with this status"}},` +
		`"additionalProperties":false}`
)

type toolHandlers struct {
	m      *Manager
	prefix string
}

// decodeArgs decodes a tool's JSON arguments strictly: unknown fields, wrong types and
// trailing data are ErrInvalidInput.
func decodeArgs(args json.RawMessage, v any) error {
	if len(bytes.TrimSpace(args)) == 0 || string(bytes.TrimSpace(args)) == "null" {
		args = json.RawMessage("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: bad arguments: %v", ErrInvalidInput, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: bad arguments: data after the JSON object", ErrInvalidInput)
	}
	return nil
}

func (h toolHandlers) task(ctx context.Context, caller Caller, args json.RawMessage) (string, error) {
	var in struct {
		Description string `json:"description"`
		Prompt      string `json:"prompt"`
		Agent       string `json:"agent"`
		Fork        bool   `json:"fork"`
		Resume      string `json:"resume"`
		Model       string `json:"model"`
	}
	if err := decodeArgs(args, &in); err != nil {
		return "", err
	}
	if in.Fork && in.Resume != "" {
		return "", ErrForkResumeConflict
	}
	var model *opencode.Model
	if in.Model != "" {
		prov, id, ok := strings.Cut(in.Model, "/")
		if !ok || prov == "" || id == "" {
			return "", fmt.Errorf("%w: model %q must be providerID/modelID", ErrInvalidInput, in.Model)
		}
		model = &opencode.Model{ProviderID: prov, ModelID: id}
	}
	if in.Resume != "" {
		t, err := h.m.Resume(ctx, caller, in.Resume, in.Prompt)
		if err != nil {
			return "", err
		}
		var b strings.Builder
		fmt.Fprintf(&b, "Resumed task %s (resume #%d): the follow-up runs in the background in the same session. "+
			"A notification will come when it finishes; %s_output(task_id=%q) shows its status.", t.DisplayID, t.ResumeCount, h.prefix, t.DisplayID)
		if in.Agent != "" || in.Description != "" {
			b.WriteString("\nNote: agent and description are ignored when resuming; the task keeps its own.")
		}
		return b.String(), nil
	}
	t, err := h.m.Launch(ctx, LaunchInput{Caller: caller, Description: in.Description, Prompt: in.Prompt,
		Agent: in.Agent, Fork: in.Fork, Model: model})
	if err != nil {
		if t.ID != "" {
			return "", fmt.Errorf("task %s failed to start: %w", t.DisplayID, err)
		}
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Background task launched: %s\nDescription: %s\nAgent: %s\n", t.DisplayID, t.Description, t.Agent)
	if t.Forked && t.ForkStats != nil {
		fmt.Fprintf(&b, "Forked with this conversation's context (%d of %d messages", t.ForkStats.FinalMessages, t.ForkStats.OriginalMessages)
		if t.ForkStats.CompactionDetected {
			b.WriteString(", from the latest compaction summary")
		}
		b.WriteString(").\n")
	}
	fmt.Fprintf(&b, "It runs in the background; a notification will come when it finishes. "+
		"Use %s_output(task_id=%q) to check on it.", h.prefix, t.DisplayID)
	return b.String(), nil
}

func (h toolHandlers) output(ctx context.Context, caller Caller, args json.RawMessage) (string, error) {
	var in struct {
		TaskID  string   `json:"task_id"`
		Block   bool     `json:"block"`
		Timeout *float64 `json:"timeout"`
	}
	if err := decodeArgs(args, &in); err != nil {
		return "", err
	}
	opts := OutputOptions{Block: in.Block}
	if in.Timeout != nil {
		if *in.Timeout < 0 {
			return "", fmt.Errorf("%w: timeout %v must not be negative", ErrInvalidInput, *in.Timeout)
		}
		opts.Timeout = time.Duration(min(*in.Timeout, 600) * float64(time.Second))
	}
	out, err := h.m.Output(ctx, caller, in.TaskID, opts)
	if err != nil {
		return "", err
	}
	return FormatOutput(out, h.m.Now()), nil
}

// FormatOutput renders an Output as the output tool shows it: status and, when completed,
// the description, duration and result; when failed, the error; while running, progress.
func FormatOutput(out Output, now time.Time) string {
	t := out.Task
	d := hints.Duration(t.Duration(now))
	var b strings.Builder
	switch t.Status {
	case StatusCompleted:
		fmt.Fprintf(&b, "Task %s completed in %s.\nDescription: %s\n\nResult:\n%s", t.DisplayID, d, t.Description, t.Result)
	case StatusError:
		fmt.Fprintf(&b, "Task %s failed after %s.\nDescription: %s\nError: %s", t.DisplayID, d, t.Description, t.Error)
	case StatusCancelled:
		fmt.Fprintf(&b, "Task %s was cancelled after %s.\nDescription: %s", t.DisplayID, d, t.Description)
	default:
		fmt.Fprintf(&b, "Task %s is %s (%s so far).\nDescription: %s\nTool calls: %d", t.DisplayID, t.Status, d, t.Description, t.Progress.ToolCalls)
		if len(t.Progress.LastTools) > 0 {
			fmt.Fprintf(&b, " (last: %s)", strings.Join(t.Progress.LastTools, ", "))
		}
		if t.Permission != nil {
			fmt.Fprintf(&b, "\nWaiting for permission: %s %s", t.Permission.Permission, strings.Join(t.Permission.Patterns, ", "))
		}
		if out.TimedOut {
			b.WriteString("\nTimed out waiting; the task is still running.")
		}
	}
	return b.String()
}

func (h toolHandlers) cancel(ctx context.Context, caller Caller, args json.RawMessage) (string, error) {
	var in struct {
		TaskID string `json:"task_id"`
	}
	if err := decodeArgs(args, &in); err != nil {
		return "", err
	}
	t, err := h.m.Cancel(ctx, caller, in.TaskID)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("Cancelled task %s (%s) after %s.", t.DisplayID, t.Description, hints.Duration(t.Duration(h.m.Now()))), nil
}

func (h toolHandlers) list(_ context.Context, caller Caller, args json.RawMessage) (string, error) {
	var in struct {
		Status Status `json:"status"`
	}
	if err := decodeArgs(args, &in); err != nil {
		return "", err
	}
	tasks, err := h.m.List(caller, in.Status)
	if err != nil {
		return "", err
	}
	return FormatList(tasks, in.Status, h.m.Now()), nil
}

// FormatList renders tasks as the list tool shows them (SPEC T-13): one line per task,
// the display id followed by " (forked)" and " (resumed)" where they apply.
func FormatList(tasks []Task, status Status, now time.Time) string {
	if len(tasks) == 0 {
		if status != "" {
			return fmt.Sprintf("No background tasks found with status %q", status)
		}
		return "No background tasks found"
	}
	var b strings.Builder
	b.WriteString("Background tasks (newest first):")
	for _, t := range tasks {
		fmt.Fprintf(&b, "\n- %s%s | %s | agent: %s | %s | %s | %d tool calls",
			t.DisplayID, Markers(t), t.Description, t.Agent, t.Status, hints.Duration(t.Duration(now)), t.Progress.ToolCalls)
	}
	return b.String()
}

// Markers returns " (forked)", " (resumed)", both in that order, or "" (SPEC T-13).
func Markers(t Task) string {
	s := ""
	if t.Forked {
		s += " (forked)"
	}
	if t.ResumeCount > 0 {
		s += " (resumed)"
	}
	return s
}

func (h toolHandlers) clear(ctx context.Context, caller Caller, args json.RawMessage) (string, error) {
	var in struct{}
	if err := decodeArgs(args, &in); err != nil {
		return "", err
	}
	r, err := h.m.Clear(ctx, caller)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("Cleared %d background task(s); aborted %d running.", r.Removed, r.Aborted), nil
}
