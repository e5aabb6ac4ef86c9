// Package opencode is the part of the OpenCode server API that asyncagents uses: the [Client]
// interface the Manager depends on, OpenCode's wire types ([Session], [Message], [Part],
// [ToolState], [Event]), and [HTTPClient], an implementation of Client for `opencode serve`.
//
// Names follow OpenCode: a session holds messages ({info, parts}); a part is a union on
// its type (text, tool, file, reasoning, compaction, …); a tool part has a state
// (pending, running, completed, error). Unknown part types and fields are kept as raw JSON
// (Part.Raw), never rejected, because the server adds fields across versions.
//
// HTTPClient is safe for concurrent use and starts no goroutines of its own. An EventStream
// is ranged over by one goroutine and closed by any; it ends with one error that says why
// (io.EOF, ErrStreamStalled, net.ErrClosed after Close, the context's error). Errors from the
// server are *APIError values that match ErrNotFound (OpenCode's NotFoundError) and
// ErrUnauthorized with errors.Is.
//
// Package opencodetest has an in-memory Client (FakeClient), a launcher for the real server
// and a conformance check (TestClient) that holds both to the same behaviour.
//
// The behaviour described in doc comments was observed on opencode 1.18.33.
package opencode
