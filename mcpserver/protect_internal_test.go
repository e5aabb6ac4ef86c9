package mcpserver

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// B (issue 9): the MCP SDK's own DNS-rebinding protection (DisableLocalhostProtection
// false) is on in the bridge's SDK handler: served directly, without the bridge's checks,
// it still answers 403 to a Host that is not a loopback name over a loopback connection.
func TestSDKHostProtection(t *testing.T) {
	fake := opencodetest.NewFakeClient()
	defer fake.Close()
	m, err := asyncagents.New(fake)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	s, err := New(m, fake)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	hs := httptest.NewServer(s.http) // the SDK's handler alone
	defer hs.Close()
	for host, want := range map[string]int{"evil.example": http.StatusForbidden, "evil.example:80": http.StatusForbidden,
		strings.TrimPrefix(hs.URL, "http://"): http.StatusOK, "localhost": http.StatusOK} {
		req, _ := http.NewRequest(http.MethodPost, hs.URL, strings.NewReader(
			`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
		req.Host = host
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := hs.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Host %s: HTTP %d, want %d", host, resp.StatusCode, want)
		}
	}
}
