package asyncagents

import (
	"testing"

	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// A turn prompt found missing after its tasks were cleared makes nothing owed again, and
// leaves the parent's outbox (with a notification queued, in a worker's hands) as it was.
func TestReoweNothingKeepsTheOutbox(t *testing.T) {
	f := opencodetest.NewFakeClient()
	defer f.Close()
	m, err := New(f)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(t.Context())
	m.mu.Lock()
	defer m.mu.Unlock()
	ob := m.outboxLocked("p")
	ob.queue = []noteRef{{task: "t1", key: "k1"}}
	ob.inFlight = true
	m.reoweLocked("p", []noteRef{{task: "gone", key: "k0"}}, "msg_x")
	if got := m.notes.outboxes["p"]; got != ob || len(got.queue) != 1 || len(got.owed) != 0 {
		t.Errorf("outbox after re-owing nothing = %+v, want it unchanged", got)
	}
	ob.inFlight = false
	ob.queue = nil
}
