package asyncagents

import (
	"context"
	"encoding/json"
	"hash/fnv"
)

// The change feed of other hosts' tasks: with a HandoffStore, while someone subscribes,
// watchRemote reads the stored tasks that other hosts hold, every second (from leaseLoop),
// and publishes those that are new, changed or gone since the last read.

// watchRemote publishes the changes of the tasks other hosts hold since its last call, when
// the Manager has subscribers; it forgets what it saw when it has none.
func (h *sharedHosts) watchRemote(ctx context.Context) {
	m, hs := h.m, h.hs
	m.mu.Lock()
	watched := len(m.feed.subs) > 0
	if !watched {
		m.feed.remote = nil
	}
	m.mu.Unlock()
	if !watched {
		return
	}
	stored, err := hs.Tasks(ctx, "")
	if err != nil {
		m.cfg.logger.Warn("asyncagents: read other hosts' tasks for the change feed", "err", err)
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.feed.remote = m.feed.remoteSeen(stored, m.tasks.has, true)
}

// remoteSeen returns what of stored other hosts hold (those that local does not report as
// here), and, with publish, publishes the changes since f.remote.
func (f *feed) remoteSeen(stored []Task, local func(id string) bool, publish bool) map[string]remoteSeen {
	seen := make(map[string]remoteSeen, len(stored))
	for _, t := range stored {
		if local(t.ID) {
			continue // here: the Manager's own changes publish it
		}
		sum := fingerprint(t)
		t.DisplayID = t.ID
		seen[t.ID] = remoteSeen{sum: sum, task: t}
		if !publish {
			continue
		}
		if was, ok := f.remote[t.ID]; !ok || was.sum != sum {
			f.publish(t, false)
		}
	}
	for id, was := range f.remote {
		if _, ok := seen[id]; publish && !ok && !local(id) { // gone from the store: cleared
			f.publish(was.task, true)
		}
	}
	return seen
}

// remoteSeen is what watchRemote last saw of a task another host holds.
type remoteSeen struct {
	sum  uint64
	task Task
}

// fingerprint hashes t's JSON form, its DisplayID aside.
func fingerprint(t Task) uint64 {
	t.DisplayID = ""
	b, _ := json.Marshal(t)
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}
