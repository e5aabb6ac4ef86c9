package fork_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/asyncagents/asyncagents/fork"
	"github.com/asyncagents/asyncagents/opencode"
)

// session generates an OpenCode-shaped session of n messages, as GET /session/{id}/message
// returns it: user prompts, then per turn assistant steps with step-start, a bash or read
// tool part (outputs from a line to 40 KB, some failing, some multi-byte) and step-finish,
// and a final text reply with reasoning. The same n gives the same session.
func session(n int) []byte {
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
	b, _ := json.Marshal(msgs)
	return b
}

func decodeMsgs(tb testing.TB, data []byte) []opencode.Message {
	var msgs []opencode.Message
	if err := json.Unmarshal(data, &msgs); err != nil {
		tb.Fatal(err)
	}
	return msgs
}

func benchInputs(b *testing.B) map[string][]byte {
	in := map[string][]byte{"generated-1000": session(1000), "generated-20000": session(20000)}
	for _, name := range []string{"large.json", "compacted.json"} {
		if data, err := os.ReadFile(filepath.Join("..", "..", "shared", "fixtures", "opencode-1.18.33", name)); err == nil {
			in["fixture-"+strings.TrimSuffix(name, ".json")] = data
		}
	}
	return in
}

// BenchmarkPipeline measures P-1 (ns per input byte at 1,000 vs 20,000 messages) and P-2
// (MB/s after JSON decoding; the bytes are the JSON input's).
func BenchmarkPipeline(b *testing.B) {
	p, _ := fork.New()
	for name, data := range benchInputs(b) {
		msgs := decodeMsgs(b, data)
		b.Run(name, func(b *testing.B) {
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
	for name, data := range benchInputs(b) {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				var msgs []opencode.Message
				_ = json.Unmarshal(data, &msgs)
			}
		})
	}
}

func TestGeneratedSessionsRunClean(t *testing.T) {
	p, _ := fork.New()
	for _, n := range []int{1000, 20000} {
		msgs := decodeMsgs(t, session(n))
		if len(msgs) != n {
			t.Fatalf("generated %d messages, want %d", len(msgs), n)
		}
		r := p.Run(msgs)
		checkInvariants(t, r, msgs)
		if r.Stats.RemovedMessages == 0 || r.Stats.TotalChars > fork.DefaultBudget {
			t.Errorf("n=%d: %+v", n, r.Stats)
		}
	}
}
