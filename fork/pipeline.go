package fork

import (
	"github.com/asyncagents/asyncagents/opencode"
)

// ClearedResult is what OpenCode shows the model in place of a pruned tool output
// (state.time.compacted set); the pipeline shows the same (SPEC F-10).
const ClearedResult = "[Old tool result content cleared]"

const (
	openTag  = "<inherited_context>"
	closeTag = "\n</inherited_context>"
)

// Stats describes what the pipeline did (SPEC F-15). The JSON names are the spec's keys.
// Tier counts, TruncatedResults and HeadTailApplied describe the tool results of the
// sliced messages, before the budget step dropped any block.
type Stats struct {
	OriginalMessages   int  `json:"original_messages"`
	FinalMessages      int  `json:"final_messages"`      // blocks in the context
	CompactionDetected bool `json:"compaction_detected"` // a boundary was used
	CompactionIndex    int  `json:"compaction_index"`    // input index of the kept summary, -1 if none
	Tier1              int  `json:"tier1"`
	Tier2              int  `json:"tier2"`
	Tier3              int  `json:"tier3"`
	TruncatedResults   int  `json:"truncated_results"` // results actually cut
	HeadTailApplied    int  `json:"head_tail_applied"` // of those, cut head+tail
	RemovedMessages    int  `json:"removed_messages"`  // blocks dropped by the budget
	TotalChars         int  `json:"total_chars"`       // characters of Context
	BudgetClipped      bool `json:"budget_clipped"`    // the last block was cut to fit
}

// Result is the pipeline's output.
type Result struct {
	// Context is "<inherited_context>", one block per message, "\n</inherited_context>"
	// (SPEC F-12), at most the budget in characters.
	Context string
	// Preamble tells the child what was cut (SPEC F-16).
	Preamble string
	Stats    Stats
}

// Injection returns the text sent to a forked child (SPEC F-17): the preamble, a blank line
// and the context; empty when the parent had nothing to show (no blocks).
func (r *Result) Injection() string {
	if r.Stats.FinalMessages == 0 {
		return ""
	}
	return r.Preamble + "\n\n" + r.Context
}

// Pipeline turns a parent session's messages into the context a forked child inherits:
// compaction slicing, tiered tool-result truncation, formatting, budget enforcement and the
// preamble (SPEC §2). It is immutable and safe for concurrent use.
type Pipeline struct{ cfg config }

// New returns a pipeline with the defaults of SPEC §2 changed by opts. It returns an error
// matching ErrInvalidOption for a bad value (negative limits, a budget below MinBudget, an
// empty no-truncation entry).
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

// Run builds the context of msgs (oldest first, as GET /session/{id}/message returns
// them). It never fails: parts it cannot show add no line. Its cost is linear in the size
// of msgs (SPEC F-14).
func (p *Pipeline) Run(msgs []opencode.Message) Result {
	sliced, b, hasBoundary := Slice(msgs, p.cfg.tailAware)
	st := Stats{OriginalMessages: len(msgs), CompactionIndex: -1}
	if hasBoundary {
		st.CompactionDetected, st.CompactionIndex = true, b.Summary
	}

	f := formatter{cfg: &p.cfg, stats: &st}
	f.ranked = countRanked(sliced)
	f.buf.Grow(estimateSize(sliced))
	for _, m := range sliced {
		f.message(m)
	}
	ctx := f.enforceBudget()
	return Result{Context: ctx, Preamble: p.Preamble(st), Stats: st}
}
