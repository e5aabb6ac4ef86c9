// Package opencode is the part of the OpenCode server API that asyncagents uses: the Client
// interface the Manager depends on, OpenCode's wire types (Session, Message, Part,
// ToolState, events), and HTTPClient, an implementation of Client for `opencode serve`.
//
// Names follow OpenCode: a session holds messages ({info, parts}); a part is a union on
// its type (text, tool, file, reasoning, compaction, …); a tool part has a state
// (pending, running, completed, error). Unknown part types and fields are kept as raw JSON
// (Part.Raw), never rejected, because the server adds fields across versions.
//
// HTTPClient is safe for concurrent use and starts no goroutines of its own; an EventStream
// is read by one goroutine and closed by any. Errors from the server are *APIError values
// that match ErrNotFound (OpenCode's NotFoundError) and ErrUnauthorized with errors.Is.
//
// The behaviour described in doc comments was observed on opencode 1.18.33.
package opencode
