package asyncagents

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents/opencode"
)

// newTestNotifier returns a notifier of policy, for parents with no active task.
func newTestNotifier(policy NotifyPolicy) *notifier {
	n := newNotifier(&config{notifyPolicy: policy, waveWindow: DefaultWaveWindow}, func(string) int { return 0 })
	return &n
}

// pendingRef returns a ref to a pending notification of a new task of parent.
func pendingRef(parent, key, agent string) noteRef {
	e := &entry{task: Task{ID: "ses_" + key, ParentSessionID: parent, ParentAgent: agent,
		Notifications: []Notification{{Key: key, State: NotificationPending}}}}
	return noteRef{e: e, key: key}
}

// A turn prompt found missing after its tasks were cleared makes nothing owed again, and
// leaves the parent's outbox (with a notification queued, in a worker's hands) as it was.
func TestReoweNothingKeepsTheOutbox(t *testing.T) {
	n := newTestNotifier(NotifyPerWave)
	ob := n.outbox("p")
	ob.queue = []noteRef{pendingRef("p", "k1", "build")}
	ob.inFlight = true
	gone := pendingRef("p", "k0", "build")
	gone.e.removed = true
	n.reowe("p", []noteRef{gone}, "msg_x")
	if got := n.outboxes["p"]; got != ob || len(got.queue) != 1 || len(got.owed) != 0 || len(n.ready) != 0 {
		t.Errorf("outbox after re-owing nothing = %+v, ready %v; want it unchanged", got, n.ready)
	}
}

// A turn prompt found missing makes the notifications it covered owed again, and readies
// their parent for a worker.
func TestReoweOwesTheTurnAgain(t *testing.T) {
	n := newTestNotifier(NotifyPerWave)
	r := pendingRef("p", "k1", "build")
	note := r.note()
	note.State, note.Turn, note.TurnID = NotificationDelivered, TurnAsked, "msg_turn"
	n.reowe("p", []noteRef{r}, "msg_turn")
	ob := n.outboxes["p"]
	if ob == nil || len(ob.owed) != 1 || ob.owed[0] != r || note.Turn != TurnOwed || note.TurnID != "" {
		t.Fatalf("after reowe: outbox %+v, note %+v; want the note owed again", ob, note)
	}
	if len(n.ready) != 1 || n.ready[0] != "p" {
		t.Errorf("ready = %v, want [p]", n.ready)
	}
}

// A notification queued twice (its task restored before its stale ref went) is taken once
// into the messages a worker posts, and the others around it keep their order.
func TestGroupsTakeARefOnce(t *testing.T) {
	n := newTestNotifier(NotifyNoReply)
	a, b := pendingRef("p", "k1", "build"), pendingRef("p", "k2", "build")
	ob := n.outbox("p")
	ob.queue = []noteRef{a, b, a}
	groups := n.groups("p", ob, 0, time.Now())
	if len(groups) != 1 || len(groups[0]) != 2 || groups[0][0] != a || groups[0][1] != b {
		t.Errorf("groups of [a b a] = %v, want one message of [a b]", groups)
	}
}

// Notifications posted without reply share a message only with those of the same agent and
// the same earlier message id; a prompt per run end goes alone.
func TestGroupsMergeByAgentAndMessage(t *testing.T) {
	n := newTestNotifier(NotifyNoReply)
	a, b, c := pendingRef("p", "k1", "build"), pendingRef("p", "k2", "build"), pendingRef("p", "k3", "plan")
	ob := n.outbox("p")
	ob.queue = []noteRef{a, b, c}
	if g := n.groups("p", ob, 0, time.Now()); len(g) != 1 || len(g[0]) != 2 {
		t.Errorf("groups with the head unknown = %v, want one message of the first two", g)
	}
	b.note().MessageID = "msg_1" // posted before under an id of its own
	if g := n.groups("p", ob, 0, time.Now()); len(g) != 1 || len(g[0]) != 1 {
		t.Errorf("groups after a post of the second = %v, want the first alone", g)
	}
	n.policy = NotifyPerRun
	if g := n.groups("p", ob, 0, time.Now()); len(g) != 1 || len(g[0]) != 1 || g[0][0] != a {
		t.Errorf("groups of prompts = %v, want the first alone", g)
	}
}

// An outbox's owed turn is due at once when its parent has no active task, and otherwise a
// wave window after the newest notification, within waveMaxWindows of the first.
func TestTurnDue(t *testing.T) {
	active := 0
	n := newNotifier(&config{waveWindow: time.Second}, func(string) int { return active })
	t0 := time.Unix(1000, 0)
	ob := &outbox{}
	ob.owe(pendingRef("p", "k1", ""), t0)
	ob.lastEnd = t0.Add(10 * time.Second)
	if at := n.turnDue("p", ob); !at.IsZero() {
		t.Errorf("turn due with no active task at %v, want at once", at)
	}
	active = 1
	if at := n.turnDue("p", ob); !at.Equal(t0.Add(waveMaxWindows * time.Second)) {
		t.Errorf("turn due at %v, want %d windows after the first owed", at, waveMaxWindows)
	}
	ob.lastEnd = t0.Add(2 * time.Second)
	if at := n.turnDue("p", ob); !at.Equal(t0.Add(3 * time.Second)) {
		t.Errorf("turn due at %v, want a window after the newest", at)
	}
}

// Parents become ready in the order their notifications came due, each once, and a worker
// takes at most what it has room for.
func TestReadyInOrder(t *testing.T) {
	n := newTestNotifier(NotifyPerWave)
	n.queue("p1", pendingRef("p1", "k1", ""))
	n.queue("p2", pendingRef("p2", "k2", ""))
	n.queue("p1", pendingRef("p1", "k3", ""))
	if got := n.takeReady(1); len(got) != 1 || got[0] != "p1" {
		t.Fatalf("takeReady(1) = %v, want [p1]", got)
	}
	if got := n.takeReady(5); len(got) != 1 || got[0] != "p2" {
		t.Fatalf("takeReady(5) = %v, want [p2]", got)
	}
	if !n.outboxes["p1"].inFlight || n.outboxes["p1"].ready {
		t.Error("a taken outbox is not in flight")
	}
}

// N-3: a merged message carries at most mergeBytes of text: notifications of 20,000
// characters go three to a message.
func TestGroupsBoundedInBytes(t *testing.T) {
	n := newTestNotifier(NotifyNoReply)
	ob := n.outbox("p")
	for i := range 10 {
		r := pendingRef("p", fmt.Sprint("k", i), "build")
		r.note().Visible = strings.Repeat("x", 20000)
		ob.queue = append(ob.queue, r)
	}
	g := n.groups("p", ob, 0, time.Now())
	if len(g) != 1 || len(g[0]) != 3 {
		t.Errorf("groups of ten 20,000-character notifications: %d messages, the first of %d; want one of 3", len(g), len(g[0]))
	}
}

// A message found under a notification's id landed when it holds the parts a post would
// (each notification's visible part, by its id), or no part with an id made from it (an
// older version posted it before parts had such ids); one that holds only some of them (a
// notification merged with it was posted without it) has not, and is posted again.
func TestLandedMessages(t *testing.T) {
	const id = "msg_21e3753df000w78fODBaR8WPFH"
	x := &Notification{Key: "ses_x/0/completed", Created: time.Unix(1, 0)}
	y := &Notification{Key: "ses_y/0/completed", Created: time.Unix(2, 0)}
	xv, xh := notePartIDs(id, x)
	yv, yh := notePartIDs(id, y)
	message := func(ids ...string) *opencode.Message {
		m := &opencode.Message{}
		for _, p := range ids {
			m.Parts = append(m.Parts, opencode.Part{ID: p})
		}
		return m
	}
	for _, c := range []struct {
		name string
		msg  *opencode.Message
		want bool
	}{
		{"both", message(xv, xh, yv, yh), true},
		{"one of two", message(xv, xh), false},
		{"an older version's post", message("prt_21e3753e0000tggE8TxMYSzi1h", "prt_21e3753e0001yOZD4BRJXZaRVJ"), true},
		{"empty", message(), true},
	} {
		if got := landed(c.msg, id, []string{xv, yv}); got != c.want {
			t.Errorf("%s: landed = %v, want %v", c.name, got, c.want)
		}
	}
	if xv >= xh || xh >= yv || !strings.HasPrefix(xv, "prt_21e3753df000w78fODBaR8WPFH") {
		t.Errorf("part ids %s %s %s %s: want the message's, visible before hint, in the order of the run ends", xv, xh, yv, yh)
	}
}
