package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
)

// `asyncagents tasks` shows what each task used and, per parent, what its tree used, nested
// tasks included; -json carries the usage.
//
// C-2: totals per parent session over all its tasks, nested ones included. C-3: usage is
// shown by `asyncagents tasks`, among others.
func TestTasksShowUsage(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "tasks.jsonl")
	now := time.Now()
	writeStore(t, store, []asyncagents.Task{
		{ID: "ses_child", ParentSessionID: "ses_parent", BatchID: "ses_child", Status: asyncagents.StatusCompleted, Started: now, Completed: now,
			Description: "child", Agent: "general", Usage: asyncagents.Usage{Input: 12000, Output: 400, Cost: 0.042}},
		{ID: "ses_nested", ParentSessionID: "ses_child", BatchID: "ses_nested", Status: asyncagents.StatusCompleted, Started: now, Completed: now,
			Description: "nested", Agent: "general", Depth: 2, Usage: asyncagents.Usage{Input: 3000, Output: 100, Cost: 0.0105}},
	})
	args := append([]string{"tasks", "-store", store}, noServeFlags(dir)...)
	code, out, errOut := runCmd(t, args...)
	if code != exitOK {
		t.Fatalf("tasks: exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{
		`parent ses_parent — 15.5k tokens, $0.0525 in all`, // the child and the task it launched
		`parent ses_child — 3,100 tokens, $0.0105 in all`,
		"12.4k tokens, $0.0420", "USED",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = runCmd(t, append(args, "-json")...)
	var got []asyncagents.Task
	if err := json.Unmarshal([]byte(out), &got); code != exitOK || err != nil || len(got) != 2 || got[0].Usage.IsZero() || got[1].Usage.IsZero() {
		t.Errorf("tasks -json: exit %d, %v: %s", code, err, out)
	}
}
