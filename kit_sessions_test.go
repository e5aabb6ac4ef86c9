package asyncagents_test

import (
	"sync"

	"github.com/asyncagents/asyncagents"
)

// sessions holds the session of every task a test passed to track, by task id.
var sessions sync.Map

// track records the session of task and returns the task's id, for the tests that keep task
// ids and later need the sessions the tasks run in (sessionOf).
func track(task asyncagents.Task) string {
	sessions.Store(task.ID, task.SessionID)
	return task.ID
}

// sessionOf returns the session of a task passed to track, or id itself (a session).
func sessionOf(id string) string {
	if s, ok := sessions.Load(id); ok {
		return s.(string)
	}
	return id
}

// sessionsOf returns sessionOf of each of ids.
func sessionsOf(ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = sessionOf(id)
	}
	return out
}
