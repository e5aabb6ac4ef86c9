// Package manager holds the bookkeeping behind [asyncagents.Manager] that needs no I/O:
// a [Registry] of task ids per parent session (launch order, display ids, id-prefix
// resolution) and the lifecycle rule [Decide], which reads a task session's latest
// messages and says whether its run is still going, completed or failed.
//
// Package asyncagents owns the task types, the goroutines and the OpenCode requests, and
// drives this package; most hosts never import it. It is here for hosts that build their own
// task runner on the same rules.
//
// Nothing in this package is safe for concurrent use without the caller's lock, and nothing
// starts a goroutine.
//
// [asyncagents.Manager]: https://pkg.go.dev/github.com/asyncagents/asyncagents#Manager
package manager
