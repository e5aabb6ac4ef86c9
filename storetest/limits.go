package storetest

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/asyncagents/asyncagents"
)

// The checks of [asyncagents.LimitStore]'s contract, run by TestLeaseStore.

// launched returns a new task id of parent, counting under anchor ("": its parent), in
// state st, having used used.
func launched(id, parent, anchor string, st asyncagents.Status, used asyncagents.Usage) asyncagents.Task {
	t := leaseTask(id, 0, "")
	t.ParentSessionID, t.AnchorSessionID, t.Status = parent, anchor, st
	t.Usage, t.RunUsage, t.FirstStep = used, used, asyncagents.Usage{}
	return t
}

// admit calls s.Admit and checks its error: nil, or one matching want; false when it differs.
// A refused task must not be held.
func (r *leaseRun) admit(s asyncagents.LimitStore, t asyncagents.Task, perParent int, budget asyncagents.Budget, when string, want error) bool {
	start := time.Now()
	err := s.Admit(r.ctx, t, perParent, budget)
	end := time.Now()
	switch {
	case want == nil && err != nil:
		r.errorf("Admit(%s, %d, %v) %s: %v, want nil", t.ID, perParent, budget, when, err)
		return false
	case want != nil && !errors.Is(err, want):
		r.errorf("Admit(%s, %d, %v) %s: %v, want an error matching %v", t.ID, perParent, budget, when, err, want)
		return false
	case want != nil:
		r.checkNotHeld(s, t.ID, "after Admit refused it "+when)
	default:
		r.checkHeld(s, t.ID, start, end, "after Admit "+when)
	}
	return true
}

// checkAdmitCap: Admit counts the active tasks of a session, and of the session a task counts
// under, on every store.
func checkAdmitCap(r *leaseRun) {
	ls := as[asyncagents.LimitStore](r, r.storesOf(2, ""))
	if ls == nil {
		return
	}
	a, b := ls[0], ls[1]
	const p, cap = "ses_p", 2
	run, queued, none := asyncagents.StatusRunning, asyncagents.StatusQueued, asyncagents.Usage{}
	t1, t2, t3 := launched("ses_1", p, "", run, none), launched("ses_2", p, "", queued, none), launched("ses_3", p, "", run, none)
	sub := launched("ses_sub", "ses_unknown", p, run, none) // launched by a session under p that counts under p
	ok := r.admit(a, t1, cap, asyncagents.Budget{}, "with no task of the parent", nil) &&
		r.admit(b, t2, cap, asyncagents.Budget{}, "with one active task of the parent on another store", nil) &&
		r.admit(a, t3, cap, asyncagents.Budget{}, "with two active tasks of the parent, on two stores", asyncagents.ErrTaskLimit) &&
		r.admit(b, t3, cap, asyncagents.Budget{}, "with two active tasks of the parent, on two stores", asyncagents.ErrTaskLimit) &&
		r.admit(b, sub, cap, asyncagents.Budget{}, "counting under a session with two active tasks", asyncagents.ErrTaskLimit) &&
		r.admit(a, launched("ses_q", "ses_other", "", run, none), cap, asyncagents.Budget{}, "of another parent", nil) &&
		r.admit(a, launched("ses_nocap", p, "", run, none), 0, asyncagents.Budget{}, "with no cap", nil) &&
		r.end(a, t1) && r.end(b, t2) &&
		r.admit(b, t3, cap, asyncagents.Budget{}, "after two of the parent's three tasks ended", nil) &&
		r.admit(a, sub, cap, asyncagents.Budget{}, "counting under a session with two active tasks", asyncagents.ErrTaskLimit)
	if !ok {
		return
	}
	// A resumed run is admitted as a new task is: t1, ended and held by a, is not resumed while
	// its parent has two active tasks, and its record and lease stay as they were.
	resumed := t1
	resumed.Status, resumed.ResumeCount = asyncagents.StatusResumed, 1
	if err := a.Admit(r.ctx, resumed, cap, asyncagents.Budget{}); !errors.Is(err, asyncagents.ErrTaskLimit) {
		r.errorf("Admit(%s, %d) of an ended task resumed while its parent has two active tasks: %v, want an error matching ErrTaskLimit", t1.ID, cap, err)
	} else if st := r.statusOf(a, t1.ID); st != asyncagents.StatusCompleted || a.Held(t1.ID).IsZero() {
		r.errorf("after Admit refused the resume of %s: stored %q, held until %v; want it completed and still held", t1.ID, st, a.Held(t1.ID))
	}
	_ = r.end(b, t3) && r.admit(a, resumed, cap, asyncagents.Budget{}, "resuming an ended task once its parent has one active task", nil)
}

// statusOf returns the status s loads of task id ("" when it has none).
func (r *leaseRun) statusOf(s asyncagents.LeaseStore, id string) asyncagents.Status {
	tasks, err := s.Load(r.ctx)
	if err != nil {
		r.errorf("Load: %v", err)
	}
	for _, t := range tasks {
		if t.ID == id {
			return t.Status
		}
	}
	return ""
}

// Budgets of checkAdmitBudget: in tokens and USD, sums exact in binary.
var (
	treeBudget = asyncagents.Budget{Tokens: 1000}
	used600    = asyncagents.Usage{Input: 500, Output: 100, Cost: 0.5}
	used300    = asyncagents.Usage{Input: 200, CacheRead: 100, Cost: 0.25}
	used200    = asyncagents.Usage{Reasoning: 150, CacheWrite: 50, Cost: 0.125}
)

// checkAdmitBudget: Admit and TreeUsage sum what the tasks below a session used on every store,
// nested tasks and removed ones included, and Admit refuses a task below a session whose tree
// reached the budget.
func checkAdmitBudget(r *leaseRun) {
	ls := as[asyncagents.LimitStore](r, r.storesOf(2, ""))
	if ls == nil {
		return
	}
	a, b := ls[0], ls[1]
	const p = "ses_p"
	done := asyncagents.StatusCompleted
	// Task ids are not their sessions' (FullTask: tsk_x runs in ses_x): the tree goes from a
	// task to the tasks its session launched.
	t1, t2 := launched("tsk_1", p, "", done, used600), launched("tsk_2", p, "", done, used300)
	nested := launched("tsk_nested", t2.SessionID, "", done, used200) // launched by task tsk_2
	all := used600.Add(used300).Add(used200)
	if !r.admit(a, t1, 0, treeBudget, "with nothing used", nil) ||
		!r.admit(b, t2, 0, treeBudget, "with 600 tokens used on another store", nil) ||
		!r.admit(b, nested, 0, treeBudget, "below a task, with 900 tokens used above", nil) {
		return
	}
	_ = r.expectUsage(a, p, "of tasks on two stores and a nested one", all) &&
		r.expectUsage(b, t2.SessionID, "of a task's own tasks", used200) &&
		r.admit(a, launched("tsk_3", p, "", asyncagents.StatusRunning, asyncagents.Usage{}), 0, treeBudget,
			"with 1,100 tokens used below the parent", asyncagents.ErrBudget) &&
		r.admit(a, launched("tsk_4", nested.SessionID, "", asyncagents.StatusRunning, asyncagents.Usage{}), 0, treeBudget,
			"below a nested task, with 1,100 tokens used below the session two levels above", asyncagents.ErrBudget) &&
		r.admit(a, launched("tsk_5", "ses_fresh", "", asyncagents.StatusRunning, asyncagents.Usage{}), 0, treeBudget,
			"of another session", nil) &&
		r.delete(b, t1.ID) &&
		r.expectUsage(b, p, "after another store deleted a task that used 600 tokens", all) &&
		r.admit(a, launched("tsk_3", p, "", asyncagents.StatusRunning, asyncagents.Usage{}), 0, treeBudget,
			"after a task that used 600 of the 1,100 tokens was deleted", asyncagents.ErrBudget) &&
		r.admit(a, launched("tsk_3", p, "", asyncagents.StatusRunning, asyncagents.Usage{}), 0, asyncagents.Budget{Cost: 1},
			"under a budget in USD that the 0.875 used leave room in", nil)
}

// expectUsage compares s.TreeUsage(session) with want; false when it differs.
func (r *leaseRun) expectUsage(s asyncagents.LimitStore, session, when string, want asyncagents.Usage) bool {
	got, err := s.TreeUsage(r.ctx, session)
	if err != nil {
		r.errorf("TreeUsage(%s) %s: %v", session, when, err)
		return false
	}
	if diff := cmp.Diff(want, got); diff != "" {
		r.errorf("TreeUsage(%s) %s (-want +got):\n%s", session, when, diff)
		return false
	}
	return true
}

// AdmitAtOnce: rounds of two launches at once, on two stores, under a cap of one.
const admitRounds = 10

// checkAdmitAtOnce: of two launches of a parent at once on two stores with a cap of one,
// exactly one passes.
func checkAdmitAtOnce(r *leaseRun) {
	ls := as[asyncagents.LimitStore](r, r.storesOf(2, ""))
	if ls == nil {
		return
	}
	for round := range admitRounds {
		parent := fmt.Sprintf("ses_p%02d", round)
		errs := make([]error, len(ls))
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, s := range ls {
			t := launched(fmt.Sprintf("ses_%02d_%d", round, i), parent, "", asyncagents.StatusRunning, asyncagents.Usage{})
			wg.Go(func() {
				<-start
				errs[i] = s.Admit(r.ctx, t, 1, asyncagents.Budget{})
			})
		}
		close(start)
		wg.Wait()
		passed := 0
		for _, err := range errs {
			switch {
			case err == nil:
				passed++
			case !errors.Is(err, asyncagents.ErrTaskLimit):
				r.errorf("Admit of one of two launches at once of %s, with a cap of 1: %v, want nil or an error matching ErrTaskLimit", parent, err)
				return
			}
		}
		if passed != 1 {
			r.errorf("of two launches at once of %s on two stores with a cap of 1, %d passed (%v), want 1", parent, passed, errs)
			return
		}
	}
}
