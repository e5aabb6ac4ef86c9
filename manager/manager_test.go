package manager

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/opencode"
)

func TestMain(m *testing.M) { testmain.Run(m) }

func msg(id, role, finish string, completed int64, errName string, texts ...string) opencode.Message {
	m := opencode.Message{Info: opencode.MessageInfo{ID: id, Role: role, Finish: finish, Time: opencode.MessageTime{Completed: completed}}}
	if errName != "" {
		m.Info.Error = &opencode.Error{Name: errName, Data: json.RawMessage(`{"message":"` + errName + ` happened"}`)}
	}
	for _, t := range texts {
		m.Parts = append(m.Parts, opencode.Part{Type: opencode.PartText, Text: t})
	}
	return m
}

// withTool adds a tool part of status, with metadata, to m.
func withTool(m opencode.Message, status, metadata string) opencode.Message {
	st := &opencode.ToolState{Status: status}
	if metadata != "" {
		st.Metadata = json.RawMessage(metadata)
	}
	m.Parts = append(m.Parts, opencode.Part{Type: opencode.PartTool, Tool: "bash", State: st})
	return m
}

// summary makes m a compaction summary.
func summary(m opencode.Message) opencode.Message {
	m.Info.Summary = json.RawMessage("true")
	return m
}

// reply is an assistant message answering the user message parent.
func reply(id, parent, finish string, completed int64) opencode.Message {
	m := msg(id, "assistant", finish, completed, "")
	m.Info.ParentID = parent
	return m
}

// What a reconcile concludes from the latest messages.
//
// T-6: a last assistant message with info.error ends the task in error with that error's
// message; one completed with a finish completes it, its text parts joined by "\n"; the
// task's own prompt with no reply yet is still running (an early or duplicate idle is not a
// completion); a session.error for a task session that never went busy ends it in error.
// T-23: a run the server left unfinished (session idle, last assistant message without
// finish or time.completed) ends in error ("interrupted").
func TestDecideFromLatestMessages(t *testing.T) {
	prompt := msg("msg_2", "user", "", 0, "", "task")
	old := msg("msg_1", "assistant", "stop", 1, "", "old reply")
	ignored := msg("msg_3", "assistant", "stop", 5, "", "shown")
	ignored.Parts = append(ignored.Parts, opencode.Part{Type: opencode.PartText, Text: "hidden", Ignored: true})
	cases := []struct {
		name string
		msgs []opencode.Message
		run  Run
		want Verdict
	}{
		{"early idle: prompt without reply", []opencode.Message{prompt}, Run{Idle: true}, Verdict{}},
		{"no messages yet", nil, Run{Idle: true}, Verdict{}},
		{"completed", []opencode.Message{prompt, msg("msg_3", "assistant", "stop", 5, "", "a", "b")}, Run{Idle: true},
			Verdict{Outcome: Completed, Result: "a\nb"}},
		{"ignored text parts are not the result", []opencode.Message{prompt, ignored}, Run{Idle: true},
			Verdict{Outcome: Completed, Result: "shown"}},
		{"completed, read without an idle: confirm", []opencode.Message{prompt, msg("msg_3", "assistant", "stop", 5, "", "x")}, Run{},
			Verdict{Outcome: Unfinished}},
		{"completed, confirmed", []opencode.Message{prompt, msg("msg_3", "assistant", "stop", 5, "", "x")}, Run{Confirmed: true},
			Verdict{Outcome: Completed, Result: "x"}},
		// Steps OpenCode's loop goes on after (issue 34): a provider's "stop" on a step that
		// called a tool, a stream cut without a finish ("unknown"), a compaction summary.
		{"stop with a tool call: not the end", []opencode.Message{prompt, withTool(msg("msg_3", "assistant", "stop", 5, ""), "completed", "")},
			Run{Idle: true}, Verdict{Outcome: Unfinished}},
		{"stop with an interrupted tool: the end", []opencode.Message{prompt, withTool(msg("msg_3", "assistant", "stop", 5, "", "ok"), "error", `{"interrupted":true}`)},
			Run{Idle: true}, Verdict{Outcome: Completed, Result: "ok"}},
		{"unknown finish: not the end", []opencode.Message{prompt, msg("msg_3", "assistant", "unknown", 5, "", "")},
			Run{Idle: true}, Verdict{Outcome: Unfinished}},
		{"a compaction summary: not the end", []opencode.Message{prompt, summary(msg("msg_3", "assistant", "stop", 5, "", "summary"))},
			Run{Idle: true}, Verdict{Outcome: Unfinished}},
		{"model error", []opencode.Message{prompt, msg("msg_3", "assistant", "", 5, "APIError")}, Run{Idle: true},
			Verdict{Outcome: Failed, Error: "APIError happened"}},
		{"aborted", []opencode.Message{prompt, msg("msg_3", "assistant", "", 5, "MessageAbortedError")}, Run{Idle: true},
			Verdict{Outcome: Failed, Error: "MessageAbortedError happened"}},
		// Issue 33: a run cut because its OpenCode quit ends as interrupted because OpenCode
		// stopped, with how to resume it; its duration is the run's own.
		{"aborted before the server started: interrupted", []opencode.Message{prompt, msg("msg_3", "assistant", "", 5, "MessageAbortedError")},
			Run{Idle: true, ServerStarted: time.UnixMilli(10)}, Verdict{Outcome: Failed, Error: Interrupted}},
		{"aborted after the server started: its error", []opencode.Message{prompt, msg("msg_3", "assistant", "", 5, "MessageAbortedError")},
			Run{Idle: true, ServerStarted: time.UnixMilli(3)}, Verdict{Outcome: Failed, Error: "MessageAbortedError happened"}},
		{"still streaming", []opencode.Message{prompt, msg("msg_3", "assistant", "", 0, "")}, Run{}, Verdict{}},
		{"T-23 idle with an unfinished step: confirm", []opencode.Message{prompt, msg("msg_3", "assistant", "", 0, "")}, Run{Idle: true},
			Verdict{Outcome: Unfinished}},
		{"T-23 confirmed idle with an unfinished step: interrupted", []opencode.Message{prompt, msg("msg_3", "assistant", "", 0, "")},
			Run{Idle: true, Confirmed: true}, Verdict{Outcome: Failed, Error: Interrupted}},
		{"T-23 finished meanwhile", []opencode.Message{prompt, msg("msg_3", "assistant", "stop", 7, "", "late")},
			Run{Idle: true, Confirmed: true}, Verdict{Outcome: Completed, Result: "late"}},
		{"T-23 step with a finish but no completion time", []opencode.Message{prompt, msg("msg_3", "assistant", "stop", 0, "")},
			Run{Idle: true, Confirmed: true}, Verdict{Outcome: Failed, Error: Interrupted}},
		{"between tool steps", []opencode.Message{prompt, msg("msg_3", "assistant", "tool-calls", 5, "")}, Run{}, Verdict{}},
		{"idle after a tool call: confirm", []opencode.Message{prompt, msg("msg_3", "assistant", "tool-calls", 5, "")}, Run{Idle: true},
			Verdict{Outcome: Unfinished}},
		{"halted after tool call", []opencode.Message{prompt, msg("msg_3", "assistant", "tool-calls", 5, "")}, Run{Idle: true, Confirmed: true},
			Verdict{Outcome: Failed, Error: HaltedAfterToolCall}},
		{"unknown model: session.error, no reply", []opencode.Message{prompt}, Run{SessionError: "Model not found", Idle: true},
			Verdict{Outcome: Failed, Error: "Model not found"}},
		{"session.error before idle", []opencode.Message{prompt}, Run{SessionError: "Model not found"}, Verdict{}},
		{"resume: old reply before baseline is not the result", []opencode.Message{old, prompt}, Run{Baseline: "msg_1", Idle: true}, Verdict{}},
		{"resume: prompt not stored yet", []opencode.Message{old}, Run{Baseline: "msg_1", Idle: true}, Verdict{}},
		{"resume: new reply", []opencode.Message{old, prompt, msg("msg_3", "assistant", "stop", 9, "", "new")}, Run{Baseline: "msg_1", Idle: true},
			Verdict{Outcome: Completed, Result: "new"}},
		// A prompt whose id the runner chose (lost answers, prompts OpenCode dropped).
		{"prompt stored", []opencode.Message{old, prompt}, Run{Prompt: "msg_2", Idle: true, Confirmed: true}, Verdict{}},
		{"prompt answered, older than the window", []opencode.Message{reply("msg_4", "msg_2", "tool-calls", 5), reply("msg_5", "msg_2", "", 0)},
			Run{Prompt: "msg_2"}, Verdict{}},
		{"a reply from a server whose clock is behind", []opencode.Message{reply("msg_0", "msg_2", "stop", 5)}, Run{Prompt: "msg_2", Idle: true},
			Verdict{Outcome: Completed}},
		{"prompt not stored, not idle", []opencode.Message{old}, Run{Prompt: "msg_2"}, Verdict{}},
		{"prompt not stored, idle: confirm", []opencode.Message{old}, Run{Prompt: "msg_2", Idle: true}, Verdict{Outcome: Unfinished}},
		{"prompt not stored, confirmed idle: unsent", []opencode.Message{old}, Run{Prompt: "msg_2", Idle: true, Confirmed: true},
			Verdict{Outcome: Unsent}},
		{"empty session, confirmed idle: unsent", nil, Run{Prompt: "msg_2", Idle: true, Confirmed: true}, Verdict{Outcome: Unsent}},
		{"prompt not stored after a session.error", nil, Run{Prompt: "msg_2", SessionError: "Agent not found", Idle: true},
			Verdict{Outcome: Failed, Error: "Agent not found"}},
		{"something newer than the prompt", []opencode.Message{msg("msg_9", "user", "", 0, "", "other")}, Run{Prompt: "msg_2", Idle: true, Confirmed: true},
			Verdict{}},
	}
	for _, tc := range cases {
		got := Decide(tc.msgs, tc.run)
		ended := got.Ended
		got.Ended = time.Time{}
		if got != tc.want {
			t.Errorf("%s: Decide = %+v, want %+v", tc.name, got, tc.want)
		}
		// A completed run, and one failed with its reply's error or interrupted, ended when its
		// last reply was completed (its last time).
		var want time.Time
		if n := len(tc.msgs); n > 0 && (got.Outcome == Completed || got.Outcome == Failed && tc.msgs[n-1].Info.Error != nil) {
			want = time.UnixMilli(tc.msgs[n-1].Info.Time.Completed)
		}
		if !ended.Equal(want) {
			t.Errorf("%s: Decide's Ended = %v, want %v", tc.name, ended, want)
		}
	}
}

// Display ids are kept up to date as tasks come and go.
//
// T-1: displayed ids are the shortest unique prefix of at least 8 characters after ses_ among
// the caller's tasks.
func TestDisplayIDShortestUniquePrefix(t *testing.T) {
	var r Registry
	for _, id := range []string{"ses_abcdefgh2222", "ses_zzzzzzzzzzzz", "ses_abcdefgh1111", "ses_short"} {
		r.Add("ses_p", id)
	}
	r.Add("ses_q", "ses_abcdefgh1112") // another parent's task does not lengthen ses_p's ids
	want := map[string]string{"ses_abcdefgh1111": "ses_abcdefgh1", "ses_abcdefgh2222": "ses_abcdefgh2",
		"ses_zzzzzzzzzzzz": "ses_zzzzzzzz", "ses_short": "ses_short", "ses_abcdefgh1112": "ses_abcdefgh", "ses_unknown99": "ses_unknown99"}
	for id, w := range want {
		if got := r.DisplayID(id); got != w {
			t.Errorf("DisplayID(%s) = %s, want %s", id, got, w)
		}
	}
	r.Remove("ses_abcdefgh2222")
	if got := r.DisplayID("ses_abcdefgh1111"); got != "ses_abcdefgh" {
		t.Errorf("after removing its neighbour: DisplayID = %s, want ses_abcdefg", got)
	}
	if diff := cmp.Diff([]string{"ses_zzzzzzzzzzzz", "ses_abcdefgh1111", "ses_short"}, r.Tasks("ses_p")); diff != "" {
		t.Errorf("launch order (-want +got):\n%s", diff)
	}
}

// T-1: the full id, the id without ses_, or a unique prefix of at least 4 characters after
// ses_ resolves; other parents' tasks never resolve.
func TestResolveFullIDsAndPrefixes(t *testing.T) {
	var r Registry
	for _, id := range []string{"ses_abcd1111", "ses_abcd2222", "ses_wxyz0000", "ses_wxyz00001"} {
		r.Add("ses_p", id)
	}
	r.Add("ses_q", "ses_other000")
	cases := []struct {
		in    string
		limit int
		want  []string
	}{
		{"ses_abcd1111", 0, []string{"ses_abcd1111"}},
		{"abcd2222", 0, []string{"ses_abcd2222"}},
		{" ses_abcd1 ", 0, []string{"ses_abcd1111"}},
		{"wxyz0000", 0, []string{"ses_wxyz0000"}}, // an exact id beats a longer id it prefixes
		{"abcd", 0, []string{"ses_abcd1111", "ses_abcd2222"}},
		{"abcd", 1, []string{"ses_abcd2222"}}, // the largest when there are more
		{"abc", 0, nil},                       // too short to be a prefix
		{"", 0, nil},
		{"ses_", 0, nil},
		{"ses_other000", 0, nil},
		{"nope1234", 0, nil},
	}
	for _, tc := range cases {
		if diff := cmp.Diff(tc.want, r.Resolve("ses_p", tc.in, tc.limit)); diff != "" {
			t.Errorf("Resolve(%q, %d) (-want +got):\n%s", tc.in, tc.limit, diff)
		}
	}
	if got := r.Resolve("ses_nobody", "abcd", 0); got != nil {
		t.Errorf("unknown parent: %v", got)
	}
	if r.Add("ses_q", "ses_abcd1111") {
		t.Error("Add of a registered id reported true")
	}
	if p, ok := r.Remove("ses_other000"); !ok || p != "ses_q" || r.Len("ses_q") != 0 {
		t.Errorf("Remove = %q %v, Len %d", p, ok, r.Len("ses_q"))
	}
	if !slices.Equal(r.Tasks("ses_q"), nil) {
		t.Error("a parent without tasks still has a family")
	}
}

// Adding ids that sort before every other id (OpenCode's newest-first session ids) costs the
// same at any size.
func BenchmarkRegistryAdd(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for b.Loop() {
				var r Registry
				for i := range n {
					r.Add("ses_p", fmt.Sprintf("ses_%012d", n-i))
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/add")
		})
	}
}

// Foreign ids (tasks other hosts keep) are not a parent's tasks, but display ids are unique
// among them too and an id prefix resolves to them, so that it names the same task wherever
// it is resolved; a foreign id that becomes a task of this registry is one no longer.
func TestRegistryForeignIDs(t *testing.T) {
	var r Registry
	r.Add("p", "ses_abcdefgh111")
	r.AddForeign("p", "ses_abcdefgh222")
	r.AddForeign("q", "ses_zzzzzzzz999")
	if got := r.Tasks("p"); len(got) != 1 || r.Len("p") != 1 {
		t.Errorf("tasks of p = %v, want only its own", got)
	}
	if got := r.DisplayID("ses_abcdefgh111"); got != "ses_abcdefgh1" {
		t.Errorf("display id = %q, want unique among the foreign ids too", got)
	}
	if got := r.Resolve("p", "abcdefgh", 0); len(got) != 2 {
		t.Errorf("resolve of a shared prefix = %v, want both", got)
	}
	if got := r.Resolve("p", "abcdefgh2", 0); len(got) != 1 || !r.Foreign(got[0]) {
		t.Errorf("resolve of the foreign one = %v", got)
	}
	if got := r.Resolve("p", "zzzzzzzz", 0); len(got) != 0 {
		t.Errorf("another parent's foreign id resolved: %v", got)
	}
	r.Add("p", "ses_abcdefgh222") // taken over
	if r.Foreign("ses_abcdefgh222") || r.Len("p") != 2 {
		t.Error("a task added is still foreign")
	}
	r.RemoveForeign("ses_zzzzzzzz999")
	r.Remove("ses_abcdefgh111")
	if got := r.DisplayID("ses_abcdefgh222"); got != "ses_abcdefgh" {
		t.Errorf("display id alone = %q", got)
	}
}

// A parent's only foreign id taken over as its task stays resolvable: the family is not
// dropped when the foreign id goes.
func TestRegistryForeignTakenOver(t *testing.T) {
	var r Registry
	r.AddForeign("p", "ses_abcdefgh111")
	r.Add("p", "ses_abcdefgh111")
	if got := r.Resolve("p", "abcdefgh", 0); len(got) != 1 || r.DisplayID("ses_abcdefgh111") != "ses_abcdefgh" {
		t.Errorf("after taking over the only foreign id: resolve %v, display %q", got, r.DisplayID("ses_abcdefgh111"))
	}
}
