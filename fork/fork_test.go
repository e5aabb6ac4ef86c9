package fork_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/asyncagents/asyncagents/fork"
	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/opencode"
)

func TestMain(m *testing.M) { testmain.Run(m) }

// fixtureDir holds sessions captured from OpenCode 1.18.33 that the whole project shares. It
// is outside this module (shared/ beside the module's directory), so a copy of the module
// alone does not have it.
var fixtureDir = filepath.Join("..", "..", "shared", "fixtures", "opencode-1.18.33")

// readFixture returns the contents of the shared fixture name, and skips tb, naming the
// path, when the fixture is not there.
func readFixture(tb testing.TB, name string) []byte {
	tb.Helper()
	path := filepath.Join(fixtureDir, name)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		abs, _ := filepath.Abs(path)
		tb.Skipf("shared fixture %s is missing: it lies outside the module (shared/ beside the module's directory), "+
			"so only a full project checkout has it", abs)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

// Builders for OpenCode-shaped messages.

var seq int

func msg(role string, parts ...opencode.Part) opencode.Message {
	seq++
	return opencode.Message{Info: opencode.MessageInfo{ID: fmt.Sprintf("msg_%04d", seq), Role: role}, Parts: parts}
}

func user(parts ...opencode.Part) opencode.Message  { return msg(opencode.RoleUser, parts...) }
func agent(parts ...opencode.Part) opencode.Message { return msg(opencode.RoleAssistant, parts...) }

func summary(text string) opencode.Message {
	m := agent(txt(text))
	m.Info.Summary = json.RawMessage("true")
	return m
}

func marker(tailStart string) opencode.Message {
	return user(opencode.Part{Type: opencode.PartCompaction, TailStartID: tailStart})
}

func txt(s string) opencode.Part { return opencode.Part{Type: opencode.PartText, Text: s} }

func tool(name, input, output string) opencode.Part {
	return opencode.Part{Type: opencode.PartTool, Tool: name, State: &opencode.ToolState{
		Status: opencode.ToolCompleted, Input: json.RawMessage(input), Output: output}}
}

func toolErr(name, input, errText string) opencode.Part {
	return opencode.Part{Type: opencode.PartTool, Tool: name, State: &opencode.ToolState{
		Status: opencode.ToolError, Input: json.RawMessage(input), Error: errText}}
}

func withExit(p opencode.Part, code string) opencode.Part {
	p.State.Metadata = json.RawMessage(`{"exit":` + code + `}`)
	return p
}

func compacted(p opencode.Part) opencode.Part {
	p.State.Time.Compacted = 1795216192760
	return p
}

// run runs a pipeline with the default budget and opts (which must not set the budget: use
// runBudget) on msgs, and checks the invariants.
func run(t *testing.T, msgs []opencode.Message, opts ...fork.Option) fork.Result {
	t.Helper()
	return runBudget(t, fork.DefaultBudget, msgs, opts...)
}

// runBudget is run with the given budget.
func runBudget(t *testing.T, budget int, msgs []opencode.Message, opts ...fork.Option) fork.Result {
	t.Helper()
	p, err := fork.New(slices.Concat(opts, []fork.Option{fork.WithBudget(budget)})...)
	if err != nil {
		t.Fatal(err)
	}
	r := p.Run(msgs)
	checkInvariants(t, r, msgs, budget)
	return r
}

// checkInvariants holds for every run: valid UTF-8, within budget, statistics agree with the
// context (SPEC F-13, F-15, R).
func checkInvariants(t testing.TB, r fork.Result, msgs []opencode.Message, budget int) {
	t.Helper()
	if r.Stats.TotalChars > budget {
		t.Fatalf("total_chars = %d, over the budget %d", r.Stats.TotalChars, budget)
	}
	if r.Stats.CompactionDetected != (r.Stats.CompactionIndex >= 0) {
		t.Fatalf("compaction_detected = %v with compaction_index %d", r.Stats.CompactionDetected, r.Stats.CompactionIndex)
	}
	if (r.Injection() == "") != (r.Stats.FinalMessages == 0) {
		t.Fatalf("injection of %d characters with %d blocks", utf8.RuneCountInString(r.Injection()), r.Stats.FinalMessages)
	}
	if !utf8.ValidString(r.Context) || !utf8.ValidString(r.Preamble) {
		t.Fatal("invalid UTF-8 in the output")
	}
	if n := utf8.RuneCountInString(r.Context); n != r.Stats.TotalChars {
		t.Fatalf("total_chars = %d, context has %d", r.Stats.TotalChars, n)
	}
	if !strings.HasPrefix(r.Context, "<inherited_context>") || !strings.HasSuffix(r.Context, "\n</inherited_context>") {
		t.Fatalf("context not wrapped: %.80q", r.Context)
	}
	if r.Stats.OriginalMessages != len(msgs) {
		t.Fatalf("original_messages = %d, want %d", r.Stats.OriginalMessages, len(msgs))
	}
	if r.Stats.HeadTailApplied > r.Stats.TruncatedResults || r.Stats.TruncatedResults > r.Stats.Tier2+r.Stats.Tier3 {
		t.Fatalf("inconsistent cut counts: %+v", r.Stats)
	}
	if r.Stats.BudgetClipped && r.Stats.FinalMessages != 1 {
		t.Fatalf("clipped with %d blocks", r.Stats.FinalMessages)
	}
}

// F-3: with no compaction boundary, all messages pass to the next stage unchanged.
func TestNoBoundaryKeepsAll(t *testing.T) {
	msgs := []opencode.Message{user(txt("hello")), agent(txt("hi there"))}
	r := run(t, msgs)
	want := "<inherited_context>\nUser:\nhello\nAgent:\nhi there\n</inherited_context>"
	if diff := cmp.Diff(want, r.Context); diff != "" {
		t.Errorf("context (-want +got):\n%s", diff)
	}
	if r.Stats.CompactionDetected || r.Stats.CompactionIndex != -1 || r.Stats.FinalMessages != 2 {
		t.Errorf("stats = %+v", r.Stats)
	}
}

// F-1, F-2: a boundary is a compaction marker that has a summary (the first later summary
// message before any later marker). With one or more boundaries the latest is used: its
// summary and every message after it are kept. A later marker without a summary does not
// hide an earlier complete boundary.
func TestLatestCompactionBoundaryStartsContext(t *testing.T) {
	old := user(txt("OLD"))
	m1 := marker("")
	s1 := summary("SUMMARY ONE")
	mid := user(txt("MIDDLE"))
	m2 := marker("")
	s2 := summary("SUMMARY TWO")
	after := user(txt("AFTER"))
	failedMarker := marker("") // a later compaction without a summary
	last := agent(txt("LAST"))

	cases := []struct {
		name      string
		msgs      []opencode.Message
		wantIndex int
		want      string
	}{
		{"one boundary", []opencode.Message{old, m1, s1, after}, 2,
			wrap("Agent:\nSUMMARY ONE", "User:\nAFTER")},
		{"latest of two", []opencode.Message{old, m1, s1, mid, m2, s2, after}, 5,
			wrap("Agent:\nSUMMARY TWO", "User:\nAFTER")},
		{"later marker without summary", []opencode.Message{old, m1, s1, mid, failedMarker, last}, 2,
			wrap("Agent:\nSUMMARY ONE", "User:\nMIDDLE", "Agent:\nLAST")},
		{"marker without summary only", []opencode.Message{old, failedMarker, last}, -1,
			wrap("User:\nOLD", "Agent:\nLAST")},
		{"summary without marker", []opencode.Message{old, s1, after}, -1,
			wrap("User:\nOLD", "Agent:\nSUMMARY ONE", "User:\nAFTER")},
		{"summary after a second marker belongs to it", []opencode.Message{old, m1, mid, m2, s2, after}, 4,
			wrap("Agent:\nSUMMARY TWO", "User:\nAFTER")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, tc.msgs)
			if r.Stats.CompactionIndex != tc.wantIndex {
				t.Errorf("compaction_index = %d, want %d", r.Stats.CompactionIndex, tc.wantIndex)
			}
			if diff := cmp.Diff(tc.want, r.Context); diff != "" {
				t.Errorf("context (-want +got):\n%s", diff)
			}
		})
	}
}

// wrap returns the context made of blocks ("User:\n…" or "Agent:\n…").
func wrap(blocks ...string) string {
	return "<inherited_context>\n" + strings.Join(blocks, "\n") + "\n</inherited_context>"
}

// F-4: with tail-aware slicing on (it is off by default) the context is what OpenCode shows
// the model: the summary, the messages from the marker's tail_start_id up to the marker, then
// the messages after the summary. An unknown tail_start_id keeps the plain slice.
func TestTailAwareKeepsTailAfterSummary(t *testing.T) {
	a := user(txt("A-old"))
	b := user(txt("B-tail-start"))
	c := agent(txt("C-tail"))
	m := marker(b.Info.ID)
	s := summary("SUM")
	d := user(txt("D-after"))
	msgs := []opencode.Message{a, b, c, m, s, d}

	off := run(t, msgs)
	if strings.Contains(off.Context, "B-tail-start") || !strings.Contains(off.Context, "SUM") {
		t.Errorf("tail-aware off:\n%s", off.Context)
	}
	on := run(t, msgs, fork.WithTailAware(true))
	want := "<inherited_context>\nAgent:\nSUM\nUser:\nB-tail-start\nAgent:\nC-tail\nUser:\nD-after\n</inherited_context>"
	if diff := cmp.Diff(want, on.Context); diff != "" {
		t.Errorf("tail-aware (-want +got):\n%s", diff)
	}
	if on.Stats.CompactionIndex != 4 {
		t.Errorf("compaction_index = %d", on.Stats.CompactionIndex)
	}
	// An unknown tail_start_id keeps the plain slice.
	m2 := marker("msg_unknown")
	r := run(t, []opencode.Message{a, m2, s, d}, fork.WithTailAware(true))
	if strings.Contains(r.Context, "A-old") || r.Stats.FinalMessages != 2 {
		t.Errorf("unknown tail: %s", r.Context)
	}
}

// results builds n messages with one bash-like tool result each, oldest first; result i has
// text of size chars.
func results(n int, toolName string, size int) []opencode.Message {
	var out []opencode.Message
	for i := range n {
		body := fmt.Sprintf("R%02d:", i) + strings.Repeat("x", max(size-4, 0))
		out = append(out, agent(tool(toolName, `{"i":`+fmt.Sprint(i)+`}`, body)))
	}
	return out
}

// F-6: tool results are ranked newest first; ranks 0–4 are kept whole, ranks 5–14 are cut to
// 3,000 characters, the rest to 500.
func TestTiersRankResultsNewestFirst(t *testing.T) {
	for _, tc := range []struct {
		n, t1, t2, t3 int
	}{
		{0, 0, 0, 0}, {5, 5, 0, 0}, {6, 5, 1, 0}, {15, 5, 10, 0}, {16, 5, 10, 1}, {40, 5, 10, 25},
	} {
		t.Run(fmt.Sprint(tc.n), func(t *testing.T) {
			r := run(t, results(tc.n, "read", 4000))
			if r.Stats.Tier1 != tc.t1 || r.Stats.Tier2 != tc.t2 || r.Stats.Tier3 != tc.t3 {
				t.Errorf("tiers = %d/%d/%d, want %d/%d/%d", r.Stats.Tier1, r.Stats.Tier2, r.Stats.Tier3, tc.t1, tc.t2, tc.t3)
			}
			if r.Stats.TruncatedResults != tc.t2+tc.t3 || r.Stats.HeadTailApplied != 0 {
				t.Errorf("truncated = %d head+tail = %d", r.Stats.TruncatedResults, r.Stats.HeadTailApplied)
			}
		})
	}
	// Ranks run newest first: the newest 5 are whole, the oldest is cut to 500 (head-only).
	r := run(t, results(16, "read", 4000))
	if !strings.Contains(r.Context, "R15:"+strings.Repeat("x", 3996)+"\n") {
		t.Error("newest result not whole")
	}
	if !strings.Contains(r.Context, "R00:"+strings.Repeat("x", 496)+"\n...[truncated 3500 chars]...\n") {
		t.Error("oldest result not cut to 500 head-only")
	}
	if !strings.Contains(r.Context, "R01:"+strings.Repeat("x", 2996)+"\n...[truncated 1000 chars]...") {
		t.Error("tier-2 result not cut to 3000")
	}
}

// F-6: within one message, results are ranked in part order: the first part is the oldest.
func TestTiersRankPartsOfOneMessageInOrder(t *testing.T) {
	// Six results in one message: the first part is the oldest (rank 5, tier 2).
	var parts []opencode.Part
	for i := range 6 {
		parts = append(parts, tool("read", "", fmt.Sprintf("P%d:", i)+strings.Repeat("y", 3500)))
	}
	r := run(t, []opencode.Message{agent(parts...)})
	if !strings.Contains(r.Context, "P0:"+strings.Repeat("y", 2997)+"\n...[truncated") || strings.Contains(r.Context, "P1:"+strings.Repeat("y", 2997)+"\n...") {
		t.Errorf("part order ranking wrong: %+v", r.Stats)
	}
}

// F-7: results of tools whose name contains an entry of the no-truncation list (default
// ask_user_questions) keep their tier but are never cut; an empty list exempts nothing.
func TestExemptToolsAreNeverCut(t *testing.T) {
	msgs := results(20, "mcp_ask_user_questions_v2", 4000)
	r := run(t, msgs)
	if r.Stats.TruncatedResults != 0 || r.Stats.Tier3 != 5 || strings.Contains(r.Context, "truncated") {
		t.Errorf("exempt tool cut: %+v", r.Stats)
	}
	r = run(t, msgs, fork.WithNoTruncateTools())
	if r.Stats.TruncatedResults != 15 {
		t.Errorf("empty exemption list: truncated = %d", r.Stats.TruncatedResults)
	}
}

// F-8: a result is cut head+tail when its tool name contains bash, pty or exec, its text
// says error, failed, exception or traceback (any case), its state is error, or its exit code
// is a number other than 0; otherwise head-only.
func TestHeadTailForCommandsAndFailures(t *testing.T) {
	long := strings.Repeat("z", 1000)
	cases := []struct {
		name     string
		part     opencode.Part
		headTail bool
	}{
		{"plain read", tool("read", "", long), false},
		{"bash", tool("bash", "", long), true},
		{"pty uppercase", tool("PTY_run", "", long), true},
		{"exec", tool("remote_exec", "", long), true},
		{"error word lower", tool("read", "", long+" error"), true},
		{"Traceback", tool("read", "", "Traceback (most recent call last)"+long), true},
		{"FAILED", tool("read", "", long+"FAILED"), true},
		{"Exception mixed", tool("read", "", long+"eXcEpTiOn"), true},
		{"error status", toolErr("read", "", long), true},
		{"non-zero exit", withExit(tool("read", "", long), "2"), true},
		{"zero exit", withExit(tool("read", "", long), "0"), false},
		{"null exit", withExit(tool("read", "", long), "null"), false},
		{"string exit", withExit(tool("read", "", long), `"1"`), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Six newer short results push this one to tier 2 (limit 3000) — use tier 3 (500).
			msgs := []opencode.Message{agent(tc.part)}
			msgs = append(msgs, results(15, "read", 10)...)
			r := run(t, msgs)
			if r.Stats.TruncatedResults != 1 || (r.Stats.HeadTailApplied == 1) != tc.headTail {
				t.Errorf("stats = %+v, want head+tail %v", r.Stats, tc.headTail)
			}
		})
	}
}

// F-9: a result is cut by characters, not bytes (multi-byte text at the cut); a text of
// exactly the limit stays whole and one character more is cut.
func TestCutInContextCountsCharacters(t *testing.T) {
	// Multi-byte text at the cut: 600 Korean syllables in tier 3 (limit 500), head-only.
	msgs := []opencode.Message{agent(tool("read", "", strings.Repeat("한", 600)))}
	msgs = append(msgs, results(15, "read", 1)...)
	r := run(t, msgs)
	if !strings.Contains(r.Context, "\n[Tool result]\n"+strings.Repeat("한", 500)+"\n...[truncated 100 chars]...\n") {
		t.Errorf("multibyte cut wrong")
	}
	// n = L stays whole; n = L+1 is cut.
	for _, n := range []int{500, 501} {
		msgs := []opencode.Message{agent(tool("read", "", strings.Repeat("ü", n)))}
		msgs = append(msgs, results(15, "read", 1)...)
		r := run(t, msgs)
		if got := r.Stats.TruncatedResults; got != n-500 {
			t.Errorf("n=%d truncated = %d", n, got)
		}
	}
}

// F-10: compacted results are not ranked and not cut: a result with state.time.compacted is
// shown as [Old tool result content cleared], a text that holds that marker is shown as it
// is, and the call's parameters are limited to 100 characters.
func TestCompactedResultsNotRankedOrCut(t *testing.T) {
	big := strings.Repeat("q", 5000)
	msgs := []opencode.Message{
		agent(compacted(tool("bash", `{"command":"`+strings.Repeat("c", 300)+`"}`, "PRUNED"+big))),
		agent(tool("read", "", "before [Old tool result content cleared] after"+big)),
	}
	msgs = append(msgs, results(20, "read", 10)...)
	r := run(t, msgs)
	if strings.Contains(r.Context, "PRUNED") || !strings.Contains(r.Context, "[Tool result]\n[Old tool result content cleared]\n") {
		t.Error("compacted result not replaced")
	}
	if !strings.Contains(r.Context, "before [Old tool result content cleared] after"+big) {
		t.Error("text with the cleared marker was cut")
	}
	if r.Stats.Tier1+r.Stats.Tier2+r.Stats.Tier3 != 20 {
		t.Errorf("compacted results were ranked: %+v", r.Stats)
	}
	if !strings.Contains(r.Context, `[Tool: bash] {"command":"`+strings.Repeat("c", 88)+"...\n") {
		t.Error("compacted call parameters not limited to 100")
	}
}

// F-11: a tool call shows its input as compact JSON in the order received, limited by its
// result's tier to 500, 200 or 100 characters (500 for a pending or running call) followed by
// "..."; an empty or absent input shows nothing.
func TestParametersCompactedAndLimitedByTier(t *testing.T) {
	input := `{ "b" : 1,  "a" : [1, 2] }`
	r := run(t, []opencode.Message{agent(tool("grep", input, "ok"))})
	if !strings.Contains(r.Context, `[Tool: grep] {"b":1,"a":[1,2]}`) {
		t.Errorf("params not compacted in order:\n%s", r.Context)
	}
	long := `{"command":"` + strings.Repeat("é", 600) + `"}`
	for _, tc := range []struct {
		name  string
		msgs  []opencode.Message
		limit int
	}{
		{"tier1", []opencode.Message{agent(tool("bash", long, "x"))}, 500},
		{"tier2", append([]opencode.Message{agent(tool("bash", long, "x"))}, results(5, "read", 1)...), 200},
		{"tier3", append([]opencode.Message{agent(tool("bash", long, "x"))}, results(15, "read", 1)...), 100},
		{"pending", []opencode.Message{agent(opencode.Part{Type: opencode.PartTool, Tool: "bash",
			State: &opencode.ToolState{Status: opencode.ToolRunning, Input: json.RawMessage(long)}})}, 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, tc.msgs)
			want := "[Tool: bash] " + string([]rune(`{"command":"` + strings.Repeat("é", 600))[:tc.limit]) + "...\n"
			if !strings.Contains(r.Context+"\n", want) {
				t.Errorf("want params cut to %d", tc.limit)
			}
		})
	}
	for _, in := range []string{"", "null", "{}", " { } "} {
		r := run(t, []opencode.Message{agent(tool("todo", in, "done"))})
		if !strings.Contains(r.Context, "\n[Tool: todo]\n[Tool result]\ndone") {
			t.Errorf("input %q shown: %s", in, r.Context)
		}
	}
}

// F-12: the context is one block per message, labelled User or Agent, with a line per text,
// file, subtask and tool part; other parts add no line, and a message with no lines has no
// block.
func TestFormatOneBlockPerMessage(t *testing.T) {
	msgs := []opencode.Message{
		user(txt("look at this"), opencode.Part{Type: opencode.PartFile, Filename: "note.txt", Mime: "text/plain"},
			opencode.Part{Type: opencode.PartFile, Mime: "image/png"},
			opencode.Part{Type: opencode.PartText, Text: "ignored", Ignored: true},
			opencode.Part{Type: opencode.PartText, Text: "injected", Synthetic: true},
			opencode.Part{Type: opencode.PartSubtask, Agent: "general", Description: "run a sub thing"}),
		agent(opencode.Part{Type: opencode.PartStepStart}, opencode.Part{Type: opencode.PartReasoning, Text: "hmm"},
			toolErr("bash", `{"command":"cat /x"}`, "rejected"), opencode.Part{Type: "hologram", Text: "?"},
			opencode.Part{Type: opencode.PartStepFinish}),
		agent(opencode.Part{Type: opencode.PartStepStart}, opencode.Part{Type: opencode.PartReasoning, Text: "only thinking"}),
		agent(txt("")),
	}
	r := run(t, msgs)
	want := "<inherited_context>\nUser:\nlook at this\n[File: note.txt]\n[File: image/png]\ninjected\n[Subtask: general] run a sub thing" +
		"\nAgent:\n[Tool: bash] {\"command\":\"cat /x\"}\n[Tool error]\nrejected\n</inherited_context>"
	if diff := cmp.Diff(want, r.Context); diff != "" {
		t.Errorf("context (-want +got):\n%s", diff)
	}
	if r.Stats.FinalMessages != 2 {
		t.Errorf("final_messages = %d, want 2 (messages with no lines have no block)", r.Stats.FinalMessages)
	}
}

// F-13: while the context exceeds the budget (default 200,000) and more than one block
// remains, the oldest block is dropped; a context of 120,000 characters or less loses nothing,
// and one of exactly the budget keeps every block.
func TestBudgetDropsOldestBlocks(t *testing.T) {
	// 30 blocks of about 10,000 characters: 300,000 > 200,000, the oldest go.
	var msgs []opencode.Message
	for i := range 30 {
		msgs = append(msgs, user(txt(fmt.Sprintf("M%02d ", i)+strings.Repeat("w", 10_000))))
	}
	r := run(t, msgs)
	if r.Stats.TotalChars > 200_000 || r.Stats.RemovedMessages == 0 || r.Stats.RemovedMessages+r.Stats.FinalMessages != 30 {
		t.Errorf("stats = %+v", r.Stats)
	}
	if strings.Contains(r.Context, "M00 ") || !strings.Contains(r.Context, "M29 ") {
		t.Error("dropped the wrong end")
	}
	// At most 120,000 characters loses nothing.
	r = run(t, msgs[:11])
	if r.Stats.RemovedMessages != 0 || r.Stats.TotalChars > 120_000 {
		t.Errorf("small context lost messages: %+v", r.Stats)
	}
	// Exactly at the budget: nothing dropped; one character over: one block dropped.
	base := run(t, msgs[:3])
	exact := runBudget(t, base.Stats.TotalChars, msgs[:3])
	over := runBudget(t, base.Stats.TotalChars-1, msgs[:3])
	if exact.Stats.RemovedMessages != 0 || over.Stats.RemovedMessages != 1 {
		t.Errorf("edges: exact removed %d, over removed %d", exact.Stats.RemovedMessages, over.Stats.RemovedMessages)
	}
}

// F-13: when the one block left still exceeds the budget, its content is cut in the middle,
// keeping its head and tail, so that the context fills the budget and never exceeds it.
func TestBudgetClipsOneOversizedMessage(t *testing.T) {
	text := "START" + strings.Repeat("é", 300_000) + "END"
	for _, budget := range []int{1000, 1001, 5000, 199_999, 200_000} {
		r := runBudget(t, budget, []opencode.Message{user(txt("older")), user(txt(text))})
		if !r.Stats.BudgetClipped || r.Stats.FinalMessages != 1 || r.Stats.RemovedMessages != 1 {
			t.Fatalf("budget %d: stats %+v", budget, r.Stats)
		}
		// The largest k: the context is exactly the budget or one short (the marker's digits).
		if r.Stats.TotalChars > budget || r.Stats.TotalChars < budget-1 {
			t.Errorf("budget %d: total %d", budget, r.Stats.TotalChars)
		}
		if !strings.Contains(r.Context, "\nUser:\nSTART") || !strings.HasSuffix(r.Context, "END\n</inherited_context>") {
			t.Errorf("budget %d: head or tail lost", budget)
		}
	}
}

// F-17: a forked task is sent the preamble, a blank line and the context; an empty parent
// (no blocks) sends nothing.
func TestEmptyParentInjectsNothing(t *testing.T) {
	for _, msgs := range [][]opencode.Message{nil, {agent(opencode.Part{Type: opencode.PartStepStart})}} {
		r := run(t, msgs)
		if r.Stats.FinalMessages != 0 || r.Injection() != "" {
			t.Errorf("empty parent: %+v %q", r.Stats, r.Injection())
		}
	}
	r := run(t, []opencode.Message{user(txt("hi"))})
	if inj := r.Injection(); !strings.HasPrefix(inj, r.Preamble+"\n\n<inherited_context>") {
		t.Errorf("injection = %q", inj)
	}
}

// F-16: the preamble says whether a compaction summary was used, how many tool results are
// whole or cut to each tier's limit, how many oldest messages were removed to fit the budget
// (or that all were kept), and advises re-reading files when complete content is needed.
func TestPreambleDescribesWhatWasCut(t *testing.T) {
	var msgs []opencode.Message
	msgs = append(msgs, user(txt("old")), marker(""), summary("S"))
	for i := range 40 {
		msgs = append(msgs, user(txt(fmt.Sprint(i)+strings.Repeat("p", 9000))))
	}
	msgs = append(msgs, results(20, "read", 4000)...)

	// Within the budget: the compaction summary starts the history.
	r := run(t, msgs[:13])
	for _, want := range []string{"compacted: it starts with the latest compaction summary", "All 11 messages were kept", "200000", "read the file"} {
		if !strings.Contains(r.Preamble, want) {
			t.Errorf("preamble lacks %q:\n%s", want, r.Preamble)
		}
	}

	// Over the budget: the summary is among the blocks removed, and the preamble says the
	// history starts part-way, how many messages were kept, and counts the results in them.
	r = run(t, msgs)
	if r.Stats.RemovedMessages == 0 {
		t.Fatalf("nothing removed: %+v", r.Stats)
	}
	for _, want := range []string{"older messages were removed to fit the budget", "5 newest kept whole", "10 limited to 3000 characters",
		"5 limited to 500 characters", fmt.Sprintf("The %d newest messages were kept", r.Stats.FinalMessages), "200000", "read the file"} {
		if !strings.Contains(r.Preamble, want) {
			t.Errorf("preamble lacks %q:\n%s", want, r.Preamble)
		}
	}
	if strings.Contains(r.Preamble, "compacted") {
		t.Errorf("preamble claims the context starts with the summary, which was removed:\n%s", r.Preamble)
	}

	r = run(t, []opencode.Message{user(txt("x"))})
	if !strings.Contains(r.Preamble, "No compaction summary") || !strings.Contains(r.Preamble, "All 1 messages were kept") {
		t.Errorf("preamble:\n%s", r.Preamble)
	}
	r = runBudget(t, 1000, []opencode.Message{user(txt("x")), user(txt(strings.Repeat("y", 2000)))})
	if !strings.Contains(r.Preamble, "Only the newest message was kept, cut in the middle") {
		t.Errorf("preamble:\n%s", r.Preamble)
	}
	r = runBudget(t, 1000, []opencode.Message{user(txt(strings.Repeat("y", 2000)))})
	if !strings.Contains(r.Preamble, "The only message was cut in the middle") {
		t.Errorf("preamble:\n%s", r.Preamble)
	}
}

// Tool results in blocks the budget removed are not counted: the statistics and the
// preamble describe the context the child sees.
//
// F-15: the statistics describe the output; F-13: blocks the budget drops are not in it.
func TestStatsCountKeptBlocksOnly(t *testing.T) {
	msgs := results(40, "read", 4000) // 5 whole, 10 cut to 3000, 25 cut to 500
	all := run(t, msgs)
	if all.Stats.Tier3 != 25 || all.Stats.RemovedMessages != 0 {
		t.Fatalf("stats = %+v", all.Stats)
	}
	// A budget that keeps the newest 20 blocks.
	p, _ := fork.New()
	kept := p.Run(msgs[20:])
	r := runBudget(t, kept.Stats.TotalChars, msgs)
	if r.Stats.FinalMessages != 20 || r.Stats.RemovedMessages != 20 || r.Stats.Tier1 != 5 || r.Stats.Tier2 != 10 || r.Stats.Tier3 != 5 ||
		r.Stats.TruncatedResults != 15 {
		t.Errorf("stats = %+v, want 20 kept, 20 removed, tiers 5/10/5, 15 cut", r.Stats)
	}
	if r.Context != kept.Context {
		t.Error("context differs from the run on the kept messages alone")
	}
}

// F-15: the statistics marshal to JSON under the keys original_messages … budget_clipped.
func TestStatsJSONKeys(t *testing.T) {
	b, _ := json.Marshal(fork.Stats{})
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	want := []string{"original_messages", "final_messages", "compaction_detected", "compaction_index", "tier1", "tier2", "tier3",
		"truncated_results", "head_tail_applied", "removed_messages", "total_chars", "budget_clipped"}
	if len(m) != len(want) {
		t.Errorf("keys = %v", m)
	}
	for _, k := range want {
		if _, ok := m[k]; !ok {
			t.Errorf("missing key %s", k)
		}
	}
}

func TestNewValidates(t *testing.T) {
	for _, opt := range []fork.Option{
		fork.WithBudget(999), fork.WithTiers(-1, 10), fork.WithTierLimits(10, -1),
		fork.WithParamLimits(1, -1, 1), fork.WithNoTruncateTools("ok", ""),
	} {
		if _, err := fork.New(opt); !errors.Is(err, fork.ErrInvalidOption) {
			t.Errorf("New = %v, want ErrInvalidOption", err)
		}
	}
	if _, err := fork.New(fork.WithBudget(fork.MinBudget)); err != nil {
		t.Errorf("minimum budget rejected: %v", err)
	}
}
