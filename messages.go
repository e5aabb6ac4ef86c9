package asyncagents

import (
	"fmt"

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
// saying how many were left out (see package [truncate]). more adds a line saying that
// there are more messages. The parts are written as in a forked task's context (package
// [fork]), without its tiers and budget.
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
	b := fmt.Appendf(nil, "Messages (%d, oldest first):", len(msgs))
	for i := range msgs {
		m := &msgs[i]
		b = fmt.Appendf(b, "\n--- %s %s", m.Info.ID, m.Info.Role)
		if m.Info.Error != nil {
			msg, _ := truncate.Cut(m.Info.Error.Message(), maxShownResult, truncate.HeadOnly)
			b = fmt.Appendf(b, "\n[Error: %s]", msg)
		}
		for j := range m.Parts {
			b = style.Append(b, &m.Parts[j])
		}
	}
	if more && len(msgs) > 0 {
		b = fmt.Appendf(b, "\n(More messages exist; since_message_id=%q reads on from the last one shown.)", msgs[len(msgs)-1].Info.ID)
	}
	return string(b)
}
