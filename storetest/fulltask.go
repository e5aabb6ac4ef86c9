package storetest

import (
	"fmt"
	"strings"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/fork"
)

// FullTask returns a task with the given id and every field set (DisplayID and
// QueuePosition too, which stores need not keep), its values derived from n: maps and slices with several
// elements, times with nanoseconds in a zone east of UTC and no monotonic clock reading,
// text with quotes, newlines, HTML characters and non-ASCII letters, [fork.Stats], a
// pending permission and two notifications. Calls with the same arguments return equal tasks.
func FullTask(id string, n int) asyncagents.Task {
	zone := time.FixedZone("UTC+2", 2*60*60)
	started := time.Date(2025, 3, 14, 15, 9, 26, 535897932, zone).Add(time.Duration(n) * time.Minute)
	return asyncagents.Task{
		ID:              id,
		SessionID:       "ses_" + strings.TrimPrefix(strings.TrimPrefix(id, "tsk_"), "ses_"),
		ParentSessionID: "ses_parent",
		ParentMessageID: fmt.Sprintf("msg_%d", n),
		ParentAgent:     "build",
		Directory:       "/home/dev/projekt-ü",
		Server:          "opencode-eu-1",
		Description:     fmt.Sprintf("find TODOs #%d", n),
		Prompt:          "List the \"TODO\" comments\nin the files we read.",
		PromptID:        fmt.Sprintf("msg_prompt_%d", n),
		Agent:           "general",
		Model:           "anthropic/claude-sonnet-4",
		Status:          asyncagents.StatusCompleted,
		Started:         started,
		Completed:       started.Add(12*time.Second + 345*time.Millisecond),
		Result:          fmt.Sprintf("Found %d: <b>a && b</b>\n\ttabbed — ✓ \u2028 done", n),
		Error:           "none, really",
		Retrieved:       started.Add(time.Minute),
		BatchID:         "batch_1",
		ResumeCount:     n%3 + 1,
		Steers:          n%2 + 1,
		Paused:          true,
		Starting:        true,
		LaunchKey:       fmt.Sprintf("toolu_%d", n),
		Forked:          true,
		ForkMode:        asyncagents.ForkNative,
		Depth:           n%2 + 1,
		AnchorSessionID: "ses_anchor",
		Deadline:        time.Duration(n+1) * time.Minute,
		FollowUps:       []string{"follow up " + id},
		Progress: asyncagents.Progress{
			ToolCalls: n + 5,
			Tools:     map[string]int{"read": n + 2, "grep": 2, "bash": 1},
			LastTools: []string{"grep", "read", "bash"},
			Updated:   started.Add(11 * time.Second),
		},
		ForkStats: &fork.Stats{
			OriginalMessages:   n + 40,
			FinalMessages:      30,
			CompactionDetected: true,
			CompactionIndex:    7,
			Tier1:              5,
			Tier2:              10,
			Tier3:              3,
			TruncatedResults:   9,
			HeadTailApplied:    2,
			RemovedMessages:    4,
			TotalChars:         123456,
			BudgetClipped:      true,
		},
		Worktree: &asyncagents.Worktree{
			ID: "task-0123456789ab", Repo: "/home/dev/projekt-ü", Dir: "/home/dev/projekt-ü/.git/asyncagents/worktrees/task-0123456789ab",
			Branch: "asyncagents/task-0123456789ab", Base: "0123456789abcdef0123456789abcdef01234567",
			Head: "89abcdef0123456789abcdef0123456789abcdef", Files: n + 2, Added: 10, Deleted: 3,
			Changed:   []string{"a.go", "sub/ü.txt"},
			Overlaps:  []asyncagents.Overlap{{Path: "a.go", With: []string{"ses_other", "parent"}}},
			Error:     "none",
			Merged:    started.Add(2 * time.Minute),
			Discarded: started.Add(3 * time.Minute),
		},
		Permission: &asyncagents.PendingPermission{
			ID:         "per_1",
			Permission: "external_directory",
			Patterns:   []string{"/etc/*", "/var/log/**"},
		},
		Usage:     asyncagents.Usage{Input: 16172, Output: 40, Reasoning: 7, CacheRead: 900, CacheWrite: 120, Cost: 0.049116},
		RunUsage:  asyncagents.Usage{Input: 8119, Output: 20, Reasoning: 3, CacheRead: 400, CacheWrite: 60, Cost: 0.024657},
		FirstStep: asyncagents.Usage{Input: 8053, Output: 20, Reasoning: 4, CacheRead: 500, CacheWrite: 60, Cost: 0.024459},
		Budget:    asyncagents.Budget{Tokens: 50000, Cost: 0.25},
		Notifications: []asyncagents.Notification{
			{
				Key:       id + "/0/completed",
				State:     asyncagents.NotificationDelivered,
				Visible:   "✓ Agent \"general\" finished in 12s.",
				Hidden:    "<task-notification>\nRead it with the output tool.\n</task-notification>",
				MessageID: "msg_notify_0",
				Attempts:  2,
				Created:   started.Add(13 * time.Second),
				Next:      started.Add(14 * time.Second),
				Delivered: started.Add(15 * time.Second),
				Error:     "502 Bad Gateway",
				Turn:      asyncagents.TurnAsked,
				TurnID:    "msg_turn_0",
			},
			{
				Key:     fmt.Sprintf("%s/%d/completed", id, n%3+1),
				State:   asyncagents.NotificationPending,
				Visible: "✓ Agent \"general\" finished again.",
				Hidden:  "<task-notification/>",
				Created: started.Add(time.Minute),
			},
		},
		Seal:          fmt.Sprintf("%064x", n+1),
		DisplayID:     id,
		QueuePosition: n%4 + 1,
	}
}
