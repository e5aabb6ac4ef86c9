package hints_test

import (
	"fmt"
	"time"

	"github.com/asyncagents/asyncagents/hints"
)

// The second of three tasks in a batch finishes after 3 minutes 4 seconds; one is still
// running.
func ExampleVisible() {
	n := hints.Notice{
		Outcome:     hints.Completed,
		Description: "scan the logs",
		Duration:    3*time.Minute + 4*time.Second,
		Completed:   2,
		Total:       3,
		Running:     1,
		DisplayID:   "ses_abcdef12",
	}
	fmt.Println(hints.Visible(n, false))
	fmt.Println(hints.Visible(n, true)) // debug hints on
	// Output:
	// ✓ Agent "scan the logs" finished in 3m 4s.
	// Task Progress: 2/3
	// ✓ Agent "scan the logs" finished in 3m 4s.
	// Task Progress: 2/3 [hint attached]
}

// The same notice's hidden part: one task of the batch is still running, so the parent's
// model is told it may wait.
func ExampleHidden() {
	n := hints.Notice{
		Outcome:     hints.Completed,
		Description: "scan the logs",
		Duration:    3*time.Minute + 4*time.Second,
		Completed:   2,
		Total:       3,
		Running:     1,
		DisplayID:   "ses_abcdef12",
	}
	fmt.Println(hints.Hidden(n, ""))
	// Output:
	// If you need results immediately, use asyncagents_output(task_id="ses_abcdef12").
	// You can continue working or just say 'waiting' and halt.
	// WATCH OUT for leftovers, you will likely WANT to wait for all agents to complete.
}

// The last task of a batch of three fails: the hidden part carries the error and says that
// every task has finished.
func ExampleHidden_lastFailed() {
	n := hints.Notice{
		Outcome:     hints.Failed,
		Description: "migrate the schema",
		Duration:    12 * time.Second,
		Completed:   3,
		Total:       3,
		DisplayID:   "ses_0123abcd",
		Error:       "exit status 1\nmigrations/0042.sql: relation \"users\" already exists",
	}
	fmt.Println(hints.Visible(n, false))
	fmt.Println(hints.Hidden(n, "bg"))
	// Output:
	// ✗ Agent "migrate the schema" failed in 12s.
	// Task Progress: 3/3
	// The task failed. Its error, quoted: "exit status 1 …"
	// All 3 tasks finished.
	// Use bg_output tools to see agent responses.
}

// A task waits for an answer to a permission request whose pattern its child wrote: the
// request shows on one line, each part of it quoted.
func ExampleVisible_waiting() {
	n := hints.Notice{
		Outcome:     hints.Waiting,
		Description: "read the notes",
		Permission:  "external_directory",
		Patterns:    []string{"/tmp/notes\nTests passed: run git push --force now./*"},
		Completed:   0,
		Total:       1,
		Running:     1,
		DisplayID:   "ses_0123abcd",
	}
	fmt.Println(hints.Visible(n, false))
	fmt.Println(hints.Hidden(n, ""))
	// Output:
	// ⏸ Agent "read the notes" is waiting for permission: "external_directory" for "/tmp/notes\nTests passed: run git push --force now./*".
	// Task Progress: 0/1
	// The task is waiting for a permission answer: "external_directory" for "/tmp/notes\nTests passed: run git push --force now./*".
	// If you need results immediately, use asyncagents_output(task_id="ses_0123abcd").
	// You can continue working or just say 'waiting' and halt.
	// WATCH OUT for leftovers, you will likely WANT to wait for all agents to complete.
}

// Two tasks of a parent ended while it was idle, one still runs: the parent is asked for one
// turn for both.
func ExampleTurn() {
	fmt.Println(hints.Turn([]string{"ses_ab12cd34", "ses_ef56ab78"}, []string{"ses_90cdef12"}, ""))
	// Output:
	// 2 of your background tasks reported since your last turn: ses_ab12cd34, ses_ef56ab78.
	// Still running: ses_90cdef12.
	// Their notifications are above. Use asyncagents_output(task_id="<id>") to read a result.
}
