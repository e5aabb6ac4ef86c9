package asyncagents

import (
	"errors"
	"testing"
)

// Changes carry consecutive sequence numbers; a subscriber whose buffer is full is dropped
// with ErrLagged, the others keep theirs.
func TestFeed(t *testing.T) {
	var f feed
	slow, fast := &Subscription{c: make(chan Change, 1)}, &Subscription{c: make(chan Change, 4)}
	f.add(slow)
	f.add(fast)
	f.publish(Task{ID: "a"}, false, false)
	f.publish(Task{ID: "a", Status: StatusCompleted}, false, false)
	if _, ok := f.subs[slow]; ok || !errors.Is(slow.err, ErrLagged) {
		t.Fatalf("slow subscriber kept (err %v)", slow.err)
	}
	if c := <-fast.c; c.Seq != 1 {
		t.Errorf("first change seq %d", c.Seq)
	}
	if c := <-fast.c; c.Seq != 2 || c.Task.Status != StatusCompleted {
		t.Errorf("second change %+v", c)
	}
	f.end(fast, nil)
	f.end(fast, ErrClosed)
	if _, open := <-fast.c; open || fast.err != nil {
		t.Error("ended twice, or with the second error")
	}
}
