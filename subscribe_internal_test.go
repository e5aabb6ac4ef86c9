package asyncagents

import (
	"errors"
	"testing"
)

// Changes carry consecutive sequence numbers; a subscriber whose buffer is full is dropped
// with ErrLagged, the others keep theirs; other hosts' tasks are published when new, changed
// or gone.
func TestFeed(t *testing.T) {
	var f feed
	slow, fast := &Subscription{c: make(chan Change, 1)}, &Subscription{c: make(chan Change, 4)}
	f.add(slow)
	f.add(fast)
	f.publish(Task{ID: "a"}, false)
	f.publish(Task{ID: "a", Status: StatusCompleted}, false)
	if _, ok := f.subs[slow]; ok || !errors.Is(slow.err, ErrLagged) {
		t.Fatalf("slow subscriber kept (err %v)", slow.err)
	}
	if c := <-fast.c; c.Seq != 1 {
		t.Errorf("first change seq %d", c.Seq)
	}
	if c := <-fast.c; c.Seq != 2 || c.Task.Status != StatusCompleted {
		t.Errorf("second change %+v", c)
	}
	local := func(id string) bool { return id == "here" }
	f.remote = f.remoteSeen([]Task{{ID: "r1"}, {ID: "here"}}, local, false)
	f.remote = f.remoteSeen([]Task{{ID: "r1", Status: StatusCompleted}, {ID: "r2"}}, local, true)
	got := map[string]bool{}
	for range 2 {
		c := <-fast.c
		got[c.Task.ID] = true
	}
	if !got["r1"] || !got["r2"] || len(f.remote) != 2 {
		t.Errorf("published %v, remote %d; want r1 changed and r2 new", got, len(f.remote))
	}
	f.remote = f.remoteSeen(nil, local, true)
	for range 2 {
		if c := <-fast.c; !c.Removed {
			t.Errorf("a task gone from the store: %+v, want removed", c)
		}
	}
	f.end(fast, nil)
	f.end(fast, ErrClosed)
	if _, open := <-fast.c; open || fast.err != nil {
		t.Error("ended twice, or with the second error")
	}
}
