package fork_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/asyncagents/asyncagents/fork"
	"github.com/asyncagents/asyncagents/opencode"
)

// session generates an OpenCode-shaped session of n messages, as GET /session/{id}/message
// returns it: user prompts, then per turn assistant steps with step-start, a bash or read
// tool part (outputs from a line to 40 KB, some failing, some multi-byte) and step-finish,
// and a final text reply with reasoning. The same n gives the same session.
func session(n int) []byte {
	b, _ := json.Marshal(sessionMessages(n))
	return b
}

// sessionMessages is session's messages before encoding.
func sessionMessages(n int) []map[string]any {
	r := rand.New(rand.NewPCG(uint64(n), 7))
	lines := []string{"ok", "compiling package ./internal/x", "error: undefined: foo", "한글 출력 ✓", "PASS", "--- FAIL: TestX (0.01s)"}
	var msgs []map[string]any
	id := 0
	next := func(p string) string { id++; return fmt.Sprintf("%s_%08d", p, id) }
	for len(msgs) < n {
		uid := next("msg")
		msgs = append(msgs, map[string]any{
			"info":  map[string]any{"id": uid, "sessionID": "ses_bench", "role": "user", "time": map[string]any{"created": id}, "agent": "build"},
			"parts": []any{map[string]any{"id": next("prt"), "type": "text", "text": "Please run the checks and fix what fails in step " + fmt.Sprint(id)}},
		})
		steps := 1 + r.IntN(5)
		for s := 0; s < steps && len(msgs) < n; s++ {
			var out strings.Builder
			size := []int{40, 400, 2000, 6000, 40000}[r.IntN(5)]
			for out.Len() < size {
				out.WriteString(lines[r.IntN(len(lines))])
				out.WriteByte('\n')
			}
			exit := 0
			if r.IntN(4) == 0 {
				exit = 1
			}
			tool := []string{"bash", "read", "grep"}[r.IntN(3)]
			msgs = append(msgs, map[string]any{
				"info": map[string]any{"id": next("msg"), "sessionID": "ses_bench", "role": "assistant", "parentID": uid,
					"time": map[string]any{"created": id, "completed": id + 1}, "finish": "tool-calls", "agent": "build", "mode": "build",
					"tokens": map[string]any{"input": 1000, "output": 20}},
				"parts": []any{
					map[string]any{"id": next("prt"), "type": "step-start"},
					map[string]any{"id": next("prt"), "type": "tool", "callID": next("call"), "tool": tool, "state": map[string]any{
						"status": "completed", "input": map[string]any{"command": "go test ./... -run " + fmt.Sprint(id), "description": "run the tests"},
						"output": out.String(), "title": "go test", "metadata": map[string]any{"exit": exit, "truncated": false},
						"time": map[string]any{"start": id, "end": id + 1}}},
					map[string]any{"id": next("prt"), "type": "step-finish", "reason": "tool-calls"},
				},
			})
		}
		if len(msgs) < n {
			msgs = append(msgs, map[string]any{
				"info": map[string]any{"id": next("msg"), "sessionID": "ses_bench", "role": "assistant", "parentID": uid,
					"time": map[string]any{"created": id, "completed": id + 1}, "finish": "stop"},
				"parts": []any{
					map[string]any{"id": next("prt"), "type": "step-start"},
					map[string]any{"id": next("prt"), "type": "reasoning", "text": "Looking at the failures."},
					map[string]any{"id": next("prt"), "type": "text", "text": "Fixed the failing test; all checks pass now."},
					map[string]any{"id": next("prt"), "type": "step-finish", "reason": "stop"},
				},
			})
		}
	}
	return msgs
}

// generated1000 is session(1000) decoded, made once: the tests share it and must not change
// it (generating and decoding it takes seconds under the race detector).
var generated1000 = sync.OnceValue(func() []opencode.Message {
	var msgs []opencode.Message
	if err := json.Unmarshal(session(1000), &msgs); err != nil {
		panic(err)
	}
	return msgs
})

func decodeMsgs(tb testing.TB, data []byte) []opencode.Message {
	var msgs []opencode.Message
	if err := json.Unmarshal(data, &msgs); err != nil {
		tb.Fatal(err)
	}
	return msgs
}

// benchInput is an input of the benchmarks: a generated session, or a shared fixture
// (skipped, with the reason, when it is missing).
type benchInput struct {
	name    string
	n       int    // messages to generate
	fixture string // or the file in fixtureDir
}

var benchInputs = []benchInput{
	{name: "generated-1000", n: 1000},
	{name: "generated-20000", n: 20000},
	{name: "fixture-large", fixture: "large.json"},
	{name: "fixture-compacted", fixture: "compacted.json"},
}

func (in benchInput) data(b *testing.B) []byte {
	if in.fixture != "" {
		return readFixture(b, in.fixture)
	}
	return session(in.n)
}

// BenchmarkPipeline measures P-1 (ns per input byte at 1,000 vs 20,000 messages) and P-2
// (MB/s after JSON decoding; the bytes are the JSON input's).
func BenchmarkPipeline(b *testing.B) {
	p, _ := fork.New()
	for _, in := range benchInputs {
		b.Run(in.name, func(b *testing.B) {
			data := in.data(b)
			msgs := decodeMsgs(b, data)
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				p.Run(msgs)
			}
		})
	}
}

// BenchmarkDecode measures JSON decoding of the same inputs, reported separately (P-2).
func BenchmarkDecode(b *testing.B) {
	for _, in := range benchInputs {
		b.Run(in.name, func(b *testing.B) {
			data := in.data(b)
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				var msgs []opencode.Message
				_ = json.Unmarshal(data, &msgs)
			}
		})
	}
}

// TestGeneratedSessionsRunClean runs the pipeline on a generated session of 1,000 messages
// decoded from JSON, and on 20,000 messages made of that session twenty times over: the
// same scale as the benchmarks' largest input, without decoding 135 MB of JSON, which takes
// half a minute under the race detector. Every generated message shows a block, so blocks
// dropped for the budget and blocks kept add up to the messages.
func TestGeneratedSessionsRunClean(t *testing.T) {
	base := generated1000()
	if len(base) != 1000 {
		t.Fatalf("generated %d messages, want 1000", len(base))
	}
	large := make([]opencode.Message, 0, 20*len(base))
	for range 20 {
		large = append(large, base...)
	}
	p, err := fork.New()
	if err != nil {
		t.Fatal(err)
	}
	for _, msgs := range [][]opencode.Message{base, large} {
		r := p.Run(msgs)
		checkInvariants(t, r, msgs, fork.DefaultBudget)
		st := r.Stats
		if st.RemovedMessages == 0 || st.RemovedMessages+st.FinalMessages != len(msgs) {
			t.Errorf("%d messages: removed %d, kept %d", len(msgs), st.RemovedMessages, st.FinalMessages)
		}
		// Tiers count the results of the blocks kept: the newest FinalMessages messages.
		kept := msgs[len(msgs)-st.FinalMessages:]
		if want := toolResults(kept) - fork.DefaultWholeResults - fork.DefaultTierTwoResults; st.Tier1 != fork.DefaultWholeResults ||
			st.Tier2 != fork.DefaultTierTwoResults || st.Tier3 != want {
			t.Errorf("%d messages: tiers %d/%d/%d, want %d/%d/%d", len(msgs), st.Tier1, st.Tier2, st.Tier3,
				fork.DefaultWholeResults, fork.DefaultTierTwoResults, want)
		}
		if st.TruncatedResults == 0 || st.HeadTailApplied == 0 {
			t.Errorf("%d messages: %d results cut, %d head+tail", len(msgs), st.TruncatedResults, st.HeadTailApplied)
		}
	}
}

// toolResults counts the tool parts of msgs with a result.
func toolResults(msgs []opencode.Message) int {
	n := 0
	for _, m := range msgs {
		for _, p := range m.Parts {
			if p.State != nil && (p.State.Status == opencode.ToolCompleted || p.State.Status == opencode.ToolError) {
				n++
			}
		}
	}
	return n
}

// BenchmarkRunPages measures the paged pipeline (P-4) on decoded messages served in the page
// sizes of SessionPages: it reads the parent newest first and stops where the context can no
// longer change, so its cost follows the messages it reads (msgs-read/op), not the parent's
// length. Run on the same parents is BenchmarkPipeline; the bytes are the whole parent's JSON.
func BenchmarkRunPages(b *testing.B) {
	for _, in := range []struct {
		name     string
		n        int
		boundary int // a compaction boundary this many messages from the end; 0 for none
		budget   int
	}{
		{"generated-1000", 1000, 0, fork.DefaultBudget},
		{"generated-20000", 20000, 0, fork.DefaultBudget},
		{"generated-20000-boundary-500", 20000, 500, fork.DefaultBudget},
		{"generated-20000-boundary-500-no-budget-limit", 20000, 500, 1 << 40},
	} {
		b.Run(in.name, func(b *testing.B) {
			data := session(in.n)
			msgs := decodeMsgs(b, data)
			if in.boundary > 0 {
				msgs = withBoundary(msgs, in.boundary, 0)
			}
			p, err := fork.New(fork.WithBudget(in.budget))
			if err != nil {
				b.Fatal(err)
			}
			r := &reader{msgs: msgs}
			var res fork.Result
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				r.limits = r.limits[:0]
				if res, err = p.RunPages(context.Background(), fork.SessionPages(r, "ses_bench")); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(res.Stats.OriginalMessages), "msgs-read/op")
		})
	}
}
