package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
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

func TestJSONOutputUsesF15Keys(t *testing.T) {
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
	if len(v.Stats) != 12 || v.Stats["final_messages"] != float64(2) {
		t.Errorf("stats = %v", v.Stats)
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
