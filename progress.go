package asyncagents

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/asyncagents/asyncagents/hints"
	"github.com/asyncagents/asyncagents/opencode"
)

// Suggested values of WithProgressDigest (asyncagents serve's defaults).
const (
	// DefaultDigestAfter is how long a task runs before its parent's digest lists it.
	DefaultDigestAfter = 2 * time.Minute
	// DefaultDigestEvery is the least time between two digests to one parent.
	DefaultDigestEvery = 5 * time.Minute
	// maxDigestTasks is how many tasks a digest lists before "and n more".
	maxDigestTasks = 10
)

// lastID returns the id of the last digest posted to parent, "" for none.
func (d *digests) lastID(parent string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.last[parent].id
}

// A parent whose tasks run long is shown their progress: a digest, one short synthetic
// message posted without reply (POST /session/{id}/message, noReply), listing each of its
// tasks running longer than digestAfter with its elapsed time, tool calls, last tool, and
// what it used so far. It is posted only while the parent is idle after a turn of its model —
// its newest message is a completed reply, not a digest or a notification — so it starts no
// turn, and OpenCode gives it no step of a turn under way; the parent's model reads it at its
// next turn. So at most one digest lies between two turns of the parent, and at most one per
// digestEvery: the parent's context grows by one digest (under 1 KB for 10 tasks) a turn at
// most. The digests' ids are the Manager's, newer than the parent's newest message, and
// count as the Manager's own for the turn logic: a digest is not a turn that saw a
// notification.

// digests is what the Manager knows of the digests it posted, by parent.
type digests struct {
	mu   sync.Mutex
	last map[string]digest
}

type digest struct {
	id string
	at time.Time
}

// digestLoop posts the parents' digests until the Manager closes, looking every
// digestEvery/5 (at most every 200 ms): to the parents of tasks running longer than
// digestAfter whose notifications are all delivered with no turn owed (those come first: the
// turn they ask for shows the tasks), and whose last digest is digestEvery old.
func (m *Manager) digestLoop() {
	every := max(m.cfg.digestEvery/5, 200*time.Millisecond)
	for {
		select {
		case <-m.bg.stopc:
			return
		case <-m.bg.clock.After(every):
		}
		now := m.bg.now()
		due := map[string][]Task{}
		m.mu.Lock()
		for _, e := range m.tasks.byID {
			t := &e.task
			if t.Status.Active() && now.Sub(t.Started) >= m.cfg.digestAfter {
				due[t.ParentSessionID] = append(due[t.ParentSessionID], m.viewLocked(e))
			}
		}
		for parent := range due {
			if ob := m.notes.outboxes[parent]; ob != nil && (len(ob.queue) > 0 || len(ob.owed) > 0 || ob.inFlight) {
				delete(due, parent)
			}
		}
		m.mu.Unlock()
		for parent, tasks := range m.progress.due(due, now, m.cfg.digestEvery) {
			m.bg.safely("posting a progress digest", func() {
				ctx, cancel := m.bg.requestCtx()
				defer cancel()
				m.progress.post(ctx, m.client, &m.notes.heads, m.cfg.logger, parent, tasks, now)
			})
		}
	}
}

// due returns the parents of candidates whose last digest is at least every old at now.
func (d *digests) due(candidates map[string][]Task, now time.Time, every time.Duration) map[string][]Task {
	d.mu.Lock()
	defer d.mu.Unlock()
	for parent := range candidates {
		if last, ok := d.last[parent]; ok && now.Sub(last.at) < every {
			delete(candidates, parent)
		}
	}
	return candidates
}

// post posts the digest of tasks to parent at now when the parent is idle after a turn of
// its model (its newest message is a completed reply; GET /session/{id}/message?limit=1),
// and raises the parent's head to it.
func (d *digests) post(ctx context.Context, client opencode.Client, h *heads, logger *slog.Logger, parent string, tasks []Task, now time.Time) {
	last, err := client.Messages(ctx, parent, 1)
	if err != nil || len(last) == 0 {
		return
	}
	newest := last[0].Info
	if newest.Role != opencode.RoleAssistant || newest.Time.Completed == 0 {
		return // busy, or no turn since the last digest or notification
	}
	slices.SortFunc(tasks, func(a, b Task) int { return a.Started.Compare(b.Started) })
	id := opencode.NewMessageID(now, newest.ID)
	agent := tasks[0].ParentAgent
	if err := postNoReply(ctx, client, parent, opencode.PromptRequest{MessageID: id, Agent: agent,
		Parts: []opencode.TextPartInput{opencode.NewSyntheticText(DigestText(tasks, now))}}); err != nil {
		logger.Warn("asyncagents: post a progress digest", "parent", parent, "err", err)
		return
	}
	h.raise(parent, id, 0)
	d.mu.Lock()
	if d.last == nil {
		d.last = map[string]digest{}
	}
	d.last[parent] = digest{id: id, at: now}
	d.mu.Unlock()
}

// DigestText is the progress digest of tasks a parent's model reads: a line for the digest,
// then one per task (at most 10, then "and n more"), oldest first:
//
//	Background tasks still running (progress, not results):
//	- tsk_3f2a91c0 "scan the logs": 4m 12s, 17 tool calls, last "bash", 52.1k tokens, $0.1200
//
// Descriptions and tool names are quoted ([hints.Quote]): they are the tasks' text.
func DigestText(tasks []Task, now time.Time) string {
	var b strings.Builder
	b.WriteString("Background tasks still running (progress, not results):")
	for i, t := range tasks {
		if i == maxDigestTasks {
			fmt.Fprintf(&b, "\n- and %d more", len(tasks)-i)
			break
		}
		fmt.Fprintf(&b, "\n- %s %s: %s, %d tool calls", cmp.Or(t.DisplayID, t.ID), hints.Quote(t.Description), hints.Duration(t.Duration(now)), t.Progress.ToolCalls)
		if n := len(t.Progress.LastTools); n > 0 {
			b.WriteString(", last " + hints.Quote(t.Progress.LastTools[n-1]))
		}
		if !t.Usage.IsZero() {
			b.WriteString(", " + t.Usage.String())
		}
	}
	return b.String()
}
