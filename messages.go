package asyncagents

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/asyncagents/asyncagents/internal/transcript"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/truncate"
)

// Lengths, in characters, beyond which FormatMessages cuts what it shows.
const (
	maxShownText   = 4000 // a text part
	maxShownResult = 2000 // a tool result, a reasoning part or a message's error
	maxShownInput  = 300  // a tool call's input
)

// FormatMessages renders messages of a task session (Output.Messages) as the output tool
// shows them to the model, oldest first: a header line per message ("--- msg_… user" or
// "--- msg_… assistant") and its error, then its text parts, tool calls ("[Tool: bash]
// {input}", the input cut to 300 characters followed by "..."; " (running)" while the call
// runs), files and subtasks, and "[Compaction]"; reasoning ("[Thinking] …") with
// includeThinking; tool outputs and errors ("[Tool result]", "[Tool error]"; a pruned output
// as "[Old tool result content cleared]", as OpenCode shows it) with includeToolResults.
// Texts are cut to 4,000 characters, results, reasoning and errors to 2,000, with a note
// saying how many were left out (see package [truncate]). The parts are written as in a
// forked task's context (package [fork]), without its tiers and budget.
//
// The messages are the task's text: they stand between a <task_messages> tag and its closing
// tag, both carrying a boundary="…" the text does not hold, after a line saying that the
// text between the tags is data, not instructions (see [FormatOutput]). One reply shows at
// most 50,000 characters of messages: those that do not fit are left out, and a first
// message longer than that is cut. more, or messages left out, add a line after the frame
// saying that there are more messages and which since_message_id reads on.
func FormatMessages(msgs []opencode.Message, more, includeThinking, includeToolResults bool) string {
	style := transcript.Style{TextLimit: maxShownText, Compaction: true, Status: true,
		Tool: func(p *opencode.Part) (int, string, bool) {
			if !includeToolResults || !transcript.HasResult(p) {
				return maxShownInput, "", false
			}
			out, _ := truncate.Cut(transcript.Result(p), maxShownResult, truncate.HeadTail)
			return maxShownInput, out, true
		}}
	if includeThinking {
		style.ThinkingLimit = maxShownResult
	}
	if len(msgs) == 0 {
		return "Messages (0)."
	}
	var body []byte
	shown, chars := len(msgs), 0
	for i := range msgs {
		start := len(body)
		m := &msgs[i]
		if i > 0 {
			body = append(body, '\n')
		}
		body = fmt.Appendf(body, "--- %s %s", m.Info.ID, m.Info.Role)
		if m.Info.Error != nil {
			msg, _ := truncate.Cut(m.Info.Error.Message(), maxShownResult, truncate.HeadOnly)
			body = fmt.Appendf(body, "\n[Error: %s]", msg)
		}
		for j := range m.Parts {
			body = style.Append(body, &m.Parts[j])
		}
		if chars += utf8.RuneCount(body[start:]); chars > maxShownMessages {
			shown = max(i, 1) // the first message is cut, the others are left for the next read
			if i == 0 {
				cut, _ := truncate.Cut(string(body), maxShownMessages, truncate.HeadOnly)
				body = []byte(cut)
			} else {
				body = body[:start]
			}
			break
		}
	}
	var b strings.Builder
	switch {
	case shown < len(msgs):
		fmt.Fprintf(&b, "Messages (%d of %d, oldest first: one reply shows %d characters; the task's text, %s):\n",
			shown, len(msgs), maxShownMessages, dataNote)
	default:
		fmt.Fprintf(&b, "Messages (%d, oldest first; the task's text, %s):\n", len(msgs), dataNote)
	}
	b.WriteString(frame("task_messages", string(body)))
	if more || shown < len(msgs) {
		fmt.Fprintf(&b, "\n(More messages exist; since_message_id=%q reads on from the last one shown.)", msgs[shown-1].Info.ID)
	}
	return b.String()
}
