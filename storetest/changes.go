package storetest

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/asyncagents/asyncagents"
)

// The checks of HandoffStore.Changes, run by TestLeaseStore.

// changesLimit is the limit of the reads of the checks that do not check limits.
const changesLimit = 100

// read calls s.Changes(after, limit) and checks what every call must give: at most limit
// changes, numbered after after in increasing order, and a next number no lower than after
// nor than the last change's; false after recording a violation.
func (r *leaseRun) read(s asyncagents.HandoffStore, after uint64, limit int, when string) ([]asyncagents.Change, uint64, bool) {
	got, next, err := s.Changes(r.ctx, after, limit)
	if err != nil {
		r.errorf("Changes(%d, %d) %s: %v", after, limit, when, err)
		return nil, after, false
	}
	last := after
	for _, c := range got {
		if c.Seq <= last {
			r.errorf("Changes(%d, %d) %s returned %s numbered %d after one numbered %d (or after %d): want increasing numbers, after after",
				after, limit, when, c.Task.ID, c.Seq, last, after)
			return nil, after, false
		}
		last = c.Seq
	}
	switch {
	case len(got) > limit:
		r.errorf("Changes(%d, %d) %s returned %d changes, more than the limit", after, limit, when, len(got))
	case next < last:
		r.errorf("Changes(%d, %d) %s returned the next number %d, below its last change's, %d", after, limit, when, next, last)
	default:
		return got, next, true
	}
	return nil, after, false
}

// summary returns t as a change carries it: without its prompt, result, follow-ups and
// notifications.
func summary(t asyncagents.Task) asyncagents.Task {
	t.Prompt, t.Result, t.FollowUps, t.Notifications = "", "", nil, nil
	return t
}

// expectChanges reads s's changes after after and compares them, in order, with want (a
// removal: a Task with only its ID, and Removed); it returns the next number.
func (r *leaseRun) expectChanges(s asyncagents.HandoffStore, after uint64, when string, want ...asyncagents.Change) (uint64, bool) {
	got, next, ok := r.read(s, after, changesLimit, when)
	if !ok {
		return after, false
	}
	if !slices.Equal(changeIDs(got), changeIDs(want)) {
		r.errorf("Changes(%d) %s returned %v, want %v", after, when, changeIDs(got), changeIDs(want))
		return next, false
	}
	for i := range want {
		if want[i].Removed {
			continue
		}
		if diff := cmp.Diff(want[i].Task, got[i].Task, compareTask); diff != "" {
			r.errorf("Changes(%d) %s returned task %s unlike its summary (-want +got):\n%s", after, when, want[i].Task.ID, diff)
			return next, false
		}
	}
	return next, true
}

// changed returns the change of t, summarized; removed returns the removal of id.
func changed(t asyncagents.Task) asyncagents.Change { return asyncagents.Change{Task: summary(t)} }
func removed(id string) asyncagents.Change {
	return asyncagents.Change{Task: asyncagents.Task{ID: id}, Removed: true}
}

// checkChanges: Changes returns the saves, claims and removals of other stores' tasks, oldest
// first, as summaries, from a number that only grows, and nothing when nothing changed.
func checkChanges(r *leaseRun) {
	hs := as[asyncagents.HandoffStore](r, r.storesOf(3, ""))
	if hs == nil {
		return
	}
	a, b, c := hs[0], hs[1], hs[2]
	if _, ok := r.expectChanges(c, 0, "of an empty store"); !ok {
		return
	}
	t1, t2, t3, own := leaseTask("ses_1", 1, ""), leaseTask("ses_2", 2, ""), leaseTask("ses_3", 3, ""), leaseTask("ses_own", 4, "")
	if !r.save(a, t1, t2) || !r.save(b, t3) || !r.save(c, own) {
		return
	}
	next, ok := r.expectChanges(c, 0, "of every task, after three stores saved theirs", changed(t1), changed(t2), changed(t3))
	if !ok {
		return
	}
	r.expectChanges(a, 0, "of the store that saved ses_1 and ses_2", changed(t3), changed(own))
	if got, n, ok := r.read(c, next, changesLimit, "with nothing new"); ok && (len(got) > 0 || n != next) {
		r.errorf("Changes(%d) with nothing new returned %d changes and the next number %d, want none and %d", next, len(got), n, next)
	}
	t1.Status, t1.Result = asyncagents.StatusRunning, ""
	if !r.save(a, t1) || !r.delete(a, t2.ID) {
		return
	}
	if next, ok = r.expectChanges(c, next, "after a save and a delete", changed(t1), removed(t2.ID)); !ok {
		return
	}
	// A task the reader held and gave up, taken by another store, is the other store's now.
	if err := c.Yield(r.ctx, own.ID); err != nil {
		r.errorf("Yield(%s): %v", own.ID, err)
		return
	}
	if cl, ok := r.claim(a); !ok || !has(cl.tasks, own.ID) {
		r.errorf("Claim after %s was yielded took %v, not it", own.ID, idsOf(cl.tasks))
		return
	}
	got, _, ok := r.read(c, next, changesLimit, "after another store claimed the reader's task")
	if ok && (len(got) == 0 || got[len(got)-1].Task.ID != own.ID || slices.ContainsFunc(got, func(ch asyncagents.Change) bool { return ch.Task.ID != own.ID })) {
		r.errorf("Changes(%d) after another store claimed %s, which the reader had yielded, returned %v, want changes of %s, the last its claim",
			next, own.ID, changeIDs(got), own.ID)
	}
	r.checkChangesLimit(c, 10, t1, t3, own)
}

// changeIDs returns the ids of changes, a removal's marked.
func changeIDs(cs []asyncagents.Change) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Task.ID
		if c.Removed {
			out[i] += " (removed)"
		}
	}
	return out
}

// checkChangesLimit reads s's changes from 0, one at a time, and checks that it gets each
// task of want once, as it is now (and removals), in at most calls calls.
func (r *leaseRun) checkChangesLimit(s asyncagents.HandoffStore, calls int, want ...asyncagents.Task) {
	var after uint64
	got := map[string]asyncagents.Task{}
	for n := 0; ; n++ {
		page, next, ok := r.read(s, after, 1, "one at a time")
		if !ok {
			return
		}
		if len(page) == 0 && next == after {
			break
		}
		if n == calls {
			r.errorf("Changes with limit 1 still returned changes (the next number %d) after %d calls, for %d tasks", next, calls, len(want))
			return
		}
		for _, c := range page {
			if _, dup := got[c.Task.ID]; dup && !c.Removed {
				r.errorf("Changes with limit 1 returned %s twice", c.Task.ID)
			}
			if !c.Removed {
				got[c.Task.ID] = c.Task
			}
		}
		after = next
	}
	var tasks []asyncagents.Task
	for _, t := range got {
		tasks = append(tasks, t)
	}
	for i := range want {
		want[i] = summary(want[i])
	}
	r.compare("Changes with limit 1, read to the end", tasks, want)
}

// checkChangesBounded: a change carries a task's description, error and permission request
// bounded as a Manager bounds them.
func checkChangesBounded(r *leaseRun) {
	hs := as[asyncagents.HandoffStore](r, r.storesOf(2, ""))
	if hs == nil {
		return
	}
	long := leaseTask("ses_long", 1, "")
	long.Description = strings.Repeat("d", 2*asyncagents.MaxDescriptionChars)
	long.Error = strings.Repeat("é", 2*asyncagents.MaxErrorChars)
	long.Permission.Permission = strings.Repeat("p", 2*asyncagents.MaxPatternChars)
	long.Permission.Patterns = nil
	for i := range 2 * asyncagents.MaxPermissionPatterns {
		long.Permission.Patterns = append(long.Permission.Patterns, fmt.Sprintf("%03d", i)+strings.Repeat("/", 2*asyncagents.MaxPatternChars))
	}
	if !r.save(hs[0], long) {
		return
	}
	got, _, ok := r.read(hs[1], 0, changesLimit, "of a task with long texts")
	if !ok {
		return
	}
	if len(got) != 1 || got[0].Task.ID != long.ID {
		r.errorf("Changes(0) of a task with long texts returned %v, want %s", changeIDs(got), long.ID)
		return
	}
	t := got[0].Task
	n := utf8.RuneCountInString
	switch p := t.Permission; {
	case n(t.Description) > asyncagents.MaxDescriptionChars || n(t.Error) > asyncagents.MaxErrorChars:
		r.errorf("Changes(0) returned a description of %d characters and an error of %d, want at most %d and %d",
			n(t.Description), n(t.Error), asyncagents.MaxDescriptionChars, asyncagents.MaxErrorChars)
	case p == nil || n(p.Permission) > asyncagents.MaxPatternChars || len(p.Patterns) > asyncagents.MaxPermissionPatterns ||
		slices.ContainsFunc(p.Patterns, func(s string) bool { return n(s) > asyncagents.MaxPatternChars }):
		r.errorf("Changes(0) returned the permission request %+v, want it with at most %d patterns of at most %d characters",
			p, asyncagents.MaxPermissionPatterns, asyncagents.MaxPatternChars)
	}
}

// ChangesAtOnce: writers × tasks, each saved twice, by stores writing at once while another
// reads.
const (
	changeWriters = 3
	changeTasks   = 15
	changeLimit   = 5
)

// checkChangesAtOnce: a reader that reads while several stores write at once, with the
// numbers it gets, misses no change and reads none twice.
func checkChangesAtOnce(r *leaseRun) {
	hs := as[asyncagents.HandoffStore](r, r.storesOf(changeWriters+1, ""))
	if hs == nil {
		return
	}
	reader := hs[changeWriters]
	var wg sync.WaitGroup
	final := map[string]asyncagents.Task{}
	done := make(chan struct{})
	for w := range changeWriters {
		var mine []asyncagents.Task
		for i := range changeTasks {
			t := leaseTask(fmt.Sprintf("ses_w%d_%02d", w, i), w*changeTasks+i, "")
			mine = append(mine, t)
			final[t.ID] = summary(t)
		}
		wg.Go(func() {
			for _, t := range mine {
				first := t
				first.Status = asyncagents.StatusRunning
				if !r.save(hs[w], first, t) {
					return
				}
			}
		})
	}
	go func() { wg.Wait(); close(done) }()
	view := map[string]asyncagents.Task{}
	var after uint64
	for writing := true; ; {
		select {
		case <-done:
			writing = false
		default:
		}
		page, next, ok := r.read(reader, after, changeLimit, "while other stores write")
		if !ok {
			<-done
			return
		}
		for _, c := range page {
			view[c.Task.ID] = c.Task
		}
		if !writing && len(page) == 0 && next == after {
			break
		}
		after = next
	}
	r.compare("the tasks as a reader's changes left them, read while other stores wrote",
		slices.Collect(maps.Values(view)), slices.Collect(maps.Values(final)))
}
