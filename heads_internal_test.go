package asyncagents

import (
	"testing"
	"time"
)

// N-3: a parent's head is known on the connection its read was made on, for headTTL after the
// read; the stream's events of that connection and the Manager's own ids raise it; an event of
// another connection forgets it.
func TestHeads(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var h heads
	if _, ok := h.known("p", 1, t0); ok {
		t.Fatal("known before a read")
	}
	if h.track("p", 0) {
		t.Fatal("tracked without a connection delivering events")
	}
	h.track("p", 1)
	h.raise("p", "msg_2", 1) // an event during the read
	h.read("p", "msg_1", 1, t0)
	if id, ok := h.known("p", 1, t0); !ok || id != "msg_2" {
		t.Fatalf("after the read: %q %v, want msg_2", id, ok)
	}
	h.raise("p", "msg_3", 0) // posted by the Manager
	if id, _ := h.known("p", 1, t0.Add(headTTL/2)); id != "msg_3" {
		t.Errorf("after a post: %q, want msg_3", id)
	}
	for _, c := range []struct {
		live uint64
		at   time.Time
	}{{2, t0}, {0, t0}, {1, t0.Add(headTTL)}} {
		if _, ok := h.known("p", c.live, c.at); ok {
			t.Errorf("known on connection %d at +%v", c.live, c.at.Sub(t0))
		}
	}
	h.raise("p", "msg_4", 2) // an event of another connection
	if _, ok := h.by["p"]; ok || h.n.Load() != 0 {
		t.Error("an event of another connection did not forget the parent")
	}
	h.track("p", 2)
	h.forget("p")
	if h.n.Load() != 0 {
		t.Error("forget left the parent followed")
	}
}
