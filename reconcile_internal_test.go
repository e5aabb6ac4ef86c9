package asyncagents

import "testing"

func activeEntry(id string) *entry {
	return &entry{task: Task{ID: id, Status: StatusRunning}}
}

// A session is read once however often it is queued, idle once seen idle; tasks no longer
// active, or removed, are skipped.
func TestReconcileQueue(t *testing.T) {
	extra := 0
	rs := reconciling{rq: map[*entry]bool{}, wake: make(chan struct{}, 1), limit: 2, extra: func() bool { extra++; return true }}
	a, b, c := activeEntry("a"), activeEntry("b"), activeEntry("c")
	rs.enqueue(a, false)
	rs.enqueue(b, false)
	rs.enqueue(a, true)
	rs.enqueue(c, false)
	b.task.Status = StatusCompleted
	c.removed = true
	if extra != 1 || rs.alive != 1 {
		t.Errorf("started %d extra reconcilers with none running, want 1", extra)
	}
	j, ok := rs.take()
	if !ok || j.e != a || !j.run.Idle {
		t.Fatalf("first read: %+v %v, want a, seen idle", j, ok)
	}
	if j, ok := rs.take(); ok {
		t.Fatalf("then %v, want nothing: b ended and c was removed", j.id)
	}
	if rs.order != nil || len(rs.rq) != 0 {
		t.Errorf("queue left %d, %d", len(rs.order), len(rs.rq))
	}
}

// Runs the stream carried whole are taken together, up to the first that needs a read.
func TestReconcileNextBatchesStreamedRuns(t *testing.T) {
	rs := reconciling{rq: map[*entry]bool{}, wake: make(chan struct{}, 1), extra: func() bool { return false }}
	es := []*entry{activeEntry("a"), activeEntry("b"), activeEntry("c"), activeEntry("d")}
	for i, e := range es {
		if i != 2 {
			e.run.streamed = []logFrame{{msg: true}}
		}
		rs.enqueue(e, true)
	}
	jobs := rs.next(nil)
	if len(jobs) != 2 || jobs[0].e != es[0] || jobs[1].e != es[1] || jobs[0].streamed == nil || es[0].run.streamed != nil {
		t.Fatalf("first batch: %d jobs, want a and b with their frames", len(jobs))
	}
	if jobs = rs.next(nil); len(jobs) != 1 || jobs[0].e != es[2] || jobs[0].streamed != nil {
		t.Fatalf("second batch: %d jobs, want c alone, to be read", len(jobs))
	}
	if jobs = rs.next(nil); len(jobs) != 1 || jobs[0].e != es[3] {
		t.Fatalf("third batch: %d jobs, want d", len(jobs))
	}
}
