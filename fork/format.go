package fork

import (
	"strings"
	"unicode/utf8"

	"github.com/asyncagents/asyncagents/internal/transcript"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/truncate"
)

// formatter writes the blocks of the sliced messages newest first, each once, and applies
// the budget as it goes (SPEC F-13): a block is kept while the context stays within the
// budget (the newest block always), and once one does not fit, it and every older block are
// dropped; older ones are counted but not formatted. A tool result's rank is the number of
// ranked results newer than it, so it is known when its message is formatted (SPEC F-6).
// Stats count the tool results of the kept blocks.
type formatter struct {
	cfg   *config
	stats *Stats
	style transcript.Style // the parts' lines; its Tool is f.call
	rank  int              // ranked results in the messages formatted so far
	next  int              // rank of the next ranked result of the current message

	buf     []byte // the kept blocks, newest first
	starts  []int  // byte offset of each kept block in buf
	chars   []int  // characters of each kept block
	labels  []int  // characters of each kept block's "\nLabel:" prefix
	total   int    // characters of the context so far: the tags and the kept blocks
	full    bool   // a block did not fit: every older block is dropped
	dropped int    // blocks dropped for the budget
}

func newFormatter(cfg *config, stats *Stats) *formatter {
	f := &formatter{cfg: cfg, stats: stats, total: len(openTag) + len(closeTag)} // ASCII: bytes = characters
	f.style.Tool = f.call
	return f
}

// ranked reports whether p is a ranked tool result (SPEC F-6): completed or error, and not
// compacted.
func ranked(p *opencode.Part) bool {
	return p.Type == opencode.PartTool && transcript.HasResult(p) && !isCompacted(p)
}

// isCompacted reports a compacted result (SPEC F-5): state.time.compacted set, or a text
// that already holds OpenCode's cleared marker.
func isCompacted(p *opencode.Part) bool {
	return p.State.Time.Compacted != 0 || strings.Contains(transcript.Result(p), transcript.Cleared)
}

// add writes the block of m, the message before (older than) those added so far (SPEC F-12);
// a message with no lines has none. When the block does not fit the budget and is not the
// first, it is taken back and the formatter is full.
func (f *formatter) add(m *opencode.Message) {
	if !f.hasLines(m) {
		return
	}
	if f.full {
		f.dropped++
		return
	}
	saved, start := *f.stats, len(f.buf)
	label := "\nAgent:"
	if m.Info.Role == opencode.RoleUser {
		label = "\nUser:"
	}
	f.buf = append(f.buf, label...)
	n := 0
	for i := range m.Parts {
		if ranked(&m.Parts[i]) {
			n++
		}
	}
	f.next, f.rank = f.rank+n-1, f.rank+n // parts in order: the first is the oldest
	for i := range m.Parts {
		f.buf = f.style.Append(f.buf, &m.Parts[i])
	}
	chars := utf8.RuneCount(f.buf[start:])
	if len(f.chars) > 0 && f.total+chars > f.cfg.budget {
		f.buf, *f.stats = f.buf[:start], saved
		f.full = true
		f.dropped++
		return
	}
	f.starts = append(f.starts, start)
	f.chars = append(f.chars, chars)
	f.labels = append(f.labels, len(label))
	f.total += chars
}

// hasLines reports whether any part of m adds a line (SPEC F-12).
func (f *formatter) hasLines(m *opencode.Message) bool {
	for i := range m.Parts {
		if f.style.Shows(&m.Parts[i]) {
			return true
		}
	}
	return false
}

// call decides what a tool call shows (SPEC F-5 … F-11): the limit of its parameters, set
// by the tier of its result, and the result, cut for its tier; a compacted result is shown
// as it is.
func (f *formatter) call(p *opencode.Part) (int, string, bool) {
	switch {
	case !transcript.HasResult(p): // pending or running
		return f.cfg.paramLimits[0], "", false
	case isCompacted(p):
		return f.cfg.paramLimits[2], transcript.Result(p), true
	}
	tier, limit := f.tier(f.next)
	f.next--
	return f.cfg.paramLimits[tier-1], f.cut(p, transcript.Result(p), tier, limit), true
}

// tier returns the tier (1–3) of a result of the given rank (0 = newest) and its limit
// (-1: kept whole), counting it in the statistics.
func (f *formatter) tier(rank int) (int, int) {
	switch {
	case rank < f.cfg.whole:
		f.stats.Tier1++
		return 1, -1
	case rank < f.cfg.whole+f.cfg.tierTwo:
		f.stats.Tier2++
		return 2, f.cfg.tierTwoLim
	}
	f.stats.Tier3++
	return 3, f.cfg.tierThrLim
}

// cut applies the tier limit to a result (SPEC F-7 … F-9).
func (f *formatter) cut(p *opencode.Part, text string, tier, limit int) string {
	if tier == 1 || f.exempt(p.Tool) {
		return text
	}
	strategy := truncate.HeadOnly
	if len(text) > limit && headTail(p, text) { // only a text that may be cut needs the scan
		strategy = truncate.HeadTail
	}
	out, cut := truncate.Cut(text, limit, strategy)
	if cut {
		f.stats.TruncatedResults++
		if strategy == truncate.HeadTail {
			f.stats.HeadTailApplied++
		}
	}
	return out
}

func (f *formatter) exempt(tool string) bool {
	for _, n := range f.cfg.noTruncate {
		if strings.Contains(tool, n) {
			return true
		}
	}
	return false
}

// headTail reports whether a result is cut head+tail (SPEC F-8): a shell-like tool, an error
// state, a non-zero exit code, or error words in the text (ASCII case-insensitive).
func headTail(p *opencode.Part, text string) bool {
	if containsFold(p.Tool, "bash") || containsFold(p.Tool, "pty") || containsFold(p.Tool, "exec") {
		return true
	}
	if p.State.Status == opencode.ToolError {
		return true
	}
	if code, ok := p.State.ExitCode(); ok && code != 0 {
		return true
	}
	for _, w := range errorWords {
		if containsFold(text, w) {
			return true
		}
	}
	return false
}

var errorWords = []string{"error", "failed", "exception", "traceback"}

// containsFold reports whether s contains the lower-case ASCII word w in any ASCII case.
func containsFold(s, w string) bool {
	lo, up := w[0], w[0]-'a'+'A'
	for i := 0; i+len(w) <= len(s); {
		j := indexEither(s[i:len(s)-len(w)+1], lo, up)
		if j < 0 {
			return false
		}
		i += j
		if equalFoldASCII(s[i:i+len(w)], w) {
			return true
		}
		i++
	}
	return false
}

// indexEither returns the first index of a or b in s, or -1.
func indexEither(s string, a, b byte) int {
	i := strings.IndexByte(s, a)
	if i < 0 {
		i = len(s)
	}
	if j := strings.IndexByte(s[:i], b); j >= 0 {
		return j
	}
	if i == len(s) {
		return -1
	}
	return i
}

func equalFoldASCII(s, lower string) bool {
	for i := 0; i < len(lower); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// finish returns the context: the tags around the kept blocks, oldest first, each copied
// once; when the one block kept is too long on its own, its middle is cut (SPEC F-13).
func (f *formatter) finish() string {
	f.stats.FinalMessages, f.stats.RemovedMessages, f.stats.TotalChars = len(f.chars), f.dropped, f.total
	if f.total > f.cfg.budget { // one block, too long on its own
		f.stats.BudgetClipped = true
		wrap := len(openTag) + len(closeTag)
		label := string(f.buf[:f.labels[0]])
		content := string(f.buf[f.labels[0]:])
		c := f.chars[0] - f.labels[0]
		k := largestKept(c, f.cfg.budget-wrap-f.labels[0])
		h := k * 8 / 10
		f.stats.TotalChars = wrap + f.labels[0] + k + 2 + truncate.MarkerLen(c-k)
		return openTag + label + truncate.Keep(content, h, k-h) + closeTag
	}
	var b strings.Builder
	b.Grow(len(openTag) + len(f.buf) + len(closeTag))
	b.WriteString(openTag)
	end := len(f.buf)
	for k := len(f.starts) - 1; k >= 0; k-- {
		b.Write(f.buf[f.starts[k]:end])
		end = f.starts[k]
	}
	b.WriteString(closeTag)
	return b.String()
}

// largestKept returns the largest k < c such that k kept characters, the two newlines and
// the marker for c−k removed characters fit in avail (0 when none does). k + MarkerLen(c−k)
// never decreases as k grows, so a binary search finds it.
func largestKept(c, avail int) int {
	fits := func(k int) bool { return k+2+truncate.MarkerLen(c-k) <= avail }
	lo, hi := 0, c-1 // fits(lo) is assumed; the answer is in [lo, hi]
	if !fits(0) {
		return 0
	}
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if fits(mid) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}
