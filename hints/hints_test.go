package hints_test

import (
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
