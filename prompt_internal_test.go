package asyncagents

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// heldStore is a MemoryStore that says it holds every task's lease for an hour.
type heldStore struct{ MemoryStore }

func (*heldStore) Claim(context.Context) ([]Task, error)   { return nil, nil }
func (*heldStore) Renew(context.Context) ([]string, error) { return nil, nil }
func (*heldStore) Held(string) time.Time                   { return time.Now().Add(time.Hour) }
func (*heldStore) LeaseDuration() time.Duration            { return 30 * time.Second }
func (*heldStore) Server() string                          { return "" }

// A prompt refused without being sent, because its task is being handed over to another
// host, is not one of the run's maxPromptSends sends, nor a send whose message may still
// arrive: the run keeps all its sends, and a send again need not wait for the loss grace.
func TestPromptRefusedDuringHandoverIsNotASend(t *testing.T) {
	ctx := context.Background()
	f := opencodetest.NewFakeClient(opencodetest.WithHeldRuns())
	defer f.Close()
	m, err := New(f, WithStore(&heldStore{}))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	parent, err := f.CreateSession(ctx, opencode.CreateSessionRequest{Title: "parent"})
	if err != nil {
		t.Fatal(err)
	}
	task, err := m.Launch(ctx, LaunchInput{Caller: Caller{SessionID: parent.ID, Agent: "build"}, Description: "d", Agent: "general", Prompt: "held"})
	if err != nil {
		t.Fatal(err)
	}
	task = started(t, m, task)
	m.mu.Lock()
	e := m.tasks.byID[task.ID]
	for e.run.sending || e.run.sends == 0 { // the start's send
		m.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		m.mu.Lock()
	}
	sends, sentAt, rc := e.run.sends, e.run.sentAt, e.task.ResumeCount
	e.hold.lost = true // being handed over
	m.mu.Unlock()
	if err := m.sendPrompt(ctx, e, rc); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("sendPrompt during a handover = %v, want ErrLeaseLost", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if e.run.sends != sends || !e.run.sentAt.Equal(sentAt) || e.run.sending {
		t.Errorf("after a send refused during a handover: %d sends (was %d), sent at %v (was %v), sending %v",
			e.run.sends, sends, e.run.sentAt, sentAt, e.run.sending)
	}
	e.hold.lost = false
}
