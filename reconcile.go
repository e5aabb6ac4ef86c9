package asyncagents

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/asyncagents/asyncagents/manager"
	"github.com/asyncagents/asyncagents/opencode"
)

// reconcileWindow is how many of the latest messages a reconcile reads: enough to find
// the run's final assistant message and the prompt it answers.
const reconcileWindow = 8

// minSuspect is how long a run must be seen idle with the same unfinished last step, or
// without its prompt, before it is decided so: OpenCode 1.18.33 writes a run's first
// assistant message some tens of milliseconds before it lists the session as busy, so one
// look at an idle session with an unfinished step proves nothing.
const minSuspect = time.Second

// confirmUnfinished decides a run whose session was seen idle while its last step had not
// finished (or its prompt was not there). If the server still reports the session idle, the
// step will never finish (the server stopped mid-run: a restart or a crash), unless it
// finished meanwhile: the messages are read once more to tell. A verdict that rests on the
// session being idle (interrupted, halted, unsent) stands only when an earlier look, at least
// minSuspect before, saw the same: until then the run stays undecided and the status poll
// looks again.
func (m *Manager) confirmUnfinished(e *entry, run manager.Run) manager.Verdict {
	m.mu.Lock()
	id, dir := e.task.SessionID, e.task.Directory
	m.mu.Unlock()
	ctx, cancel := m.bg.requestCtx()
	defer cancel()
	st, err := m.client.SessionStatus(ctx, dir)
	if err != nil {
		return manager.Verdict{}
	}
	if _, busy := st[id]; busy {
		m.mu.Lock()
		e.run.busy()
		m.mu.Unlock()
		return manager.Verdict{}
	}
	msgs, err := m.client.Messages(ctx, id, reconcileWindow)
	if err != nil {
		return manager.Verdict{}
	}
	run.Confirmed = true
	v := manager.Decide(msgs, run)
	if v.Outcome != manager.Unsent && (v.Outcome != manager.Failed || v.Error != manager.Interrupted && v.Error != manager.HaltedAfterToolCall) {
		return v
	}
	seen := strconv.Itoa(int(v.Outcome)) + v.Error
	if n := len(msgs); n > 0 {
		last := &msgs[n-1].Info
		seen += "\x00" + last.ID + "\x00" + last.Finish + "\x00" + strconv.FormatInt(last.Time.Completed, 10)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.bg.now()
	if e.run.suspect == seen && now.Sub(e.run.suspectAt) >= minSuspect {
		return v
	}
	if e.run.suspect != seen {
		e.run.suspect, e.run.suspectAt = seen, now
	}
	return manager.Verdict{}
}

// enqueueActive queues every active task for a reconcile.
func (m *Manager) enqueueActive() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range m.tasks.byID {
		if e.task.Status.Active() {
			m.recon.enqueue(e, false)
		}
	}
}

// reconciling is the part of the Manager that reads the messages of sessions that went idle
// and decides their runs: the queue of sessions to read, and its goroutines, the reconcilers
// — the resident ones (WithReconcilers) and, while sessions wait to be read with every reader
// busy, extra ones, up to limit: reconcileBurst times the resident ones, at most
// maxReconcilers. The extra ones end when the queue is empty. A server answers a burst of
// reads sooner with more of them in flight; when it is idle, the resident ones are enough.
// Guarded by Manager.mu, but ends.
type reconciling struct {
	rq                 map[*entry]bool // tasks waiting for a read → the session was seen idle
	order              []*entry        // the same, in the order they came
	wake               chan struct{}   // tells a waiting reconciler there is work
	alive, busy, limit int             // reconcilers running, reading, and at most
	extra              func() bool     // starts an extra reconciler; false when the Manager is closing
	// ends holds a token for each goroutine recording the end of a run decided with others
	// (decideStreamed): endParallel at most, whatever the reconcilers. Not under Manager.mu.
	ends chan struct{}
}

// add queues a read of e's session once, without waking a reconciler; idle records that the
// session was seen idle.
func (rs *reconciling) add(e *entry, idle bool) {
	if was, ok := rs.rq[e]; ok {
		rs.rq[e] = was || idle
		return
	}
	rs.rq[e] = idle
	rs.order = append(rs.order, e)
}

// enqueue queues a read of e's session once, and sees that a reconciler takes it; idle records
// that the session was seen idle.
func (rs *reconciling) enqueue(e *entry, idle bool) {
	rs.add(e, idle)
	rs.wakeOne()
}

// forget drops the read of e's session, if queued.
func (rs *reconciling) forget(e *entry) { delete(rs.rq, e) }

// reconcileBurst bounds the extra reconcilers (see reconcilers).
const reconcileBurst = 16

// wakeOne sees that a reconciler takes the next queued read: it wakes one that waits or, when
// all are busy, starts an extra one if the limit allows.
func (rs *reconciling) wakeOne() {
	if rs.busy >= rs.alive && rs.alive < rs.limit && rs.extra() {
		rs.alive++
		return
	}
	select {
	case rs.wake <- struct{}{}:
	default:
	}
}

func (m *Manager) reconcileLoop(resident bool) {
	rs := &m.recon
	working, returned := false, false
	defer func() { // a panic ended the loop (a resident one is started again): it counts no more
		if !returned {
			m.mu.Lock()
			if working {
				rs.busy--
			}
			if !resident {
				rs.alive--
			}
			m.mu.Unlock()
		}
	}()
	var jobs []reconcileJob
	for {
		m.mu.Lock()
		if working {
			rs.busy--
		}
		jobs = rs.next(jobs[:0])
		ok := len(jobs) > 0
		if working = ok; ok {
			rs.busy++
			if len(rs.order) > 0 { // pass the wake-up on
				rs.wakeOne()
			}
		} else if !resident {
			rs.alive--
			m.mu.Unlock()
			returned = true
			return
		}
		m.mu.Unlock()
		if ok {
			if jobs[0].streamed == nil {
				m.reconcile(jobs[0])
			} else {
				m.decideStreamed(jobs)
			}
			clear(jobs)
			continue
		}
		select {
		case <-m.bg.stopc:
			returned = true
			return
		case <-rs.wake:
		}
	}
}

// reconcileJob is a reconcile of run rc of task e, as the queue hands it out.
type reconcileJob struct {
	e   *entry
	id  string // the task's
	sid string // its session's ("" while it has none)
	rc  int
	run manager.Run
	// streamed holds the frames the run's log recorded when the session went idle, when the
	// stream carried the whole run; nil otherwise.
	streamed []logFrame
}

// decideBatch bounds the runs a reconciler decides at once from their streamed frames.
const decideBatch = 256

// next appends the next queued reconcile to jobs and, when the stream carried its run, the
// ones queued after it whose runs it carried too, up to decideBatch: those need no request,
// and a burst of them is decided under one lock, not three each.
func (rs *reconciling) next(jobs []reconcileJob) []reconcileJob {
	for len(jobs) < decideBatch {
		if len(jobs) > 0 && !rs.streamedNext() {
			break
		}
		r, ok := rs.take()
		if !ok {
			break
		}
		jobs = append(jobs, r)
		if r.streamed == nil {
			break
		}
	}
	return jobs
}

// streamedNext reports whether the next queued reconcile is of a run the stream carried.
func (rs *reconciling) streamedNext() bool {
	rs.skipStale()
	return len(rs.order) > 0 && rs.order[0].run.streamed != nil
}

// skipStale drops from the head of the queue the tasks no longer waiting (cleared meanwhile)
// and those no longer active.
func (rs *reconciling) skipStale() {
	for len(rs.order) > 0 {
		e := rs.order[0]
		if _, queued := rs.rq[e]; queued && !e.removed && e.task.Status.Active() {
			return
		}
		rs.order[0] = nil
		rs.order = rs.order[1:]
		delete(rs.rq, e)
	}
}

// take takes the next queued reconcile of a task that is still active.
func (rs *reconciling) take() (reconcileJob, bool) {
	if rs.skipStale(); len(rs.order) == 0 {
		rs.order = nil // let a burst's backing array go
		return reconcileJob{}, false
	}
	e := rs.order[0]
	rs.order[0] = nil
	rs.order = rs.order[1:]
	idle := rs.rq[e]
	delete(rs.rq, e)
	streamed := e.run.streamed
	e.run.streamed = nil
	return reconcileJob{e: e, id: e.task.ID, sid: e.task.SessionID, rc: e.task.ResumeCount, run: runOf(e, idle), streamed: streamed}, true
}

// reconcile decides whether the run ended from a read of the task session's latest messages
// (runs the stream carried whole are decided by decideStreamed). A panic (in the Client or in
// deciding) ends the task in StatusError with the panic's value and stack.
func (m *Manager) reconcile(r reconcileJob) {
	e, rc, run, id := r.e, r.rc, r.run, r.id
	run.ServerStarted = m.cfg.serverStarted
	defer func() {
		if r := recover(); r != nil {
			m.cfg.logger.Error("asyncagents: panic while reconciling", "task", id, "panic", r)
			m.finish(e, rc, StatusError, "", fmt.Sprintf("asyncagents: panic while reconciling: %v\n%s", r, debug.Stack()))
		}
	}()

	ctx, cancel := m.bg.requestCtx()
	defer cancel()
	if r.sid == "" {
		return // no session yet: the task's start decides
	}
	msgs, err := m.client.Messages(ctx, r.sid, reconcileWindow)
	if errors.Is(err, opencode.ErrNotFound) {
		m.finish(e, rc, StatusCancelled, "", "session deleted")
		return
	}
	if err != nil {
		if m.bg.ctx.Err() == nil {
			m.cfg.logger.Warn("asyncagents: read task messages", "task", id, "err", err)
		}
		return // the poll reads it again
	}
	v := manager.Decide(msgs, run)
	if v.Outcome == manager.Unfinished {
		v = m.confirmUnfinished(e, run)
	}
	if v.Outcome == manager.Completed || v.Outcome == manager.Failed {
		m.settleUsage(ctx, e, rc, msgs)
		m.mu.Lock()
		if e.task.ResumeCount == rc {
			e.run.ended = v.Ended
		}
		m.mu.Unlock()
	}
	switch v.Outcome {
	case manager.Completed:
		m.finish(e, rc, StatusCompleted, v.Result, "")
	case manager.Failed:
		m.finish(e, rc, StatusError, "", v.Error)
	case manager.Unsent:
		m.unsent(e, rc)
	}
}

// decideStreamed decides the runs of jobs, which the stream carried whole, from their
// frames: the completed ones end under one lock, then their saves, the queued tasks they free
// and their follow-ups go out, up to endParallel at once (with the other reconcilers'). A run its
// frames do not show completed, or whose replay panics, is queued again, for a read; so is
// one whose end panics, if it is still active after the panic. Panics are logged.
func (m *Manager) decideStreamed(jobs []reconcileJob) {
	results := make([]string, len(jobs))
	done := make([]bool, len(jobs))
	n := 0
	for i := range jobs {
		if results[i], done[i] = fromStream(jobs[i], m.cfg.logger); done[i] {
			n++
			if jobs[i].e.isolated {
				m.settleWorktree(jobs[i].e, jobs[i].rc) // its changes, in the notification
			}
		}
	}
	// The stream carried the runs whole: their running usage counted every step.
	m.mirrors.decided.Add(int64(n)) // before the tasks show as completed
	ended := m.endStreamed(jobs, done, results)
	m.mirrors.decided.Add(int64(len(ended) - n))
	if len(ended) == 1 {
		m.afterFinish(ended[0])
		return
	}
	var wg sync.WaitGroup // a store on a network saves one task at a time: several at once
	for _, f := range ended {
		m.recon.ends <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() {
				<-m.recon.ends
				wg.Done()
			}()
			m.afterFinish(f)
		}()
	}
	wg.Wait()
}

// endParallel bounds the goroutines recording the ends of runs decided together (their
// saves, the queued tasks they free, their follow-ups), all reconcilers together.
const endParallel = reconcileBurst

// fromStream returns the result of r's run when its streamed frames hold a completed reply.
// A panic while replaying them is logged, and the run is read instead.
func fromStream(r reconcileJob, logger *slog.Logger) (result string, ok bool) {
	defer func() {
		if p := recover(); p != nil {
			logger.Error("asyncagents: panic while replaying a run", "task", r.id, "panic", p, "stack", string(debug.Stack()))
			result, ok = "", false
		}
	}()
	msgs := replay(r.streamed, r.run.Baseline)
	if msgs == nil {
		return "", false
	}
	v := manager.Decide(msgs, r.run)
	return v.Result, v.Outcome == manager.Completed
}

// endStreamed, under one lock, completes the tasks of the jobs marked done with their
// results and queues the others again, for a read (a job whose end panics is one of those,
// while its task is active); it returns what is left to do for the tasks it ended.
func (m *Manager) endStreamed(jobs []reconcileJob, done []bool, results []string) []finished {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ended []finished
	for i, r := range jobs {
		if done[i] {
			f, ok, panicked := m.endLocked(r, results[i])
			if ok {
				ended = append(ended, f)
			}
			if !panicked {
				continue
			}
		}
		if m.tasks.byID[r.id] == r.e && r.e.task.ResumeCount == r.rc && r.e.task.Status.Active() {
			m.recon.enqueue(r.e, r.run.Idle)
		}
	}
	return ended
}

// endLocked completes the task of job r with result, as finishLocked does; a panic is logged.
func (m *Manager) endLocked(r reconcileJob, result string) (f finished, ok, panicked bool) {
	defer func() {
		if p := recover(); p != nil {
			m.cfg.logger.Error("asyncagents: panic while ending a run", "task", r.id, "panic", p, "stack", string(debug.Stack()))
			f, ok, panicked = finished{}, false, true
		}
	}()
	f, ok = m.finishLocked(r.e, r.rc, StatusCompleted, result, "")
	return f, ok, false
}

// runOf is what a reconcile of e's current run passes to manager.Decide. m.mu must be held.
func runOf(e *entry, idle bool) manager.Run {
	return manager.Run{Baseline: e.run.baseline, SessionError: e.run.sessErr, Idle: idle, Prompt: e.task.PromptID}
}
