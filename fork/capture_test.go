package fork_test

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/asyncagents/asyncagents/fork"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// captureSteps drive one parent session on the real server: large, failing and multi-byte
// tool outputs; ~40 KB outputs that compaction.prune marks compacted; two compactions.
var captureSteps = []string{
	"RUN:seq 1 3000 ||| ls /nonexistent/dir ||| printf '한글 ✓ %.0s' $(seq 1 800) ||| sh -c 'echo Traceback: boom; exit 3' ||| echo start",
	"RUN:yes 'row of text to be pruned later' | head -c 40000 ||| echo mid",
	"SUMMARIZE",
	"RUN:yes 'alpha row of forty kilobytes' | head -c 40000 ||| yes 'beta row of forty kilobytes' | head -c 40000 ||| yes 'gamma row of forty kilobytes' | head -c 40000",
	"RUN:yes 'delta row of forty kilobytes' | head -c 40000 ||| yes 'epsilon row of forty kilobytes' | head -c 40000 ||| " +
		"yes 'zeta row of forty kilobytes' | head -c 40000 ||| yes 'eta row of forty kilobytes' | head -c 40000 ||| echo x",
	"RUN:echo y",
	"RUN:echo z",
	"SUMMARIZE",
	"RUN:echo after-second ||| seq 1 100",
	"What did we learn?",
}

// TestCaptureTestdata regenerates testdata/captured.json from a real server. It runs only
// with ASYNCAGENTS_CAPTURE=1 (make testdata).
func TestCaptureTestdata(t *testing.T) {
	if os.Getenv("ASYNCAGENTS_CAPTURE") != "1" {
		t.Skip("set ASYNCAGENTS_CAPTURE=1 (make testdata) to capture from the real server")
	}
	srv := opencodetest.Start(t, opencodetest.WithConfig(map[string]any{"compaction": map[string]any{"prune": true}}))
	for name, summarize := range map[string]bool{"captured": true, "captured-tools": false} {
		captureSession(t, srv, name, summarize)
	}
}

// captureSession runs captureSteps (without the compactions unless summarize) in a new
// session and writes its messages to testdata/<name>.json.
func captureSession(t *testing.T, srv *opencodetest.Server, name string, summarize bool) {
	c := srv.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, err := c.CreateSession(ctx, opencode.CreateSessionRequest{Title: name})
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range captureSteps {
		switch {
		case step == "SUMMARIZE" && !summarize:
			continue
		case step == "SUMMARIZE":
			err = c.Summarize(ctx, s.ID, opencode.Model{ProviderID: opencodetest.ProviderID, ModelID: opencodetest.ModelID})
		default:
			_, err = c.Prompt(ctx, s.ID, opencode.PromptRequest{Parts: []opencode.TextPartInput{opencode.NewText(step)}})
		}
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		awaitPrune(ctx, t, c, s.ID)
	}
	msgs, err := c.Messages(ctx, s.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	compacted := countCompacted(msgs)
	if _, ok := fork.LatestBoundary(msgs); compacted == 0 || ok != summarize {
		t.Fatalf("%s: %d pruned outputs, boundary %v", name, compacted, ok)
	}
	raw, err := json.MarshalIndent(msgs, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	// Scratch paths differ per run; the golden output should not.
	raw = []byte(strings.ReplaceAll(string(raw), filepath.Dir(srv.Directory), "/srv/opencodetest"))
	if err := os.WriteFile(filepath.Join("testdata", name+".json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d messages, %d pruned tool outputs", name, len(msgs), compacted)
}

// awaitPrune waits until the prune OpenCode runs after a prompt has marked the tool outputs
// it compacts. OpenCode starts that prune in the background when the prompt's loop ends and
// reports neither its start nor its end (no event, no status), and the next prompt changes
// which turns it protects; so this reads the session until the number of compacted outputs
// is the same on pruneSettleReads reads in a row, one every pruneSettlePoll. It fails the
// test when ctx ends first.
func awaitPrune(ctx context.Context, t *testing.T, c *opencode.HTTPClient, sessionID string) {
	t.Helper()
	const (
		pruneSettleReads = 4
		pruneSettlePoll  = 100 * time.Millisecond
	)
	tick := time.NewTicker(pruneSettlePoll)
	defer tick.Stop()
	last, same := -1, 0
	for same < pruneSettleReads {
		msgs, err := c.Messages(ctx, sessionID, 0)
		if err != nil {
			t.Fatalf("await prune: %v", err)
		}
		if n := countCompacted(msgs); n == last {
			same++
		} else {
			last, same = n, 1
		}
		select {
		case <-ctx.Done():
			t.Fatalf("await prune: %v", ctx.Err())
		case <-tick.C:
		}
	}
}

// countCompacted counts the tool parts of msgs whose output OpenCode pruned.
func countCompacted(msgs []opencode.Message) int {
	n := 0
	for _, m := range msgs {
		for _, p := range m.Parts {
			if p.State != nil && p.State.Time.Compacted != 0 {
				n++
			}
		}
	}
	return n
}

type golden struct {
	Preamble string     `json:"preamble"`
	Context  string     `json:"context"`
	Stats    fork.Stats `json:"stats"`
}

// TestGolden runs the pipeline on captured sessions (ours in testdata, and the shared
// fixtures, skipped by readFixture when absent) with default and small budgets, tail-aware
// off and on, and compares with testdata/golden/*.json (go test -run TestGolden -update
// rewrites them).
func TestGolden(t *testing.T) {
	inputs := []struct {
		name    string
		fixture string // file in fixtureDir; "" for testdata/<name>.json
	}{
		{"captured", ""},
		{"captured-tools", ""},
		{"fixture-small", "small.json"},
		{"fixture-large", "large.json"},
		{"fixture-compacted", "compacted.json"},
		{"fixture-errors", "errors.json"},
	}
	variants := []struct {
		name   string
		budget int
		opts   []fork.Option
	}{
		{"default", fork.DefaultBudget, nil},
		{"tail-aware", fork.DefaultBudget, []fork.Option{fork.WithTailAware(true)}},
		{"budget-20000", 20_000, nil},
	}
	for _, in := range inputs {
		t.Run(in.name, func(t *testing.T) {
			var data []byte
			if in.fixture != "" {
				data = readFixture(t, in.fixture)
			} else {
				var err error
				if data, err = os.ReadFile(filepath.Join("testdata", in.name+".json")); err != nil {
					t.Fatal(err)
				}
			}
			msgs := decodeMsgs(t, data)
			for _, v := range variants {
				t.Run(v.name, func(t *testing.T) {
					r := runBudget(t, v.budget, msgs, v.opts...)
					checkGolden(t, filepath.Join("testdata", "golden", in.name+"."+v.name+".json"), golden{r.Preamble, r.Context, r.Stats})
				})
			}
		})
	}
}

// checkGolden compares got with the golden file, or rewrites the file with -update.
func checkGolden(t *testing.T, file string, got golden) {
	t.Helper()
	if *update {
		b, err := json.MarshalIndent(got, "", " ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (run with -update)", err)
	}
	var want golden
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("golden mismatch (-want +got):\n%.3000s", diff)
	}
}
