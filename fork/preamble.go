package fork

import (
	"fmt"
	"strings"
)

// Preamble returns the text that tells a forked child how its inherited context was built
// from st, the statistics of a [Pipeline.Run] of p: whether a compaction summary was used,
// how many tool results are whole or limited to the tier-2 and tier-3 limits (with p's
// limits), how many of the oldest messages were removed to fit p's budget (or that all were
// kept), and that it should read files or run commands again when it needs their complete
// content. [Pipeline.Run] sets [Result.Preamble] to it.
func (p *Pipeline) Preamble(st Stats) string {
	var b strings.Builder
	b.WriteString("You are a background task forked from another agent's session. Its conversation so far is " +
		"inside <inherited_context> below, for reference; your own task follows in the next message.\n" +
		"How the inherited context was prepared:\n")
	if st.CompactionDetected {
		b.WriteString("- The session had been compacted: it starts with the latest compaction summary; the messages before it were dropped.\n")
	} else {
		b.WriteString("- No compaction summary was used: the history starts at the beginning of the session.\n")
	}
	fmt.Fprintf(&b, "- Tool results: %d newest kept whole, %d limited to %d characters, %d limited to %d characters",
		st.Tier1, st.Tier2, p.cfg.tierTwoLim, st.Tier3, p.cfg.tierThrLim)
	if st.TruncatedResults > 0 {
		fmt.Fprintf(&b, " (%d were cut; a cut is marked \"...[truncated N chars]...\")", st.TruncatedResults)
	}
	b.WriteString(".\n")
	switch {
	case st.RemovedMessages > 0 && st.BudgetClipped:
		fmt.Fprintf(&b, "- The %d oldest messages were removed and the last one was cut in the middle to fit the budget of %d characters.\n",
			st.RemovedMessages, p.cfg.budget)
	case st.RemovedMessages > 0:
		fmt.Fprintf(&b, "- The %d oldest messages were removed to fit the budget of %d characters.\n", st.RemovedMessages, p.cfg.budget)
	case st.BudgetClipped:
		fmt.Fprintf(&b, "- The only message was cut in the middle to fit the budget of %d characters.\n", p.cfg.budget)
	default:
		fmt.Fprintf(&b, "- All %d messages were kept (budget %d characters).\n", st.FinalMessages, p.cfg.budget)
	}
	b.WriteString("Some content may be incomplete: when you need the complete content of a file or a command's output, " +
		"read the file or run the command again instead of relying on the inherited context.")
	return b.String()
}
