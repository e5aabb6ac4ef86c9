package fork_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/asyncagents/asyncagents/fork"
	"github.com/asyncagents/asyncagents/opencode"
)

// FuzzPipeline (SPEC R): arbitrary message JSON never panics; the output is valid UTF-8,
// never over budget, and its statistics agree with it.
func FuzzPipeline(f *testing.F) {
	f.Add([]byte(`[{"info":{"role":"user"},"parts":[{"type":"text","text":"hi"}]}]`), 1000, false)
	f.Add([]byte(`[{"info":{"role":"user"},"parts":[{"type":"compaction","tail_start_id":"m0"}]},{"info":{"role":"assistant","summary":true},"parts":[{"type":"text","text":"S"}]}]`), 5000, true)
	f.Add([]byte(`[{"info":{"role":"assistant"},"parts":[{"type":"tool","tool":"bash","state":{"status":"error","input":{"a":"\u00e9"},"error":"Traceback","metadata":{"exit":2},"time":{"compacted":1}}}]}]`), 1200, false)
	if data, err := os.ReadFile(filepath.Join("..", "..", "shared", "fixtures", "opencode-1.18.33", "small.json")); err == nil {
		f.Add(data, 1000, true)
	}
	f.Fuzz(func(t *testing.T, data []byte, budget int, tail bool) {
		var msgs []opencode.Message
		if json.Unmarshal(data, &msgs) != nil {
			return
		}
		budget = fork.MinBudget + abs(budget)%(300_000)
		p, err := fork.New(fork.WithBudget(budget), fork.WithTailAware(tail))
		if err != nil {
			t.Fatal(err)
		}
		r := p.Run(msgs)
		checkInvariants(t, r, msgs)
		if r.Stats.TotalChars > budget {
			t.Fatalf("total %d over budget %d", r.Stats.TotalChars, budget)
		}
	})
}

func abs(n int) int {
	if n < 0 {
		if n == -n { // the smallest int
			return 0
		}
		return -n
	}
	return n
}
