package fork_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/asyncagents/asyncagents/fork"
	"github.com/asyncagents/asyncagents/opencode"
)

// FuzzPipeline (R, P-4): arbitrary message JSON never panics; the output is valid UTF-8,
// never over budget, and its statistics agree with it; and read page by page, newest first,
// in pages of sizes drawn from split, it gives the same context, preamble and statistics as
// the whole (see checkPaged).
func FuzzPipeline(f *testing.F) {
	f.Add([]byte(`[{"info":{"role":"user"},"parts":[{"type":"text","text":"hi"}]}]`), 1000, false, uint64(0))
	f.Add([]byte(`[{"info":{"role":"user"},"parts":[{"type":"compaction","tail_start_id":"m0"}]},{"info":{"role":"assistant","summary":true},"parts":[{"type":"text","text":"S"}]}]`), 5000, true, uint64(1))
	f.Add([]byte(`[{"info":{"role":"assistant"},"parts":[{"type":"tool","tool":"bash","state":{"status":"error","input":{"a":"\u00e9"},"error":"Traceback","metadata":{"exit":2},"time":{"compacted":1}}}]}]`), 1200, false, uint64(2))
	f.Add([]byte(`[{"info":{"id":"m0","role":"user"},"parts":[{"type":"text","text":"tail"}]},{"info":{"id":"m1","role":"assistant","summary":true},"parts":[{"type":"text","text":"S0"}]},`+
		`{"info":{"id":"m2","role":"user"},"parts":[{"type":"compaction","tail_start_id":"m0"}]},{"info":{"id":"m3","role":"user"},"parts":[{"type":"text","text":"between"}]},`+
		`{"info":{"id":"m4","role":"assistant","summary":true},"parts":[{"type":"text","text":"S1"}]},{"info":{"id":"m5","role":"user"},"parts":[{"type":"compaction"}]},`+
		`{"info":{"id":"m6","role":"assistant"},"parts":[{"type":"tool","tool":"read","state":{"status":"completed","output":"`+strings.Repeat("o", 1500)+`"}}]}]`), 1000, true, uint64(3))
	// A real session as a seed when the shared fixtures are there (see readFixture); the
	// target runs without it.
	if data, err := os.ReadFile(filepath.Join(fixtureDir, "small.json")); err == nil {
		f.Add(data, 1000, true, uint64(4))
	} else {
		f.Logf("seed corpus without the shared fixture: %v", err)
	}
	f.Fuzz(func(t *testing.T, data []byte, budget int, tail bool, split uint64) {
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
		checkPaged(t, p, msgs, randomSizes(split, max(1, len(msgs)/2)))
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
