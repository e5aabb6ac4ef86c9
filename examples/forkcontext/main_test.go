package main

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/asyncagents/asyncagents/internal/testmain"
)

func TestMain(m *testing.M) { testmain.Run(m) }

const small = `[{"info":{"id":"msg_1","role":"user"},"parts":[{"type":"text","text":"hello"}]},
{"info":{"id":"msg_2","role":"assistant"},"parts":[{"type":"tool","tool":"bash","state":{"status":"completed","input":{"command":"ls"},"output":"a\nb\n"}}]}]`

func exec(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, strings.NewReader(stdin), &out, &errb)
	return out.String(), errb.String(), code
}

// -json prints one object {"preamble", "context", "stats"}, the stats under fork.Stats' JSON
// keys.
func TestJSONOutputUsesStatsKeys(t *testing.T) {
	out, _, code := exec(t, small, "-json", "-")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	var v struct {
		Preamble string         `json:"preamble"`
		Context  string         `json:"context"`
		Stats    map[string]any `json:"stats"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(v.Context, "[Tool: bash] {\"command\":\"ls\"}\n[Tool result]\na\nb\n") || v.Preamble == "" {
		t.Errorf("output = %s", out)
	}
	// The keys the package comment lists, in its order.
	want := []string{"original_messages", "final_messages", "compaction_detected", "compaction_index",
		"tier1", "tier2", "tier3", "truncated_results", "head_tail_applied", "removed_messages",
		"total_chars", "budget_clipped"}
	got := slices.Sorted(maps.Keys(v.Stats))
	if !slices.Equal(got, slices.Sorted(slices.Values(want))) || v.Stats["final_messages"] != float64(2) {
		t.Errorf("stats = %v, want the keys %v", v.Stats, want)
	}
}

func TestTextOutputAndExportDocument(t *testing.T) {
	doc := `{"info":{"id":"ses_1"},"messages":` + small + `}`
	f := filepath.Join(t.TempDir(), "export.json")
	if err := os.WriteFile(f, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, code := exec(t, "", "-budget", "1000", f)
	if code != 0 || !strings.Contains(out, "\n\n<inherited_context>\nUser:\nhello") {
		t.Errorf("exit %d, output %q", code, out)
	}
}

func TestBadInputExits2WithOneLine(t *testing.T) {
	for _, tc := range []struct {
		stdin string
		args  []string
	}{
		{"", []string{"-"}},
		{"not json", []string{"-"}},
		{`[{"info":5}]`, []string{"-"}},
		{`{"info":{}}`, []string{"-"}},
		{small, []string{"-budget", "10", "-"}},
		{"", []string{filepath.Join(t.TempDir(), "missing.json")}},
	} {
		out, errOut, code := exec(t, tc.stdin, tc.args...)
		if code != 2 || out != "" || strings.Count(strings.TrimSpace(errOut), "\n") != 0 || !strings.HasPrefix(errOut, "forkcontext: ") {
			t.Errorf("%v %q: exit %d, stdout %q, stderr %q", tc.args, tc.stdin, code, out, errOut)
		}
	}
	if _, _, code := exec(t, ""); code != 2 {
		t.Errorf("no FILE: exit %d", code)
	}
}

// The budget is 200,000 characters by default and at least 1,000.
func TestBudgetDefaultAndBound(t *testing.T) {
	_, usage, code := exec(t, "", "-h")
	if code != 2 || !strings.Contains(usage, "(default 200000)") {
		t.Errorf("-h: exit %d, usage %q", code, usage)
	}
	if _, errOut, code := exec(t, small, "-budget", "999", "-"); code != 2 {
		t.Errorf("-budget 999: exit %d, stderr %q", code, errOut)
	}
	if _, _, code := exec(t, small, "-budget", "1000", "-"); code != 0 {
		t.Errorf("-budget 1000: exit %d", code)
	}
}

// What follows the latest compaction summary is kept; with -tail-aware, also the messages
// the compaction left in place (from its tail_start_id on), before the summary.
func TestCompactionAndTailAware(t *testing.T) {
	const compacted = `[{"info":{"id":"m0","role":"user"},"parts":[{"type":"text","text":"BEFORE"}]},
{"info":{"id":"m1","role":"user"},"parts":[{"type":"text","text":"TAIL"}]},
{"info":{"id":"m2","role":"user"},"parts":[{"type":"compaction","tail_start_id":"m1"}]},
{"info":{"id":"m3","role":"assistant","summary":true},"parts":[{"type":"text","text":"SUMMARY"}]},
{"info":{"id":"m4","role":"user"},"parts":[{"type":"text","text":"AFTER"}]}]`
	plain, _, code := exec(t, compacted, "-")
	if code != 0 || !strings.Contains(plain, "SUMMARY") || !strings.Contains(plain, "AFTER") ||
		strings.Contains(plain, "TAIL") || strings.Contains(plain, "BEFORE") {
		t.Errorf("plain: exit %d, output %q", code, plain)
	}
	tail, _, code := exec(t, compacted, "-tail-aware", "-")
	if code != 0 || strings.Contains(tail, "BEFORE") ||
		!(strings.Index(tail, "SUMMARY") < strings.Index(tail, "TAIL") && strings.Index(tail, "TAIL") < strings.Index(tail, "AFTER")) {
		t.Errorf("-tail-aware: exit %d, output %q", code, tail)
	}
}
