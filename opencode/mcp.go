package opencode

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
)

// MCPConfig is one MCP server of OpenCode's configuration: a value of the "mcp" object of
// opencode.json (keyed by the server's name) and the "config" of POST /mcp. Type "remote"
// reaches a server at URL (streamable HTTP, falling back to SSE) with Headers on every
// request; type "local" runs Command in Cwd (default: the instance directory) with
// Environment added to OpenCode's own. OpenCode names the server's tools
// "<name>_<tool>".
type MCPConfig struct {
	Type        string            `json:"type"`                  // "remote" or "local"
	URL         string            `json:"url,omitempty"`         // remote
	Headers     map[string]string `json:"headers,omitempty"`     // remote
	Command     []string          `json:"command,omitempty"`     // local: program and arguments
	Cwd         string            `json:"cwd,omitempty"`         // local
	Environment map[string]string `json:"environment,omitempty"` // local
	// OAuth is a remote server's OAuth configuration object, or the JSON false to turn
	// OAuth discovery off (a server with a static bearer token wants false). Empty leaves it
	// to OpenCode, which then probes the server for OAuth.
	OAuth json.RawMessage `json:"oauth,omitempty"`
	// Enabled false keeps the server configured but not connected; nil means enabled.
	Enabled *bool `json:"enabled,omitempty"`
	// Timeout is how long, in milliseconds, a tool call may go without an answer or a
	// progress notification before OpenCode gives it up (the call's part ends with "MCP
	// error -32001: Request timed out"). 0 leaves OpenCode's default, 60 000 for tool calls.
	Timeout int `json:"timeout,omitempty"`
}

// MCPStatus is the state of one MCP server of an instance (GET /mcp). Error says why for
// [MCPFailed] and [MCPNeedsClientRegistration].
type MCPStatus struct {
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
}

// Values of MCPStatus.Status.
const (
	MCPConnected               = "connected"
	MCPDisabled                = "disabled" // configured with enabled false, or disconnected
	MCPFailed                  = "failed"   // e.g. "SSE error: Unable to connect. …"
	MCPNeedsAuth               = "needs_auth"
	MCPNeedsClientRegistration = "needs_client_registration"
)

func directoryQuery(directory string) url.Values {
	q := url.Values{}
	if directory != "" {
		q.Set("directory", directory)
	}
	return q
}

func mcpPath(name, rest string) string { return "/mcp/" + url.PathEscape(name) + rest }

// AddMCP adds an MCP server named name to a directory's instance (empty: the client's) and
// connects it (POST /mcp {name, config}), replacing one of the same name. It returns the
// server's status once the connection attempt is over: a server that cannot be reached is
// [MCPFailed] with the reason, not an error. The server is not written to opencode.json
// and is gone when the OpenCode server restarts; other directories' instances do not see
// it. The tools are offered to the model from the next step on. A config OpenCode rejects
// fails with an [*APIError] of status 400.
func (c *HTTPClient) AddMCP(ctx context.Context, directory, name string, cfg MCPConfig) (MCPStatus, error) {
	body := struct {
		Name   string    `json:"name"`
		Config MCPConfig `json:"config"`
	}{name, cfg}
	st := map[string]MCPStatus{}
	if err := c.do(ctx, http.MethodPost, "/mcp", directoryQuery(directory), body, &st); err != nil {
		return MCPStatus{}, err
	}
	s, ok := st[name]
	if !ok {
		return MCPStatus{}, fmt.Errorf("opencode: POST /mcp: no status for %q in the answer", name)
	}
	return s, nil
}

// ConnectMCP connects (again) a configured MCP server of a directory's instance (empty: the
// client's), as POST /mcp/{name}/connect does: the way to reach a remote server that was
// not listening when the instance started. OpenCode answers true even when the connection
// fails; [HTTPClient.MCPStatus] tells. An unknown name matches [ErrNotFound]
// (McpServerNotFoundError).
func (c *HTTPClient) ConnectMCP(ctx context.Context, directory, name string) error {
	return c.do(ctx, http.MethodPost, mcpPath(name, "/connect"), directoryQuery(directory), nil, nil)
}

// DisconnectMCP disconnects an MCP server of a directory's instance (empty: the client's)
// (POST /mcp/{name}/disconnect); its status becomes [MCPDisabled] and its tools are no
// longer offered. An unknown name matches [ErrNotFound].
func (c *HTTPClient) DisconnectMCP(ctx context.Context, directory, name string) error {
	return c.do(ctx, http.MethodPost, mcpPath(name, "/disconnect"), directoryQuery(directory), nil, nil)
}

// MCPStatus returns the MCP servers of a directory's instance (empty: the client's) and
// their states, by name (GET /mcp).
func (c *HTTPClient) MCPStatus(ctx context.Context, directory string) (map[string]MCPStatus, error) {
	st := map[string]MCPStatus{}
	if err := c.do(ctx, http.MethodGet, "/mcp", directoryQuery(directory), nil, &st); err != nil {
		return nil, err
	}
	return st, nil
}
