package transcript_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/internal/transcript"
	"github.com/asyncagents/asyncagents/opencode"
)

func TestMain(m *testing.M) { testmain.Run(m) }

// parts has one part of every kind a Style treats differently.
func parts(t *testing.T) []opencode.Part {
	t.Helper()
	var ps []opencode.Part
	err := json.Unmarshal([]byte(`[{"type":"text","text":"hello"},{"type":"text","text":"hidden","ignored":true},{"type":"text"},
		{"type":"reasoning","text":"hmm"},{"type":"reasoning"},{"type":"file","mime":"image/png"},{"type":"file","filename":"a.go"},
		{"type":"subtask","agent":"explore","description":"look"},{"type":"compaction"},{"type":"step-start"},{"type":"patch"},
		{"type":"tool","tool":"task"},
		{"type":"tool","tool":"bash","state":{"status":"running","input":{"command":"sleep 1"}}},
		{"type":"tool","tool":"read","state":{"status":"pending","input":null}},
		{"type":"tool","tool":"bash","state":{"status":"completed","input":{ "command" : "ls" },"output":"a.go"}},
		{"type":"tool","tool":"grep","state":{"status":"completed","output":"x","time":{"compacted":1}}},
		{"type":"tool","tool":"edit","state":{"status":"error","input":"","error":"denied"}}]`), &ps)
	if err != nil {
		t.Fatal(err)
	}
	ps[15].State.Input = json.RawMessage("not json") // shown as received
	return ps
}

// The zero Style shows what its doc says, whole, and no results; Shows agrees with Append
// for every part and style.
func TestZeroStyle(t *testing.T) {
	var zero transcript.Style
	var b []byte
	for _, p := range parts(t) {
		b = zero.Append(b, &p)
	}
	want := "\nhello\n[File: image/png]\n[File: a.go]\n[Subtask: explore] look\n[Tool: task]" +
		"\n[Tool: bash] {\"command\":\"sleep 1\"}\n[Tool: read]\n[Tool: bash] {\"command\":\"ls\"}\n[Tool: grep] not json\n[Tool: edit]"
	if diff := cmp.Diff(want, string(b)); diff != "" {
		t.Errorf("zero style (-want +got):\n%s", diff)
	}
}

func TestShowsAgreesWithAppend(t *testing.T) {
	styles := []transcript.Style{{}, {ThinkingLimit: 5, Compaction: true, Status: true, TextLimit: 2}}
	for i, s := range styles {
		for _, p := range parts(t) {
			if got := len(s.Append(nil, &p)) > 0; got != s.Shows(&p) {
				t.Errorf("style %d, part %s %q: Append writes %t, Shows says %t", i, p.Type, p.Text, got, s.Shows(&p))
			}
		}
	}
}

// Tool is called once per tool part with a state, in order, and decides the input limit
// and the result; the other fields cut and show what they say.
func TestStyleFields(t *testing.T) {
	var calls []string
	s := transcript.Style{TextLimit: 3, ThinkingLimit: 2, Compaction: true, Status: true,
		Tool: func(p *opencode.Part) (int, string, bool) {
			calls = append(calls, p.Tool)
			if !transcript.HasResult(p) {
				return 4, "", false
			}
			return 100, "<" + transcript.Result(p) + ">", true
		}}
	var b []byte
	for _, p := range parts(t) {
		b = s.Append(b, &p)
	}
	want := "\nhe\n...[truncated 3 chars]...\n\n[Thinking] h\n...[truncated 2 chars]...\n\n[File: image/png]\n[File: a.go]" +
		"\n[Subtask: explore] look\n[Compaction]\n[Tool: task]\n[Tool: bash] {\"co... (running)\n[Tool: read] (pending)" +
		"\n[Tool: bash] {\"command\":\"ls\"}\n[Tool result]\n<a.go>\n[Tool: grep] not json\n[Tool result]\n<" + transcript.Cleared + ">" +
		"\n[Tool: edit]\n[Tool error]\n<denied>"
	if diff := cmp.Diff(want, string(b)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"bash", "read", "bash", "grep", "edit"}, calls); diff != "" {
		t.Errorf("Tool calls (-want +got):\n%s", diff)
	}
	if transcript.Cleared != "[Old tool result content cleared]" { // OpenCode's text, word for word
		t.Errorf("Cleared = %q", transcript.Cleared)
	}
}
