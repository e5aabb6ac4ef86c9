// Package opencodetest runs OpenCode for tests: a scripted OpenAI-compatible model server
// (Model) and a real `opencode serve` process (Server) whose project config points at it.
//
// No language model is reachable in the test environment, so the model is scripted: queued
// replies, a ScriptFunc, or directives in the prompt text (RUN:, TOOL:, QUOTE:, SLEEP:,
// FAIL:, THINK). Everything else — sessions, the agent loop, tool execution, compaction,
// the event stream — is the real server.
//
// The server binary is $OPENCODE_BIN, or .cache/opencode/node_modules/.bin/opencode in the
// module root, installed by `make opencode` from the pinned npm package opencode-ai. Start
// and Shared.Get skip a test when the binary is missing, except under CI=true, where they
// fail it. Each Server has its own HOME, XDG folders and project folder; it writes nothing
// outside them. Server.Close stops the whole process group by its id.
//
// Model and Server are safe for concurrent use. A Server owns the goroutine that waits for
// its process; Close ends it.
package opencodetest
