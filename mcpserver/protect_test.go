package mcpserver_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents/mcpserver"
)

const initializeBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`

// send sends a request to the bridge with the MCP headers, the token when given, and hdr
// ("Host" sets the request's host); it returns the response, its body read and closed.
func (b *bridge) send(t *testing.T, method, body, token string, hdr map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t, 10*time.Second), method, b.http.URL, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// B (issue 9): a request a web page may have sent — an Origin that is not allowed (by
// default every one), no Origin but a Sec-Fetch-Site of another site, a Host that is not a
// loopback name on a loopback connection — is answered 403 before anything else, the
// token check included; OpenCode's requests (no Origin, a loopback Host) go through.
func TestBrowserRequestsRefused(t *testing.T) {
	t.Parallel()
	b := newBridge(t, mcpserver.WithAllowedOrigins("http://localhost:6274", "https://Inspector.example"))
	self := b.http.URL // http://127.0.0.1:port
	port := strings.TrimPrefix(self, "http://127.0.0.1")
	for _, tc := range []struct {
		name   string
		method string
		token  string
		hdr    map[string]string
		want   int
	}{
		{"OpenCode", http.MethodPost, testToken, nil, http.StatusOK},
		{"another origin", http.MethodPost, testToken, map[string]string{"Origin": "https://evil.example"}, http.StatusForbidden},
		{"another origin, no token", http.MethodPost, "", map[string]string{"Origin": "https://evil.example"}, http.StatusForbidden},
		{"the bridge's own origin", http.MethodPost, testToken, map[string]string{"Origin": self}, http.StatusForbidden},
		{"null origin", http.MethodPost, testToken, map[string]string{"Origin": "null"}, http.StatusForbidden},
		{"another origin, GET", http.MethodGet, testToken, map[string]string{"Origin": "https://evil.example", "Mcp-Session-Id": "x"}, http.StatusForbidden},
		{"another origin, DELETE", http.MethodDelete, testToken, map[string]string{"Origin": "https://evil.example", "Mcp-Session-Id": "x"}, http.StatusForbidden},
		{"allowed origin", http.MethodPost, testToken, map[string]string{"Origin": "http://localhost:6274"}, http.StatusOK},
		{"allowed origin, other case", http.MethodPost, testToken, map[string]string{"Origin": "https://inspector.example"}, http.StatusOK},
		{"allowed host, other port", http.MethodPost, testToken, map[string]string{"Origin": "http://localhost:6275"}, http.StatusForbidden},
		{"cross-site fetch without Origin", http.MethodPost, testToken, map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		{"same-site fetch without Origin", http.MethodPost, testToken, map[string]string{"Sec-Fetch-Site": "same-site"}, http.StatusForbidden},
		{"fetch typed by the user", http.MethodPost, testToken, map[string]string{"Sec-Fetch-Site": "none"}, http.StatusOK},
		{"rebound name", http.MethodPost, testToken, map[string]string{"Host": "evil.example" + port}, http.StatusForbidden},
		{"rebound name, no token", http.MethodPost, "", map[string]string{"Host": "evil.example" + port}, http.StatusForbidden},
		{"rebound name without port", http.MethodPost, testToken, map[string]string{"Host": "evil.example"}, http.StatusForbidden},
		{"localhost", http.MethodPost, testToken, map[string]string{"Host": "localhost" + port}, http.StatusOK},
		{"::1", http.MethodPost, testToken, map[string]string{"Host": "[::1]" + port}, http.StatusOK},
		{"no token", http.MethodPost, "", nil, http.StatusUnauthorized},
	} {
		if resp := b.send(t, tc.method, initializeBody, tc.token, tc.hdr); resp.StatusCode != tc.want {
			t.Errorf("%s: HTTP %d, want %d", tc.name, resp.StatusCode, tc.want)
		}
	}
	if got := b.logs.find("mcpserver: request refused"); len(got) != 12 {
		t.Errorf("%d refusals logged, want 12", len(got))
	}
}
