package asyncagents

import (
	"errors"
	"testing"

	"github.com/asyncagents/asyncagents/manager"
)

// addTask adds task id of parent: its session is id with the prefix "ses_".
func addTask(s *taskSet, parent, id string, u Usage) *entry {
	key, _ := manager.Key(id)
	e := &entry{task: Task{ID: id, SessionID: sessionPrefix + key, ParentSessionID: parent, Usage: u}}
	if !s.add(e) {
		panic("task " + id + " added twice")
	}
	return e
}

// T-1: a caller's task resolves by its full id, the id without "ses_" or a unique prefix of
// at least 4 characters; an ambiguous prefix names the candidates; another caller's task is
// not found; a bad caller or an empty id is invalid input; a closed set says so.
func TestTaskSetLookup(t *testing.T) {
	s := newTaskSet()
	addTask(&s, "ses_p", "ses_abcd1", Usage{})
	addTask(&s, "ses_p", "ses_abcd2", Usage{})
	addTask(&s, "ses_q", "ses_zzzz1", Usage{})
	p := Caller{SessionID: "ses_p"}
	for _, id := range []string{"ses_abcd1", "abcd1"} {
		if e, err := s.lookup(p, id); err != nil || e.task.ID != "ses_abcd1" {
			t.Errorf("lookup(%q) = %v, %v", id, e, err)
		}
	}
	for id, want := range map[string]error{"abcd": ErrAmbiguousID, "zzzz1": ErrTaskNotFound, "ab": ErrTaskNotFound, " ": ErrInvalidInput} {
		if _, err := s.lookup(p, id); !errors.Is(err, want) {
			t.Errorf("lookup(%q) = %v, want %v", id, err, want)
		}
	}
	if _, err := s.lookup(Caller{SessionID: "nope"}, "abcd1"); !errors.Is(err, ErrInvalidInput) {
		t.Errorf("lookup with a bad caller: %v", err)
	}
	s.closed = true
	if _, err := s.lookup(p, "abcd1"); !errors.Is(err, ErrClosed) {
		t.Errorf("lookup after close: %v", err)
	}
}

// C-2: a tree's usage sums the tasks below a session, their own tasks' and those removed.
func TestTaskSetTreeUsage(t *testing.T) {
	s := newTaskSet()
	addTask(&s, "ses_root", "tsk_a", Usage{Input: 1}) // runs in ses_a
	addTask(&s, "ses_a", "tsk_b", Usage{Input: 10})   // launched by tsk_a
	addTask(&s, "ses_other", "tsk_c", Usage{Input: 100})
	s.cleared["ses_a"] = Usage{Input: 1000}
	if got := s.treeUsage("ses_root"); got.Input != 1011 {
		t.Errorf("tree usage = %d, want 1011", got.Input)
	}
}

// A batch ends for its parent when none of its tasks is active, and is forgotten when empty.
func TestTaskSetBatches(t *testing.T) {
	s := newTaskSet()
	b := s.batch("b1")
	b.total, b.active = 1, 1
	s.open["p"] = "b1"
	s.closeBatch("p", "b1", b)
	if s.open["p"] != "b1" {
		t.Fatal("closed a batch with an active task")
	}
	b.active = 0
	s.closeBatch("p", "b1", b)
	if _, ok := s.open["p"]; ok || s.batches["b1"] == nil {
		t.Fatal("want the batch closed for its parent and kept while it counts a task")
	}
	b.total = 0
	if s.closeBatch("p", "b1", b); s.batches["b1"] != nil {
		t.Error("an empty batch was kept")
	}
}
