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

// A notification queued twice (its task restored before its stale ref went) is taken once
// into the messages a worker posts, and the others around it keep their order.
func TestDueGroupsTakeARefOnce(t *testing.T) {
	f := opencodetest.NewFakeClient()
	defer f.Close()
	m, err := New(f, WithNotifyPolicy(NotifyNoReply))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(t.Context())
	m.mu.Lock()
	defer m.mu.Unlock()
	a, b := noteRef{task: "t1", key: "k1"}, noteRef{task: "t2", key: "k2"}
	ob := m.outboxLocked("p")
	ob.queue = []noteRef{a, b, a}
	ob.inFlight = true
	groups := m.dueGroupsLocked("p", ob)
	if len(groups) != 1 || len(groups[0]) != 2 || groups[0][0] != a || groups[0][1] != b {
		t.Errorf("groups of [a b a] = %v, want one message of [a b]", groups)
	}
	ob.inFlight = false
	ob.queue = nil
}
