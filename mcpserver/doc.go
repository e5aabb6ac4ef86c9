// Package mcpserver lets OpenCode's own agents call the asyncagents tools: it serves the
// LLM tools of an [asyncagents.Manager] ([asyncagents.Tools]) as an MCP server over
// streamable HTTP, an [http.Handler] that a host mounts and registers with OpenCode.
//
// The model sees the tools as asyncagents_task, asyncagents_output, asyncagents_cancel,
// asyncagents_list, asyncagents_clear and asyncagents_merge (the Manager's tool prefix, which is also the name
// to register the server under). Each call runs the tool's handler for its caller: the
// session, message and agent that made it. OpenCode 1.18.33 does not tell an MCP server
// who calls, so the [Server] finds out from the _caller argument that the companion
// plugin ([Plugin]) adds, signs with the bridge's token, and the bridge checks, or by
// looking for the running tool part with the call's name and arguments; when that lookup
// finds several sessions making the same call at once it refuses the call with a text
// that asks the model to call again ([ErrAmbiguousCaller]). It never guesses, and, with
// a token, a model cannot name another session as the caller. The _meta.sessionID that
// OpenCode 2 sends is read only when the host turns [CallerFromMeta] on, for an MCP client
// it trusts to send the caller's own session: any client that holds the token can set it.
//
// While a call runs, the Server sends progress notifications, which keep OpenCode's 60 s
// MCP timeout from cutting a blocking output (up to 600 s); when OpenCode cancels a call,
// the handler's context ends. Handler errors reach the model as error results with their
// text.
//
// A host mounts the handler on a loopback listener, with a bearer token ([WithToken]),
// and registers it: in opencode.json, "mcp": {"asyncagents": RemoteConfig(url, token)},
// or at run time with [opencode.HTTPClient.AddMCP] for each directory. The plugin file
// (Plugin(prefix, WithTokenFile(path of the token))) goes to .opencode/plugin/ of the
// project (it needs OpenCode without --pure); without it the lookup alone finds callers,
// and refuses the rare identical concurrent calls. The handler refuses requests from web
// pages (Origin, Host), keeps a bounded number of MCP sessions and closes idle ones
// ([WithMaxSessions], [WithSessionTimeout]); OpenCode opens a new session when its own
// was closed.
//
// The OpenCode endpoints it reads: GET /session/{id}/message (the caller's tool part),
// GET /session/status (the busy sessions of each directory of [WithDirectories]).
//
// A Server is safe for concurrent use; it owns the goroutines of its calls, of the
// lookups' reads and of its MCP sessions, and Close ends them. It depends on the official
// Go MCP SDK (github.com/modelcontextprotocol/go-sdk); the root package asyncagents does
// not import this package.
package mcpserver
