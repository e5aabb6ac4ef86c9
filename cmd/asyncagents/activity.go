package main

import (
	"log/slog"
	"sync"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/truncate"
)

// maxLoggedError is how many characters of a task's error one log line carries.
const maxLoggedError = 200

// activity is what logActivity tells its notice of.
type activity int

const (
	activityEnded      activity = iota + 1 // a run ended
	activityPermission                     // the task's session waits for a new permission request
)

// logActivity logs one line for each launch and resume, run end and delivered notification
// of m's own tasks (not other hosts'), as its subscription delivers them, on a goroutine of
// its own until m is closed or stop is called; stop waits for it. A subscription that falls
// behind is replaced, and what happened meanwhile is told from the task's next change.
// notice, when not nil, is called on that goroutine for each run end and permission request.
func logActivity(m *asyncagents.Manager, log *slog.Logger, notice func(asyncagents.Task, activity)) (stop func(), err error) {
	sub, tasks, err := m.Subscribe(0)
	if err != nil {
		return nil, err
	}
	seen := map[string]seenTask{}
	for _, t := range tasks {
		seen[t.ID] = seenOf(t)
	}
	var mu sync.Mutex // guards sub, which the goroutine replaces and stop closes
	stopped, done := false, make(chan struct{})
	go func() {
		defer close(done)
		for s := sub; ; {
			for c := range s.Changes() {
				switch {
				case c.Remote:
				case c.Removed:
					delete(seen, c.Task.ID)
				default:
					seen[c.Task.ID] = logChange(log, seen[c.Task.ID], c.Task, notice)
				}
			}
			if s.Err() != asyncagents.ErrLagged {
				return
			}
			mu.Lock()
			var next *asyncagents.Subscription
			err := asyncagents.ErrClosed
			if !stopped {
				next, _, err = m.Subscribe(0)
			}
			if err == nil {
				sub, s = next, next
			}
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return func() {
		mu.Lock()
		stopped = true
		sub.Close()
		mu.Unlock()
		<-done
	}, nil
}

// seenTask is what logActivity last saw of a task.
type seenTask struct {
	known      bool
	active     bool
	resumes    int
	delivered  int
	permission string // the id of the permission request the session waits on
}

func seenOf(t asyncagents.Task) seenTask {
	s := seenTask{known: true, active: t.Status.Active(), resumes: t.ResumeCount}
	if t.Permission != nil {
		s.permission = t.Permission.ID
	}
	for _, n := range t.Notifications {
		if n.State == asyncagents.NotificationDelivered {
			s.delivered++
		}
	}
	return s
}

// logChange logs what changed of t since was, and returns what is seen now.
func logChange(log *slog.Logger, was seenTask, t asyncagents.Task, notice func(asyncagents.Task, activity)) seenTask {
	now := seenOf(t)
	id := t.DisplayID
	if id == "" {
		id = t.ID
	}
	switch {
	case now.active && (!was.known || now.resumes > was.resumes):
		what := "asyncagents: task launched"
		if now.resumes > 0 {
			what = "asyncagents: task resumed"
		}
		log.Info(what, "task", id, "parent", t.ParentSessionID, "agent", t.Agent, "description", t.Description)
	case was.active && !now.active:
		args := []any{"task", id, "status", t.Status, "took", t.Duration(t.Completed).Round(time.Second)}
		if t.Error != "" {
			if p, cut := truncate.Prefix(t.Error, maxLoggedError); cut {
				args = append(args, "error", p+"…")
			} else {
				args = append(args, "error", t.Error)
			}
		}
		log.Info("asyncagents: task ended", args...)
		if notice != nil {
			notice(t, activityEnded)
		}
	}
	if now.permission != "" && now.permission != was.permission && notice != nil {
		notice(t, activityPermission)
	}
	if now.delivered > was.delivered {
		log.Info("asyncagents: notification delivered", "task", id, "parent", t.ParentSessionID)
	}
	return now
}
