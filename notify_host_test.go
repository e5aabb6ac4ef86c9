package asyncagents_test

import (
	"context"
	"strings"
	"testing"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/asyncagentstest"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// A host that reads a task's result itself, with a blocking Output, does not cost its
// parent a model turn: the notification is posted, and no turn is asked for it
// (TurnRetrieved). The notification names no tool, since the host gave its model none; once
// the host hands the tools out (Tools), notifications name them.
func TestHostThatReadsTheResultIsAskedNoTurn(t *testing.T) {
	t.Parallel()
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	m := asyncagentstest.NewManager(t, f, fastPoll)
	caller := asyncagentstest.NewParent(t, f)
	task := asyncagentstest.Launch(t, m, caller, "work")
	outs := make(chan asyncagents.Output, 1)
	go func() {
		out, _ := m.Output(context.Background(), caller, task.ID, asyncagents.OutputOptions{Block: true, Timeout: asyncagentstest.AwaitTimeout})
		outs <- out
	}()
	asyncagentstest.AwaitTask(t, m, task.ID, func(asyncagents.Task) bool { return asyncagents.Waiters(m, task.ID) == 1 })
	asyncagentstest.Release(t, f, task.SessionID, opencodetest.Text("the answer"))
	if out := <-outs; out.Task.Result != "the answer" {
		t.Fatalf("the host read %q", out.Task.Result)
	}
	got := asyncagentstest.AwaitTask(t, m, task.ID, func(t asyncagents.Task) bool {
		return len(t.Notifications) == 1 && t.Notifications[0].Turn != asyncagents.TurnOwed && t.Notifications[0].Turn != ""
	})
	if n := got.Notifications[0]; n.Turn != asyncagents.TurnRetrieved || n.TurnID != "" || strings.Contains(n.Hidden, "asyncagents_") {
		t.Errorf("notification = %+v; want its turn not asked, no tool named", n)
	}
	for _, text := range asyncagentstest.Notifications(t, f, caller.SessionID) {
		if strings.Contains(text, "reported since your last turn") {
			t.Errorf("a turn was asked: %q", text)
		}
	}

	asyncagents.Tools(m)
	next := asyncagentstest.Launch(t, m, caller, "more")
	asyncagentstest.Release(t, f, next.SessionID, opencodetest.Text("more done"))
	got = asyncagentstest.AwaitTask(t, m, next.ID, asyncagentstest.Delivered)
	if n := got.Notifications[0]; !strings.Contains(n.Hidden, "asyncagents_output") {
		t.Errorf("with the tools handed out, the hint %q names none", n.Hidden)
	}
}
