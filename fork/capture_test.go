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
		time.Sleep(500 * time.Millisecond) // prune runs in the background after each loop
	}
	msgs, err := c.Messages(ctx, s.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var compacted int
	for _, m := range msgs {
		for _, p := range m.Parts {
			if p.State != nil && p.State.Time.Compacted != 0 {
				compacted++
			}
		}
	}
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

type golden struct {
	Preamble string     `json:"preamble"`
	Context  string     `json:"context"`
	Stats    fork.Stats `json:"stats"`
}

// TestGolden runs the pipeline on captured sessions (ours in testdata, and the shared
// fixtures when present) with default and small budgets, tail-aware off and on, and
// compares with testdata/golden/*.json (go test -run TestGolden -update rewrites them).
func TestGolden(t *testing.T) {
	inputs := map[string]string{
		"captured":       filepath.Join("testdata", "captured.json"),
		"captured-tools": filepath.Join("testdata", "captured-tools.json"),
	}
	for _, name := range []string{"small", "large", "compacted", "errors"} {
		inputs["fixture-"+name] = filepath.Join("..", "..", "shared", "fixtures", "opencode-1.18.33", name+".json")
	}
	for name, path := range inputs {
		data, err := os.ReadFile(path)
		if err != nil {
			if strings.HasPrefix(name, "fixture-") {
				continue // shared/ is not beside every checkout
			}
			t.Fatal(err)
		}
		msgs := decodeMsgs(t, data)
		for _, v := range []struct {
			suffix string
			opts   []fork.Option
		}{
			{"default", nil},
			{"tail-aware", []fork.Option{fork.WithTailAware(true)}},
			{"budget-20000", []fork.Option{fork.WithBudget(20_000)}},
		} {
			t.Run(name+"/"+v.suffix, func(t *testing.T) {
				r := run(t, msgs, v.opts...)
				got := golden{r.Preamble, r.Context, r.Stats}
				file := filepath.Join("testdata", "golden", name+"."+v.suffix+".json")
				if *update {
					b, _ := json.MarshalIndent(got, "", " ")
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
			})
		}
	}
}
