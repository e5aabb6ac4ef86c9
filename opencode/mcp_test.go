package opencode_test

import (
	"encoding/json"
	"errors"
	"net"
	"testing"

	"github.com/asyncagents/asyncagents/opencode"
)

// The MCP endpoints of HTTPClient against the real server: add (instance-scoped), status,
// connect, disconnect, and the errors. A server that answers MCP is connected in the
// mcpserver package's end-to-end tests.
func TestRealServerMCP(t *testing.T) {
	srv := sharedServer(t)
	c := srv.Client()
	ctx := ctxT(t)

	// A loopback port nobody listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String() + "/mcp"
	l.Close()
	cfg := opencode.MCPConfig{Type: "remote", URL: url, OAuth: json.RawMessage("false"),
		Headers: map[string]string{"Authorization": "Bearer x"}, Timeout: 5000}
	st, err := c.AddMCP(ctx, "", "probe-mcp", cfg)
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != opencode.MCPFailed || st.Error == "" {
		t.Fatalf("AddMCP = %+v", st)
	}
	all, err := c.MCPStatus(ctx, "")
	if err != nil || all["probe-mcp"].Status != opencode.MCPFailed {
		t.Fatalf("MCPStatus = %v, %v", all, err)
	}
	// Runtime servers are per instance: another directory does not see it.
	other, err := c.MCPStatus(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := other["probe-mcp"]; ok {
		t.Fatalf("another directory sees the server: %v", other)
	}
	if err := c.ConnectMCP(ctx, "", "probe-mcp"); err != nil { // answers true, still failed
		t.Fatal(err)
	}
	if err := c.DisconnectMCP(ctx, "", "probe-mcp"); err != nil {
		t.Fatal(err)
	}
	if all, err := c.MCPStatus(ctx, srv.Directory); err != nil || all["probe-mcp"].Status != opencode.MCPDisabled {
		t.Fatalf("after disconnect: %v, %v", all, err)
	}
	for _, err := range []error{c.ConnectMCP(ctx, "", "no-such-mcp"), c.DisconnectMCP(ctx, "", "no-such-mcp")} {
		// McpServerNotFoundError, {"_tag", "name": <the server>, "message"}.
		var apiErr *opencode.APIError
		if !errors.Is(err, opencode.ErrNotFound) || !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Name != "McpServerNotFoundError" {
			t.Errorf("unknown server: %v", err)
		}
	}
	_, err = c.AddMCP(ctx, "", "bad", opencode.MCPConfig{Type: "bogus"})
	var apiErr *opencode.APIError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 {
		t.Fatalf("bad config: %v", err)
	}
}
