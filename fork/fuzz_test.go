package fork_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/asyncagents/asyncagents/fork"
	"github.com/asyncagents/asyncagents/opencode"
)

// FuzzPipeline (R): arbitrary message JSON never panics; the output is valid UTF-8,
// never over budget, and its statistics agree with it.
func FuzzPipeline(f *testing.F) {
	f.Add([]byte(`[{"info":{"role":"user"},"parts":[{"type":"text","text":"hi"}]}]`), 1000, false)
	f.Add([]byte(`[{"info":{"role":"user"},"parts":[{"type":"compaction","tail_start_id":"m0"}]},{"info":{"role":"assistant","summary":true},"parts":[{"type":"text","text":"S"}]}]`), 5000, true)
	f.Add([]byte(`[{"info":{"role":"assistant"},"parts":[{"type":"tool","tool":"bash","state":{"status":"error","input":{"a":"\u00e9"},"error":"Traceback","metadata":{"exit":2},"time":{"compacted":1}}}]}]`), 1200, false)
	// A real session as a seed when the shared fixtures are there (see readFixture); the
	// target runs without it.
	if data, err := os.ReadFile(filepath.Join(fixtureDir, "small.json")); err == nil {
		f.Add(data, 1000, true)
	} else {
		f.Logf("seed corpus without the shared fixture: %v", err)
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
		checkInvariants(t, p.Run(msgs), msgs, budget)
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
