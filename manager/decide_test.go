package manager

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/asyncagents/asyncagents/opencode"
)

func m(id, role, finish string, completed int64, errName string, texts ...string) opencode.Message {
	msg := opencode.Message{Info: opencode.MessageInfo{ID: id, Role: role, Finish: finish, Time: opencode.MessageTime{Completed: completed}}}
	if errName != "" {
		msg.Info.Error = &opencode.Error{Name: errName, Data: json.RawMessage(`{"message":"` + errName + ` happened"}`)}
	}
	for _, t := range texts {
		msg.Parts = append(msg.Parts, opencode.Part{Type: opencode.PartText, Text: t})
	}
	return msg
}

// T-6: what a reconcile concludes from the latest messages.
func TestDecideT6(t *testing.T) {
	prompt := m("msg_2", "user", "", 0, "", "task")
	old := m("msg_1", "assistant", "stop", 1, "", "old reply")
	cases := []struct {
		name     string
		msgs     []opencode.Message
		baseline string
		sessErr  string
		idle     bool
		status   Status
		result   string
		done     bool
	}{
		{"early idle: prompt without reply", []opencode.Message{prompt}, "", "", true, "", "", false},
		{"no messages yet", nil, "", "", true, "", "", false},
		{"completed", []opencode.Message{prompt, m("msg_3", "assistant", "stop", 5, "", "a", "b")}, "", "", true, StatusCompleted, "a\nb", true},
		{"duplicate idle after completion", []opencode.Message{prompt, m("msg_3", "assistant", "stop", 5, "", "x")}, "", "", false, StatusCompleted, "x", true},
		{"model error", []opencode.Message{prompt, m("msg_3", "assistant", "", 5, "APIError")}, "", "", true, StatusError, "APIError happened", true},
		{"aborted", []opencode.Message{prompt, m("msg_3", "assistant", "", 5, "MessageAbortedError")}, "", "", true, StatusError, "MessageAbortedError happened", true},
		{"still streaming", []opencode.Message{prompt, m("msg_3", "assistant", "", 0, "")}, "", "", true, "", "", false},
		{"between tool steps", []opencode.Message{prompt, m("msg_3", "assistant", "tool-calls", 5, "")}, "", "", false, "", "", false},
		{"halted after tool call", []opencode.Message{prompt, m("msg_3", "assistant", "tool-calls", 5, "")}, "", "", true, StatusError, "", true},
		{"unknown model: session.error, no reply", []opencode.Message{prompt}, "", "Model not found", true, StatusError, "Model not found", true},
		{"resume: old reply before baseline is not the result", []opencode.Message{old, prompt}, "msg_1", "", true, "", "", false},
		{"resume: prompt not stored yet", []opencode.Message{old}, "msg_1", "", true, "", "", false},
		{"resume: new reply", []opencode.Message{old, prompt, m("msg_3", "assistant", "stop", 9, "", "new")}, "msg_1", "", true, StatusCompleted, "new", true},
	}
	for _, tc := range cases {
		st, result, msg, done := decide(tc.msgs, tc.baseline, tc.sessErr, tc.idle)
		got := result
		if st == StatusError {
			got = msg
		}
		if tc.name == "halted after tool call" {
			got = ""
		}
		if st != tc.status || got != tc.result || done != tc.done {
			t.Errorf("%s: got %q %q %v, want %q %q %v", tc.name, st, got, done, tc.status, tc.result, tc.done)
		}
	}
}

func TestDisplayIDsT1(t *testing.T) {
	ids := []string{"ses_abcdefgh1111", "ses_abcdefgh2222", "ses_zzzzzzzzzzzz", "ses_short"}
	got := displayIDs(ids)
	want := map[string]string{"ses_abcdefgh1111": "ses_abcdefgh1", "ses_abcdefgh2222": "ses_abcdefgh2", "ses_zzzzzzzzzzzz": "ses_zzzzzzzz", "ses_short": "ses_short"}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("display(%s) = %s, want %s", id, got[id], w)
		}
	}
}

// T-1: full id, id without ses_, unique prefix of ≥ 4 characters; ambiguity names the
// candidates; other parents' tasks never resolve.
func TestResolveT1(t *testing.T) {
	mgr := &Manager{tasks: map[string]*entry{}, byParent: map[string][]*entry{}}
	for _, id := range []string{"ses_abcd1111", "ses_abcd2222", "ses_wxyz0000"} {
		e := &entry{task: Task{ID: id, ParentSessionID: "ses_p"}}
		mgr.tasks[id] = e
		mgr.byParent["ses_p"] = append(mgr.byParent["ses_p"], e)
	}
	other := &entry{task: Task{ID: "ses_other000", ParentSessionID: "ses_q"}}
	mgr.tasks[other.task.ID] = other
	mgr.byParent["ses_q"] = []*entry{other}

	for in, want := range map[string]string{"ses_abcd1111": "ses_abcd1111", "abcd2222": "ses_abcd2222", "wxyz": "ses_wxyz0000", "ses_abcd1": "ses_abcd1111"} {
		e, err := mgr.resolveLocked("ses_p", in)
		if err != nil || e.task.ID != want {
			t.Errorf("resolve(%q) = %v, %v; want %s", in, e, err, want)
		}
	}
	for in, want := range map[string]error{"": ErrInvalidInput, "ses_": ErrInvalidInput, "abc": ErrTaskNotFound, "abcd": ErrAmbiguousID,
		"ses_other000": ErrTaskNotFound, "nope1234": ErrTaskNotFound} {
		if _, err := mgr.resolveLocked("ses_p", in); !errors.Is(err, want) {
			t.Errorf("resolve(%q) = %v, want %v", in, err, want)
		}
	}
}
