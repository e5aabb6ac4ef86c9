// Package opencodetest is test support for code that uses OpenCode through
// [opencode.Client]: a real `opencode serve` process ([Server]) driven by a scripted
// OpenAI-compatible model ([Model]), an in-memory OpenCode ([FakeClient]) scripted the same
// way, and a conformance check ([TestClient]) that holds both to the same behaviour. An
// [HTTPServer] serves any Client, the fake included, over OpenCode's HTTP API, so that code
// can be tested through [opencode.HTTPClient] as hosts use it; a [Proxy] stands between a
// client and a server and injects network faults.
//
// No language model is reachable in the test environment, so the model is scripted: queued
// replies, a [ScriptFunc], or directives in the prompt text (RUN:, TOOL:, QUOTE:, SLEEP:,
// FAIL:, THINK; see [Directive]). With a Server everything else — sessions, the agent loop,
// tool execution, compaction, the event stream — is the real server. A FakeClient copies the
// real server's observed behaviour for what asyncagents uses (sessions, messages, prompts,
// the agent loop with a simulated bash tool, abort, status, agents, permission requests,
// events), runs in memory and, with a fixed clock, repeats exactly; it also injects faults
// (failed calls, dropped event streams) that a real server cannot be made to produce.
//
// The server binary is $OPENCODE_BIN, or .cache/opencode/node_modules/.bin/opencode in the
// module root, installed by `make opencode` from the pinned npm package opencode-ai. Start
// and Shared.Get skip a test when the binary is missing, except under CI=true, where they
// fail it. Each Server has its own HOME, XDG folders and project folder; it writes nothing
// outside them. Server.Close stops the whole process group by its id (the process, on
// Windows).
//
// Model, Server, FakeClient, HTTPServer and Proxy are safe for concurrent use. A Server owns
// the goroutine that waits for its process; a FakeClient owns the goroutines that run its
// sessions' agent loops; an HTTPServer and a Proxy own the goroutines that serve their
// connections and relay their event streams. Close ends them.
package opencodetest
