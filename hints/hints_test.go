package hints_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents/hints"
	"github.com/asyncagents/asyncagents/internal/testmain"
)

func TestMain(m *testing.M) { testmain.Run(m) }

func TestVisible(t *testing.T) {
	cases := []struct {
		name  string
		n     hints.Notice
		debug bool
		want  string
	}{
		{"N-1", hints.Notice{Outcome: hints.Completed, Description: "scan", Duration: 12 * time.Second, Completed: 1, Total: 2}, false,
			"✓ **Agent \"scan\" finished in 12s.**\nTask Progress: 1/2"},
		{"N-2", hints.Notice{Outcome: hints.Failed, Description: "scan", Duration: 184 * time.Second, Completed: 2, Total: 2}, false,
			"✗ **Agent \"scan\" failed in 3m 4s.**\nTask Progress: 2/2"},
		{"N-4", hints.Notice{Outcome: hints.Cancelled, Description: "scan", Duration: 3723 * time.Second, Completed: 1, Total: 1}, false,
			"⊘ **Agent \"scan\" cancelled after 1h 2m 3s.**\nTask Progress: 1/1"},
		{"N-5 ok", hints.Notice{Outcome: hints.Completed, Resume: 2, Duration: 5 * time.Second, Completed: 1, Total: 1}, false,
			"✓ **Resume #2 completed in 5s.**\nTask Progress: 1/1"},
		{"N-5 failed", hints.Notice{Outcome: hints.Failed, Resume: 1, Duration: 0, Completed: 1, Total: 1}, false,
			"✗ **Resume #1 failed in 0s.**\nTask Progress: 1/1"},
		{"N-6", hints.Notice{Outcome: hints.Completed, Description: "d", Completed: 1, Total: 1}, true,
			"✓ **Agent \"d\" finished in 0s.**\nTask Progress: 1/1 [hint attached]"},
	}
	for _, tc := range cases {
		if got := hints.Visible(tc.n, tc.debug); got != tc.want {
			t.Errorf("%s: got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}

func TestHidden(t *testing.T) {
	running := hints.Hidden(hints.Notice{Running: 1, DisplayID: "ses_abcdef12", Total: 2}, "")
	want := "If you need results immediately, use asyncagents_output(task_id=\"ses_abcdef12\").\n" +
		"You can continue working or just say 'waiting' and halt.\n" +
		"WATCH OUT for leftovers, you will likely WANT to wait for all agents to complete."
	if running != want {
		t.Errorf("N-7: %q", running)
	}
	done := hints.Hidden(hints.Notice{Total: 3, Error: "boom", Permission: "bash: /etc/*"}, "bg")
	want = "The task failed: boom\nThe task is waiting for a permission answer: bash: /etc/*\nAll 3 tasks finished.\nUse bg_output tools to see agent responses."
	if done != want {
		t.Errorf("N-8/N-9: %q", done)
	}
}

// N: the turn prompt lists at most 10 ids a line and stays short for 5,000 tasks.
func TestTurnListsAtMostTenIDs(t *testing.T) {
	ids := make([]string, 5000)
	for i := range ids {
		ids[i] = fmt.Sprintf("ses_%08d", i)
	}
	got := hints.Turn(ids[:1], ids, "bg")
	want := "1 of your background tasks reported since your last turn: ses_00000000.\n" +
		"Still running: ses_00000000, ses_00000001, ses_00000002, ses_00000003, ses_00000004, ses_00000005, " +
		"ses_00000006, ses_00000007, ses_00000008, ses_00000009 and 4990 more.\n" +
		"Their notifications are above. Use bg_output(task_id=\"<id>\") to read a result."
	if got != want {
		t.Errorf("Turn =\n%s\nwant\n%s", got, want)
	}
	if s := hints.Turn(ids, nil, ""); len(s) > 400 || !strings.Contains(s, "No background task is running.") {
		t.Errorf("Turn for 5,000 ended = %d bytes: %q", len(s), s)
	}
}
