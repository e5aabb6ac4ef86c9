// Package manager runs background tasks — sub-agents in child sessions of an OpenCode
// server — and tracks them until they end (SPEC §3): launch (fresh, or forked with the
// parent's context from package fork), completion detection from the event stream with a
// status-poll fallback, non-blocking and blocking output, cancel, list, clear, and the
// parent notification of package hints when a task ends.
//
// A Manager is safe for concurrent use. It owns a constant number of goroutines, whatever
// the number of tasks: one event subscription (GET /global/event, reconnected with
// backoff), one status poller, a few reconcilers that read the messages of sessions that
// went idle, and one notifier. Close stops them and waits. A panic in one of them is
// recovered and recorded as the task's error (or logged); it never reaches the host.
//
// Every operation that fails returns an error matching one of the Err… values with
// errors.Is and leaves every task unchanged.
package manager
