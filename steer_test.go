package asyncagents_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/asyncagentstest"
	"github.com/asyncagents/asyncagents/opencode"
)

// lostSteer forwards every call, and loses the answer to the prompt_async whose text holds
// "steer": the request reached the server, the Manager hears a reset connection.
type lostSteer struct {
	opencode.Client
	lost atomic.Int32
}

func (c *lostSteer) PromptAsync(ctx context.Context, id string, req opencode.PromptRequest) error {
	err := c.Client.PromptAsync(ctx, id, req)
	if len(req.Parts) > 0 && strings.Contains(req.Parts[len(req.Parts)-1].Text, "steer ") {
		c.lost.Add(1)
		return errors.New("read tcp: connection reset by peer")
	}
	return err
}

// A message sent to a running task reaches its model within the same run, at its next step
// after the tool call under way: the run ends with the reply to it (the rest of the first
// instructions is not followed), one run and one notification. The same holds when the
// answer to the steering post is lost: the message was stored, and is not sent twice.
func TestRealServerSteerReachesTheRunningModel(t *testing.T) {
	t.Parallel()
	srv := shared.Get(t)
	for _, lose := range []bool{false, true} {
		t.Run(fmt.Sprintf("lost=%v", lose), func(t *testing.T) {
			t.Parallel()
			c := &lostSteer{Client: srv.Client()}
			m := asyncagentstest.NewManager(t, c, fastPoll, asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply))
			caller := asyncagentstest.NewParent(t, c)
			mark := fmt.Sprint(time.Now().UnixNano())
			task := asyncagentstest.Launch(t, m, caller, "first "+mark+"\nRUN:sleep 3 ||| echo not-steered")
			asyncagentstest.AwaitTask(t, m, task.ID, func(t asyncagents.Task) bool { return t.Progress.ToolCalls >= 1 })
			sent := time.Now()
			steered, err := m.Steer(context.Background(), caller, task.ID, "steer "+mark+"\nRUN:echo steered-ok")
			if err != nil || steered.Steers != 1 || !steered.Status.Active() {
				t.Fatalf("Steer = %+v, %v", steered, err)
			}
			got := asyncagentstest.Await(t, m, caller, task.ID)
			if got.Status != asyncagents.StatusCompleted || !strings.Contains(got.Result, "steered-ok") || got.ResumeCount != 0 {
				t.Errorf("steered task: %s %q (resumes %d)", got.Status, got.Result, got.ResumeCount)
			}
			req := firstRequest(t, srv.Model, "steer "+mark)
			t.Logf("the steering message reached the model %v after it was sent (the step under way ran a 3 s command)", req.Time.Sub(sent).Round(time.Millisecond))
			msgs, err := srv.Client().Messages(context.Background(), task.SessionID, 0)
			if err != nil {
				t.Fatal(err)
			}
			users := 0
			for _, msg := range msgs {
				if msg.Info.Role == opencode.RoleUser {
					users++
				}
			}
			if users != 2 || lose && c.lost.Load() != 1 {
				t.Errorf("the session has %d user messages (want the prompt and the message once); answers lost: %d", users, c.lost.Load())
			}
			if notes := asyncagentstest.AwaitNotifications(t, c, caller.SessionID, 1); len(notes) != 1 {
				t.Errorf("notifications %q, want one", notes)
			}
			if _, err := m.Steer(context.Background(), caller, task.ID, "too late"); !errors.Is(err, asyncagents.ErrNotRunning) {
				t.Errorf("steering an ended task = %v, want ErrNotRunning", err)
			}
		})
	}
}
