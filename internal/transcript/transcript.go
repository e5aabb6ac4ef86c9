// Package transcript writes the parts of OpenCode messages as the lines a model reads:
// "[Tool: bash] {…}", "[Tool result]", "[File: …]" and the like. It is the one renderer of
// message parts: the context a forked task inherits (package fork) and the output tool's
// session view (asyncagents.FormatMessages) differ only in the [Style] they pass. Lengths are
// characters (runes); no cut splits a UTF-8 sequence. The package has no state.
package transcript

import (
	"bytes"
	"encoding/json"
	"math"

	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/truncate"
)

// Cleared is the text OpenCode shows the model in place of a tool output it pruned (the
// tool part's state.time.compacted is set); [Result] gives it for such a part.
const Cleared = "[Old tool result content cleared]"

// Style says which parts [Style.Append] shows and how much of them. The zero Style shows
// the lines both views share, whole: text parts that are not ignored, "[File: name]" (the
// mime type when there is no file name), "[Subtask: agent] description" and
// "[Tool: name] input", without results; reasoning and compaction parts show nothing.
type Style struct {
	// TextLimit cuts a text part to so many characters, head and tail
	// ([truncate.HeadTail]); 0 keeps it whole.
	TextLimit int
	// ThinkingLimit, when positive, shows a reasoning part as "[Thinking] text", cut head
	// and tail to so many characters; 0 shows none.
	ThinkingLimit int
	// Compaction shows a compaction part as "[Compaction]".
	Compaction bool
	// Status ends the line of a pending or running call with its status: " (running)".
	Status bool
	// Tool is called once for each tool part that has a state, in the order of the parts,
	// before its lines are written. It returns how many characters of the call's input
	// show (more is cut and followed by "...") and the result to show on the lines after
	// the call: "[Tool result]" or, for a failed call, "[Tool error]", then the text; show
	// false writes none. Nil shows every input whole and no result.
	Tool func(p *opencode.Part) (inputLimit int, result string, show bool)
}

// Shows reports whether [Style.Append] writes a line for p.
func (s *Style) Shows(p *opencode.Part) bool {
	switch p.Type {
	case opencode.PartText:
		return !p.Ignored && p.Text != ""
	case opencode.PartReasoning:
		return s.ThinkingLimit > 0 && p.Text != ""
	case opencode.PartCompaction:
		return s.Compaction
	case opencode.PartFile, opencode.PartSubtask, opencode.PartTool:
		return true
	}
	return false
}

// Append appends the lines of p to buf, each after a newline, and returns the extended
// buffer; a part that does not show (see [Style.Shows]) appends nothing.
func (s *Style) Append(buf []byte, p *opencode.Part) []byte {
	switch p.Type {
	case opencode.PartText:
		if !p.Ignored && p.Text != "" {
			buf = append(buf, '\n')
			buf = append(buf, cut(p.Text, s.TextLimit)...)
		}
	case opencode.PartReasoning:
		if s.ThinkingLimit > 0 && p.Text != "" {
			buf = append(buf, "\n[Thinking] "...)
			buf = append(buf, cut(p.Text, s.ThinkingLimit)...)
		}
	case opencode.PartFile:
		name := p.Filename
		if name == "" {
			name = p.Mime
		}
		buf = append(buf, "\n[File: "...)
		buf = append(buf, name...)
		buf = append(buf, ']')
	case opencode.PartSubtask:
		buf = append(buf, "\n[Subtask: "...)
		buf = append(buf, p.Agent...)
		buf = append(buf, "] "...)
		buf = append(buf, p.Description...)
	case opencode.PartCompaction:
		if s.Compaction {
			buf = append(buf, "\n[Compaction]"...)
		}
	case opencode.PartTool:
		buf = s.appendTool(buf, p)
	}
	return buf
}

func (s *Style) appendTool(buf []byte, p *opencode.Part) []byte {
	buf = append(buf, "\n[Tool: "...)
	buf = append(buf, p.Tool...)
	buf = append(buf, ']')
	st := p.State
	if st == nil {
		return buf
	}
	limit, result, show := math.MaxInt, "", false
	if s.Tool != nil {
		limit, result, show = s.Tool(p)
	}
	buf = appendInput(buf, st.Input, limit)
	if s.Status && (st.Status == opencode.ToolPending || st.Status == opencode.ToolRunning) {
		buf = append(buf, " ("...)
		buf = append(buf, st.Status...)
		buf = append(buf, ')')
	}
	if show {
		if st.Status == opencode.ToolError {
			buf = append(buf, "\n[Tool error]\n"...)
		} else {
			buf = append(buf, "\n[Tool result]\n"...)
		}
		buf = append(buf, result...)
	}
	return buf
}

// HasResult reports whether the tool part p has a result: its call completed or failed.
func HasResult(p *opencode.Part) bool {
	return p.State != nil && (p.State.Status == opencode.ToolCompleted || p.State.Status == opencode.ToolError)
}

// Result returns the text the model was shown as the result of p, a tool part with a
// result ([HasResult]): [Cleared] when OpenCode pruned it (state.time.compacted), else the
// error of a failed call or the output of a completed one.
func Result(p *opencode.Part) string {
	switch {
	case p.State.Time.Compacted != 0:
		return Cleared
	case p.State.Status == opencode.ToolError:
		return p.State.Error
	}
	return p.State.Output
}

// cut cuts text head and tail to limit characters; a limit of 0 keeps it whole.
func cut(text string, limit int) string {
	if limit <= 0 {
		return text
	}
	out, _ := truncate.Cut(text, limit, truncate.HeadTail)
	return out
}

// appendInput appends " " and a tool input as JSON without insignificant whitespace, key
// order as received, cut to limit characters plus "...". Absent, null, empty ("") and {}
// inputs append nothing; an input that is not JSON is shown as received.
func appendInput(buf []byte, raw json.RawMessage, limit int) []byte {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" || string(raw) == "{}" || string(raw) == `""` {
		return buf
	}
	var b bytes.Buffer
	b.Grow(len(raw))
	in := raw
	if json.Compact(&b, raw) == nil {
		in = b.Bytes()
	}
	if string(in) == "{}" {
		return buf
	}
	buf = append(buf, ' ')
	if len(in) <= limit { // bytes ≥ characters
		return append(buf, in...)
	}
	p, cut := truncate.Prefix(string(in), limit)
	buf = append(buf, p...)
	if cut {
		buf = append(buf, "..."...)
	}
	return buf
}
