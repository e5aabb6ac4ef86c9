package asyncagents_test

import (
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/asyncagentstest"
	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// A turn prompt that fails is asked again (issue 34, item 7): under the default NotifyPerWave,
// with one task and an idle parent, the parent's turn prompt (POST /session/{id}/prompt_async)
// answered 503 once is posted again and the turn is asked, not taken as seen. Before, the
// failed post left the parent's newest message id at the prompt's own, and the retry took it
// for a turn that had seen the notification.
func TestFailedTurnPromptIsAskedAgain(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
	m := asyncagentstest.NewManager(t, f)
	parent := asyncagentstest.NewParent(t, f)
	task := asyncagentstest.Launch(t, m, parent, "held")
	f.FailCalls("PromptAsync", 1, &opencode.APIError{StatusCode: 503, Name: "ServiceUnavailable", Message: "busy"})
	if err := f.Release(task.SessionID, opencodetest.Text("done")); err != nil {
		t.Fatal(err)
	}
	var turn asyncagents.TurnState
	if !testmain.Eventually(20*time.Second, func() bool {
		tk, err := m.Get(task.ID)
		if err != nil || len(tk.Notifications) == 0 {
			return false
		}
		turn = tk.Notifications[0].Turn
		return turn == asyncagents.TurnAsked || turn == asyncagents.TurnSeen
	}) {
		t.Fatal("the turn was neither asked nor seen")
	}
	if turn != asyncagents.TurnAsked {
		t.Errorf("turn %q after a failed prompt, want asked", turn)
	}
	if n := countTurnPrompts(t, f, parent.SessionID); n != 1 {
		t.Errorf("%d turn prompts in the parent, want 1", n)
	}
}
