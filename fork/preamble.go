package fork

import (
	"fmt"
	"strings"
)

// Preamble returns the text that tells a forked child how its inherited context was built
// from st, the statistics of a [Pipeline.Run] or [Pipeline.RunPages] of p: whether a
// compaction summary was used, or that older messages were removed to fit p's budget (and
// how many of the newest were kept), or that all were kept; how many tool results in the
// context are whole or limited to the tier-2 and tier-3 limits (with p's limits); and that
// it should read files or run commands again when it needs their complete content. It reads
// only what the context shows and whether anything was removed, so Run and RunPages give
// the same preamble. [Pipeline.Run] sets [Result.Preamble] to it.
func (p *Pipeline) Preamble(st Stats) string {
	var b strings.Builder
	b.WriteString("You are a background task forked from another agent's session. Its conversation so far is " +
		"inside <inherited_context> below, for reference; your own task follows in the next message.\n" +
		"How the inherited context was prepared:\n")
	switch {
	case st.RemovedMessages > 0:
		b.WriteString("- The session's older messages were removed to fit the budget: the history starts part-way through it.\n")
	case st.CompactionDetected:
		b.WriteString("- The session had been compacted: it starts with the latest compaction summary; the messages before it were dropped.\n")
	default:
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
		fmt.Fprintf(&b, "- Only the newest message was kept, cut in the middle to fit the budget of %d characters.\n", p.cfg.budget)
	case st.RemovedMessages > 0:
		fmt.Fprintf(&b, "- The %d newest messages were kept: all that fit the budget of %d characters.\n", st.FinalMessages, p.cfg.budget)
	case st.BudgetClipped:
		fmt.Fprintf(&b, "- The only message was cut in the middle to fit the budget of %d characters.\n", p.cfg.budget)
	default:
		fmt.Fprintf(&b, "- All %d messages were kept (budget %d characters).\n", st.FinalMessages, p.cfg.budget)
	}
	b.WriteString("Some content may be incomplete: when you need the complete content of a file or a command's output, " +
		"read the file or run the command again instead of relying on the inherited context.")
	return b.String()
}
