package fork

import "github.com/asyncagents/asyncagents/opencode"

// Boundary is a compaction boundary (SPEC F-1): the index of a compaction marker (a user
// message with a compaction part) and of its summary (the first later assistant message with
// summary: true before any later marker). TailStart is the index of the marker's
// tail_start_id message, or -1 when it has none or it is not before the marker.
type Boundary struct {
	Marker, Summary, TailStart int
}

// LatestBoundary returns the latest compaction boundary of msgs (oldest first), and false
// when there is none (SPEC F-1, F-2). A later marker without a summary — a compaction that
// failed or is still running — does not hide an earlier complete boundary.
func LatestBoundary(msgs []opencode.Message) (Boundary, bool) {
	var (
		found   Boundary
		ok      bool
		pending = -1 // the latest marker still waiting for its summary
	)
	for i := range msgs {
		m := &msgs[i]
		switch {
		case m.Info.Role == opencode.RoleUser && compactionPart(m) != nil:
			pending = i
		case pending >= 0 && m.Info.IsSummary():
			found, ok = Boundary{Marker: pending, Summary: i, TailStart: -1}, true
			pending = -1
		}
	}
	if !ok {
		return Boundary{}, false
	}
	if tail := compactionPart(&msgs[found.Marker]).TailStartID; tail != "" {
		for i := 0; i < found.Marker; i++ {
			if msgs[i].Info.ID == tail {
				found.TailStart = i
				break
			}
		}
	}
	return found, true
}

func compactionPart(m *opencode.Message) *opencode.Part {
	for i := range m.Parts {
		if m.Parts[i].Type == opencode.PartCompaction {
			return &m.Parts[i]
		}
	}
	return nil
}

// Slice returns the messages the context is built from (SPEC F-2 … F-4), as pointers into
// msgs, and the boundary used. Without a boundary every message is returned. With one, the
// summary and every message after it; tail-aware, the summary, then the tail (tail_start_id
// up to the marker), then the messages after the summary.
func Slice(msgs []opencode.Message, tailAware bool) ([]*opencode.Message, Boundary, bool) {
	b, ok := LatestBoundary(msgs)
	start := 0
	if ok {
		start = b.Summary
	}
	out := make([]*opencode.Message, 0, len(msgs)-start)
	if ok && tailAware && b.TailStart >= 0 {
		out = append(out, &msgs[b.Summary])
		for i := b.TailStart; i < b.Marker; i++ {
			out = append(out, &msgs[i])
		}
		start = b.Summary + 1
	}
	for i := start; i < len(msgs); i++ {
		out = append(out, &msgs[i])
	}
	return out, b, ok
}
