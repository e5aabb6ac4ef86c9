package mcpserver_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/asyncagents/asyncagents/mcpserver"
	"github.com/asyncagents/asyncagents/opencode"
)

// counting is an opencode.Client that counts the reads the bridge makes.
type counting struct {
	opencode.Client
	status, messages atomic.Int64
}

func (c *counting) SessionStatus(ctx context.Context, dir string) (map[string]opencode.SessionStatus, error) {
	c.status.Add(1)
	return c.Client.SessionStatus(ctx, dir)
}

func (c *counting) MessagesBefore(ctx context.Context, sid string, limit int, before string) ([]opencode.Message, string, error) {
	c.messages.Add(1)
	return c.Client.MessagesBefore(ctx, sid, limit, before)
}

func (c *counting) reset() int64 { return c.status.Swap(0) + c.messages.Swap(0) }

// B-1: what an unmatched call costs OpenCode: with five busy sessions, one call whose
// running part is nowhere, then eight such calls at once. (Before the reads were shared and
// spaced out: 72 and 546 requests.)
func TestLookupRequests(t *testing.T) {
	t.Parallel()
	b := newBridge(t)
	for range 5 {
		b.running(t, "asyncagents_list", `{"status":"running"}`)
	}
	cc := &counting{Client: b.fake}
	srv, err := mcpserver.New(b.m, cc)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	defer srv.Close()
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := c.Connect(ctxT(t, 10*time.Second), &mcp.StreamableClientTransport{Endpoint: hs.URL, HTTPClient: &http.Client{}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	call := func() {
		res, err := cs.CallTool(ctxT(t, 10*time.Second), &mcp.CallToolParams{Name: "list", Arguments: raw(`{"status":"completed"}`)})
		if err != nil || !res.IsError {
			t.Errorf("unmatched call: %v %v", res, err)
		}
	}
	start := time.Now()
	call()
	one := cc.reset()
	t.Logf("one unmatched call: %d requests in %v", one, time.Since(start))
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() { defer wg.Done(); call() }()
	}
	wg.Wait()
	eight := cc.reset()
	t.Logf("eight at once: %d requests", eight)
	// Six reads of the sessions (0.1, 0.2, 0.4, 0.8, 1.6 and 2 s after the call arrived),
	// each GET /session/status and one page of messages of each of the five busy sessions.
	if one > 6*6 {
		t.Errorf("one unmatched call: %d requests, want at most 36", one)
	}
	// Concurrent lookups share the reads: at most two per round (one that began before a
	// lookup arrived, then the one it shares).
	if eight > 2*6*6 {
		t.Errorf("eight unmatched calls at once: %d requests, want at most 72", eight)
	}
}
