package asyncagents

import (
	"errors"
	"testing"
)

func queuedEntry(id, model string) *entry {
	return &entry{task: Task{ID: id, ParentSessionID: "ses_parent", Model: model, Status: StatusQueued}}
}

// T-21: a launch over its limit waits, FIFO per limit key; a slot given back goes to the
// oldest task waiting for that key, and only to it.
func TestSlotsFIFOPerLimit(t *testing.T) {
	s := newSlots(&config{limits: Limits{Default: 1, Models: map[string]int{"p/m": 1}}})
	a, b, c, d := queuedEntry("a", ""), queuedEntry("b", ""), queuedEntry("c", "p/m"), queuedEntry("d", "")
	if !s.take(a) || s.take(b) || !s.take(c) || s.take(d) {
		t.Fatal("want a and c to take their limits' slots, b and d to wait")
	}
	if s.position(b) != 1 || s.position(d) != 2 || s.position(a) != 0 {
		t.Errorf("positions: b %d, d %d, a %d; want 1, 2, 0", s.position(b), s.position(d), s.position(a))
	}
	if got := s.free(c); len(got) != 0 {
		t.Errorf("freeing the model's slot started %d tasks of the default", len(got))
	}
	if got := s.free(a); len(got) != 1 || got[0] != b || b.slot != "default" {
		t.Fatalf("freeing a started %v, want b holding the default slot", got)
	}
	if got := s.free(d); len(got) != 0 || s.position(d) != 0 {
		t.Errorf("taking d out of its queue started %v, left it at %d", got, s.position(d))
	}
}

// A parent has at most perParent active tasks; a launch that would pass it is refused with
// ErrTaskLimit and counts nothing.
func TestSlotsPerParentCap(t *testing.T) {
	s := newSlots(&config{perParent: 2})
	for range 2 {
		if err := s.reserve("p", ""); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.reserve("p", ""); !errors.Is(err, ErrTaskLimit) || s.active("p") != 2 {
		t.Fatalf("third reserve: %v with %d active, want ErrTaskLimit and 2", err, s.active("p"))
	}
	s.unreserve("p", "")
	s.unreserve("p", "")
	if s.active("p") != 0 || len(s.activeOf) != 0 {
		t.Errorf("after two unreserves: %d active, %d parents counted", s.active("p"), len(s.activeOf))
	}
}

// Stored tasks are counted as they were: an active first run holds its slot, a queued task
// waits in the order restored, a follow-up run holds none.
func TestSlotsRestore(t *testing.T) {
	s := newSlots(&config{limits: Limits{Default: 1}})
	run := &entry{task: Task{ID: "r", ParentSessionID: "p", Status: StatusRunning}}
	resumed := &entry{task: Task{ID: "f", ParentSessionID: "p", Status: StatusResumed, ResumeCount: 1}}
	q := queuedEntry("q", "")
	s.restore(run)
	s.restore(resumed)
	s.restore(q)
	if run.slot != "default" || resumed.slot != "" || s.position(q) != 1 || s.active("p") != 2 || s.active("ses_parent") != 1 {
		t.Fatalf("restored: slots %q %q, queue position %d, active %d/%d", run.slot, resumed.slot, s.position(q), s.active("p"), s.active("ses_parent"))
	}
	if got := s.startableAll(); len(got) != 0 {
		t.Errorf("startable with the slot held: %v", got)
	}
}
