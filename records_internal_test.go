package asyncagents

import (
	"strings"
	"testing"

	"github.com/asyncagents/asyncagents/opencode"
)

// A record read from a store is refused for each thing out of shape.
func TestCheckRecord(t *testing.T) {
	good := Task{ID: "ses_a1", ParentSessionID: "ses_p1", Agent: "general", Status: StatusRunning, Description: "d",
		Notifications: []Notification{{Key: "ses_a1/0/completed"}}}
	if err := checkRecord(&good); err != nil {
		t.Fatalf("a good record: %v", err)
	}
	for name, change := range map[string]func(*Task){
		"id":           func(t *Task) { t.ID = "user" },
		"parent":       func(t *Task) { t.ParentSessionID = "" },
		"own parent":   func(t *Task) { t.ParentSessionID = t.ID },
		"status":       func(t *Task) { t.Status = "owned" },
		"agent":        func(t *Task) { t.Agent = "a\nb" },
		"description":  func(t *Task) { t.Description = strings.Repeat("d", MaxDescriptionChars+1) },
		"prompt":       func(t *Task) { t.Prompt = strings.Repeat("p", MaxPromptChars+1) },
		"another note": func(t *Task) { t.Notifications[0].Key = "ses_other/0/completed" },
		"big note":     func(t *Task) { t.Notifications[0].Visible = strings.Repeat("v", maxNoteChars+1) },
		"model":        func(t *Task) { t.Model = "nomodel" },
		"depth":        func(t *Task) { t.Depth = MaxNestingDepth + 1 },
	} {
		bad := good.clone()
		change(&bad)
		if err := checkRecord(&bad); err == nil {
			t.Errorf("a record with a bad %s passed", name)
		}
	}
}

// A task's session is checked to be the task's: a child of its parent titled as a task, or
// for a native fork a parentless copy, in its directory.
func TestSessionIs(t *testing.T) {
	task := Task{ID: "ses_a", ParentSessionID: "ses_p", Directory: "/p"}
	for _, c := range []struct {
		s    opencode.Session
		fork bool
		ok   bool
	}{
		{opencode.Session{ParentID: "ses_p", Title: "Background: d", Directory: "/p"}, false, true},
		{opencode.Session{ParentID: "", Title: "my session", Directory: "/p"}, false, false},
		{opencode.Session{ParentID: "ses_p", Title: "Background: d", Directory: "/q"}, false, false},
		{opencode.Session{ParentID: "ses_p", Title: "a subagent", Directory: "/p"}, false, false},
		{opencode.Session{Title: "talk (fork #1)", Directory: "/p"}, true, true},
		{opencode.Session{ParentID: "ses_p", Title: "talk (fork #1)", Directory: "/p"}, true, false},
	} {
		tk := task
		if c.fork {
			tk.ForkMode = ForkNative
		}
		if err := sessionIs(&c.s, &tk); (err == nil) != c.ok {
			t.Errorf("session %+v for fork=%v: %v", c.s, c.fork, err)
		}
	}
}
