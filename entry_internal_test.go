package asyncagents

import (
	"strings"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents/opencode"
)

// T-8: a tool part counts once however often it is updated, and a part of a message from
// before the run (a native fork's copies) does not count.
func TestEntryCountTool(t *testing.T) {
	e := &entry{}
	e.startRun(time.Unix(1000, 0), "msg_base")
	now := time.Unix(2000, 0)
	for _, p := range []opencode.Part{
		{ID: "prt_1", MessageID: "msg_c", Tool: "bash"},
		{ID: "prt_1", MessageID: "msg_c", Tool: "bash"},
		{ID: "prt_0", MessageID: "msg_a", Tool: "read"},
		{ID: "prt_2", MessageID: "msg_c", Tool: "read"},
	} {
		e.countTool(&p, now)
	}
	pr := e.task.Progress
	if pr.ToolCalls != 2 || pr.Tools["bash"] != 1 || pr.Tools["read"] != 1 || !pr.Updated.Equal(now) {
		t.Errorf("progress %+v, want bash and read once each", pr)
	}
}

// A new run starts from a clean state, with a prompt id newer than its baseline.
func TestEntryStartRun(t *testing.T) {
	e := &entry{}
	e.run.seenBusy, e.run.sends, e.run.suspect = true, 2, "x"
	baseline := opencode.NewMessageID(time.Unix(2000, 0), "") // written after the clock's now
	e.startRun(time.Unix(1000, 0), baseline)
	if e.run.seenBusy || e.run.sends != 0 || e.run.suspect != "" || e.run.baseline != baseline {
		t.Errorf("run state %+v, want a new one after %s", e.run, baseline)
	}
	if e.task.PromptID <= baseline {
		t.Errorf("prompt id %s does not sort after the baseline", e.task.PromptID)
	}
}

// T-22: a run is stopped past its deadline, at its budget while it still calls tools, and
// after the stale timeout without activity; the message names the limit.
func TestEntryExpired(t *testing.T) {
	t0 := time.Unix(1000, 0)
	e := &entry{task: Task{Started: t0, Deadline: time.Minute, Budget: Budget{Tokens: 10}}}
	if _, ok := e.expired(t0.Add(30*time.Second), 0); ok {
		t.Fatal("expired before anything")
	}
	if w, ok := e.expired(t0.Add(time.Minute), 0); !ok || !strings.HasPrefix(w.msg, "deadline") || w.budget {
		t.Errorf("at the deadline: %q %v", w.msg, ok)
	}
	e.task.Deadline = 0
	e.task.RunUsage = Usage{Input: 10}
	if _, ok := e.expired(t0, 0); ok {
		t.Error("a run that ended at its budget was stopped")
	}
	e.run.lastFinish = "tool-calls"
	if w, ok := e.expired(t0, 0); !ok || !strings.HasPrefix(w.msg, "budget") || !w.budget {
		t.Errorf("at the budget: %q %v", w.msg, ok)
	}
	e.task.Budget = Budget{}
	e.run.active, e.run.retry = t0.Add(time.Minute), "rate limited"
	if _, ok := e.expired(t0.Add(2*time.Minute), 2*time.Minute); ok {
		t.Error("stale counted from the start, not the last activity")
	}
	if w, ok := e.expired(t0.Add(3*time.Minute), 2*time.Minute); !ok || !strings.Contains(w.msg, "rate limited") {
		t.Errorf("stale: %q %v", w.msg, ok)
	}
}

// started waits until task's start is over (Task.Starting unset) and returns it then.
func started(t testing.TB, m *Manager, task Task) Task {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if got, err := m.Get(task.ID); err == nil && (!got.Starting || got.Status.Terminal()) {
			return got
		}
	}
	t.Fatalf("task %s still starting after 30s", task.ID)
	return Task{}
}
