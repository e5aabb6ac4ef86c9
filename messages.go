package asyncagents

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/truncate"
)

// Lengths, in characters, beyond which FormatMessages cuts what it shows.
const (
	maxShownText   = 4000 // a text part
	maxShownResult = 2000 // a tool result or a reasoning part
	maxShownInput  = 300  // a tool call's input
)

// compactedResult is what OpenCode shows a model instead of a pruned tool output.
const compactedResult = "[Old tool result content cleared]"

// FormatMessages renders messages of a task session (Output.Messages) as the output tool
// shows them to the model, oldest first: a header line per message ("--- msg_… user" or
// "--- msg_… assistant"), then its text parts, tool calls ("[Tool: bash] {input}"), files
// and subtasks; reasoning ("[Thinking] …") with includeThinking; tool outputs and errors
// ("[Tool result]", "[Tool error]"; a pruned output as "[Old tool result content cleared]",
// as OpenCode shows it) with includeToolResults. Long texts are cut to a few thousand
// characters with a note saying how many were left out. more adds a line saying that there
// are more messages.
func FormatMessages(msgs []opencode.Message, more, includeThinking, includeToolResults bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Messages (%d, oldest first):", len(msgs))
	for i := range msgs {
		m := &msgs[i]
		fmt.Fprintf(&b, "\n--- %s %s", m.Info.ID, m.Info.Role)
		if m.Info.Error != nil {
			fmt.Fprintf(&b, "\n[Error: %s]", cut(m.Info.Error.Message(), maxShownResult, truncate.HeadOnly))
		}
		for _, p := range m.Parts {
			writePart(&b, &p, includeThinking, includeToolResults)
		}
	}
	if more && len(msgs) > 0 {
		fmt.Fprintf(&b, "\n(More messages exist; since_message_id=%q reads on from the last one shown.)", msgs[len(msgs)-1].Info.ID)
	}
	return b.String()
}

func writePart(b *strings.Builder, p *opencode.Part, thinking, results bool) {
	switch p.Type {
	case opencode.PartText:
		if !p.Ignored && p.Text != "" {
			b.WriteString("\n" + cut(p.Text, maxShownText, truncate.HeadTail))
		}
	case opencode.PartReasoning:
		if thinking && p.Text != "" {
			b.WriteString("\n[Thinking] " + cut(p.Text, maxShownResult, truncate.HeadTail))
		}
	case opencode.PartFile:
		name := p.Filename
		if name == "" {
			name = p.Mime
		}
		b.WriteString("\n[File: " + name + "]")
	case opencode.PartSubtask:
		fmt.Fprintf(b, "\n[Subtask: %s] %s", p.Agent, p.Description)
	case opencode.PartCompaction:
		b.WriteString("\n[Compaction]")
	case opencode.PartTool:
		writeTool(b, p, results)
	}
}

func writeTool(b *strings.Builder, p *opencode.Part, results bool) {
	b.WriteString("\n[Tool: " + p.Tool + "]")
	s := p.State
	if s == nil {
		return
	}
	if in := compactJSON(s.Input); in != "" {
		b.WriteString(" " + cut(in, maxShownInput, truncate.HeadOnly))
	}
	switch s.Status {
	case opencode.ToolPending, opencode.ToolRunning:
		b.WriteString(" (" + s.Status + ")")
	case opencode.ToolCompleted:
		if results {
			out := s.Output
			if s.Time.Compacted != 0 {
				out = compactedResult
			}
			b.WriteString("\n[Tool result]\n" + cut(out, maxShownResult, truncate.HeadTail))
		}
	case opencode.ToolError:
		if results {
			b.WriteString("\n[Tool error]\n" + cut(s.Error, maxShownResult, truncate.HeadTail))
		}
	}
}

// cut shortens text to limit characters with the truncate package's note.
func cut(text string, limit int, s truncate.Strategy) string {
	out, _ := truncate.Cut(text, limit, s)
	return out
}

func compactJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if len(raw) == 0 || json.Compact(&b, raw) != nil || b.String() == "{}" || b.String() == "null" {
		return ""
	}
	return b.String()
}
