// Package asyncagents runs sub-agents in the background on an OpenCode server
// (`opencode serve`) for Go agent hosts.
//
// A host creates a Manager with an opencode.Client and launches tasks on behalf of a
// parent session: each task runs in its own child session, fresh or forked with the
// parent's context (package fork), while the parent keeps working. When a task ends the
// parent session receives a notification (package hints). The host — or the parent's model
// through the five LLM tools of Tools — reads the output (at once, or blocking with a
// timeout), resumes a task with a follow-up, cancels it, lists the caller's tasks and
// clears them.
//
//	client, _ := opencode.NewHTTPClient("http://127.0.0.1:4096")
//	m, _ := asyncagents.New(client)
//	defer m.Close(ctx)
//	t, _ := m.Launch(ctx, asyncagents.LaunchInput{Caller: caller, Description: "scan",
//		Prompt: "Find the TODOs", Agent: "general", Fork: true})
//	out, _ := m.Output(ctx, caller, t.ID, asyncagents.OutputOptions{Block: true})
//
// This package re-exports the task model of package manager and adds the LLM tool set.
// A Manager is safe for concurrent use; it owns its goroutines and Close stops them.
// Requirement ids in comments (T-4, F-12, …) refer to the project's SPEC.md.
package asyncagents
