package fork

import "github.com/asyncagents/asyncagents/opencode"

// Boundary is a compaction boundary, as indexes into the messages it was found in. Marker
// is a user message with a part of type compaction; Summary is its summary, the first later
// assistant message with "summary": true that comes before any later marker. TailStart is
// the index of the message the compaction part names as tail_start_id (the nearest one
// before the marker, should ids repeat), or -1 when it names none or no message before the
// marker has that id.
type Boundary struct {
	Marker, Summary, TailStart int
}

// LatestBoundary returns the latest compaction boundary of msgs (oldest first), and false
// when there is none. A marker without a summary — a compaction that failed or is still
// running — is not a boundary and does not hide an earlier complete one.
func LatestBoundary(msgs []opencode.Message) (Boundary, bool) {
	var (
		found   Boundary
		ok      bool
		pending = -1 // the latest marker still waiting for its summary
	)
	for i := range msgs {
		m := &msgs[i]
		switch {
		case isMarker(m):
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
		for i := found.Marker - 1; i >= 0; i-- {
			if msgs[i].Info.ID == tail {
				found.TailStart = i
				break
			}
		}
	}
	return found, true
}

// isMarker reports a compaction marker (SPEC F-1): a user message with a compaction part.
func isMarker(m *opencode.Message) bool {
	return m.Info.Role == opencode.RoleUser && compactionPart(m) != nil
}

func compactionPart(m *opencode.Message) *opencode.Part {
	for i := range m.Parts {
		if m.Parts[i].Type == opencode.PartCompaction {
			return &m.Parts[i]
		}
	}
	return nil
}

// Slice returns the messages the context is built from, as pointers into msgs (oldest
// first), the boundary used and whether there was one (see [LatestBoundary]). Without a
// boundary every message is returned. With one, the summary and every message after it;
// the marker and everything before it are dropped. With tailAware and a TailStart, the
// summary, then msgs[TailStart:Marker], then the messages after the summary — the order in
// which OpenCode shows them to the model.
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
