package fork

import (
	"github.com/asyncagents/asyncagents/internal/transcript"
	"github.com/asyncagents/asyncagents/opencode"
)

// ClearedResult is the text OpenCode shows the model in place of a tool output it pruned
// (the tool part's state.time.compacted is set): "[Old tool result content cleared]". The
// context shows the same text for such a result; a result whose text already contains it
// is shown as it is.
const ClearedResult = transcript.Cleared

const (
	openTag  = "<inherited_context>"
	closeTag = "\n</inherited_context>"
)

// Stats describes what [Pipeline.Run] did. All counts are of messages or tool results,
// lengths are in characters; the JSON keys are the ones tasks report. Tier1, Tier2, Tier3,
// TruncatedResults and HeadTailApplied count the tool results in the context, that is in the
// blocks the budget kept. [Pipeline.RunPages] reports the same, except for the counts that
// need the whole parent (see there).
type Stats struct {
	OriginalMessages   int  `json:"original_messages"`   // messages given to Run (read by RunPages)
	FinalMessages      int  `json:"final_messages"`      // blocks in the context
	CompactionDetected bool `json:"compaction_detected"` // a compaction boundary was used
	CompactionIndex    int  `json:"compaction_index"`    // index in the input of the kept summary, -1 if none
	Tier1              int  `json:"tier1"`               // results kept whole
	Tier2              int  `json:"tier2"`               // results limited to the tier-2 limit
	Tier3              int  `json:"tier3"`               // results limited to the tier-3 limit
	TruncatedResults   int  `json:"truncated_results"`   // results actually cut
	HeadTailApplied    int  `json:"head_tail_applied"`   // of those, cut head+tail
	RemovedMessages    int  `json:"removed_messages"`    // oldest blocks dropped for the budget
	TotalChars         int  `json:"total_chars"`         // length of Context
	BudgetClipped      bool `json:"budget_clipped"`      // the one block left was cut in the middle to fit
}

// Result is the output of [Pipeline.Run] and [Pipeline.RunPages].
type Result struct {
	// Context is "<inherited_context>", one block per message that shows anything, and
	// "\n</inherited_context>"; at most the budget in characters. A block is "\nUser:" or
	// "\nAgent:" followed by "\n" and a line for each part that shows: the text of a text
	// part that is not ignored, "[File: filename or mime]", "[Subtask: agent] description",
	// or "[Tool: name] parameters" followed, once the call has a result, by "[Tool result]"
	// or "[Tool error]" and the (possibly cut) result on the next lines. Reasoning, step
	// and other parts show nothing.
	Context string
	// Preamble tells the child how Context was built and what was cut (see
	// Pipeline.Preamble).
	Preamble string
	Stats    Stats
}

// Injection returns the text to send to a forked child before its task: the preamble, a
// blank line and the context. It is empty when the parent has nothing to show (no
// blocks), and then nothing should be sent.
func (r *Result) Injection() string {
	if r.Stats.FinalMessages == 0 {
		return ""
	}
	return r.Preamble + "\n\n" + r.Context
}

// Pipeline turns a parent session's messages into the context a forked child inherits:
// compaction slicing, tiered tool-result truncation, formatting, the character budget and
// the preamble. Build one with [New]. It is immutable and safe for concurrent use.
type Pipeline struct{ cfg config }

// New returns a pipeline with the defaults (the Default… constants) changed by opts. It
// returns an error matching [ErrInvalidOption] for a bad value: a negative tier size or
// limit, a budget below [MinBudget], or an empty no-truncation entry.
func New(opts ...Option) (*Pipeline, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o.apply(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Pipeline{cfg: cfg}, nil
}

// Run builds the context a forked child inherits from msgs, the parent's messages oldest
// first as GET /session/{id}/message returns them:
//
//  1. Slice: from the latest compaction boundary on (see [Slice]).
//  2. Rank the tool results (completed or failed calls) newest first, by message and then
//     by part; the newest are kept whole, the next cut to the tier-2 limit and the rest to
//     the tier-3 limit ([WithTiers], [WithTierLimits]). Results of exempt tools keep their
//     tier but are never cut ([WithNoTruncateTools]). A cut keeps head and tail
//     ([truncate.HeadTail]) for shell-like tools (name contains bash, pty or exec, any
//     case), failed calls, non-zero exit codes (state.metadata.exit) and texts containing
//     error, failed, exception or traceback (any case); otherwise the head
//     ([truncate.HeadOnly]). Results OpenCode compacted are not ranked and not cut; a
//     pruned one shows as [ClearedResult].
//  3. Format every message as a block (see [Result.Context]); a call's parameters are its
//     input JSON without insignificant whitespace, cut by its result's tier
//     ([WithParamLimits]) and followed by "..." when cut.
//  4. Budget ([WithBudget]): while the context is longer than the budget and more than
//     one block is left, drop the oldest block. If the last block alone is too long, keep
//     as much of its start (four fifths) and end (one fifth) as fits around a
//     "...[truncated N chars]..." marker.
//
// Run never fails: parts it cannot show add no line. Its cost is linear in the size of
// msgs: blocks are formatted newest first, once each, and the blocks the budget drops are
// counted, not formatted.
func (p *Pipeline) Run(msgs []opencode.Message) Result {
	sliced, b, hasBoundary := Slice(msgs, p.cfg.tailAware)
	st := Stats{OriginalMessages: len(msgs), CompactionIndex: -1}
	if hasBoundary {
		st.CompactionDetected, st.CompactionIndex = true, b.Summary
	}
	f := newFormatter(&p.cfg, &st)
	for i := len(sliced) - 1; i >= 0; i-- {
		f.add(sliced[i])
	}
	ctx := f.finish()
	return Result{Context: ctx, Preamble: p.Preamble(st), Stats: st}
}
