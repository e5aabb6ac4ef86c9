package opencode_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents/opencode"
)

func TestPartKeepsUnknownTypesAndFields(t *testing.T) {
	in := `{"type":"hologram","id":"prt_1","beam":{"x":1},"text":"t"}`
	var p opencode.Part
	if err := json.Unmarshal([]byte(in), &p); err != nil {
		t.Fatal(err)
	}
	if p.Type != "hologram" || p.Text != "t" {
		t.Fatalf("decoded %+v", p)
	}
	out, err := json.Marshal(p)
	if err != nil || string(out) != in {
		t.Fatalf("round trip = %s, %v", out, err)
	}
	built, _ := json.Marshal(opencode.Part{Type: "text", Text: "x"})
	if !strings.Contains(string(built), `"text":"x"`) {
		t.Fatalf("built part = %s", built)
	}
}

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "shared", "fixtures", "opencode-1.18.33", name))
	if err != nil {
		t.Skipf("shared fixtures not available: %v", err)
	}
	return b
}

func TestDecodeCapturedSessions(t *testing.T) {
	for _, name := range []string{"small.json", "large.json", "compacted.json", "errors.json", "events-messages.json"} {
		t.Run(name, func(t *testing.T) {
			var msgs []opencode.Message
			if err := json.Unmarshal(fixture(t, name), &msgs); err != nil {
				t.Fatal(err)
			}
			var summaries, compacted, failedExit, errored int
			for _, m := range msgs {
				if m.Info.IsSummary() {
					summaries++
				}
				if m.Info.Error != nil && m.Info.Error.Message() == "" {
					t.Errorf("error without message: %+v", m.Info.Error)
				}
				for _, p := range m.Parts {
					if p.Type != opencode.PartTool {
						continue
					}
					if p.State.Time.Compacted != 0 {
						compacted++
					}
					if code, ok := p.State.ExitCode(); ok && code != 0 {
						failedExit++
					}
					if p.State.Status == opencode.ToolError {
						errored++
					}
				}
			}
			switch name {
			case "compacted.json":
				if summaries != 2 || compacted != 4 {
					t.Errorf("summaries=%d compacted=%d, want 2 and 4", summaries, compacted)
				}
			case "large.json":
				if failedExit == 0 || errored != 1 {
					t.Errorf("failed exits=%d error parts=%d", failedExit, errored)
				}
			}
		})
	}
}

func TestAPIErrorShapes(t *testing.T) {
	cases := []struct {
		status   int
		body     string
		name     string
		message  string
		notFound bool
	}{
		{404, `{"name":"NotFoundError","data":{"message":"Session not found: ses_x"}}`, "NotFoundError", "Session not found: ses_x", true},
		{400, `{"_tag":"BadRequest"}`, "BadRequest", "", false},
		{404, `{"_tag":"PermissionNotFoundError","requestID":"per_1","message":"Permission request not found: per_1"}`, "PermissionNotFoundError", "Permission request not found: per_1", true},
		{404, `{"_tag":"McpServerNotFoundError","name":"no-such-mcp","message":"MCP server not found: no-such-mcp"}`, "McpServerNotFoundError", "MCP server not found: no-such-mcp", true},
		{500, `{"name":"UnknownError","data":{"message":"Unexpected server error.","ref":"err_1"}}`, "UnknownError", "Unexpected server error.", false},
		{401, ``, "", "", false},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprint(tc.status, tc.name), func(t *testing.T) {
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tc.status)
				io.WriteString(w, tc.body)
			}))
			defer ts.Close()
			c, err := opencode.NewHTTPClient(ts.URL)
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.GetSession(context.Background(), "ses_x")
			var ae *opencode.APIError
			if !errors.As(err, &ae) {
				t.Fatalf("err = %v", err)
			}
			if ae.StatusCode != tc.status || ae.Name != tc.name || ae.Message != tc.message || string(ae.Body) != tc.body {
				t.Errorf("APIError = %+v", ae)
			}
			if errors.Is(err, opencode.ErrNotFound) != tc.notFound {
				t.Errorf("errors.Is(ErrNotFound) = %v", !tc.notFound)
			}
			if errors.Is(err, opencode.ErrUnauthorized) != (tc.status == 401) {
				t.Errorf("errors.Is(ErrUnauthorized) wrong for %d", tc.status)
			}
		})
	}
}

func TestNewHTTPClientValidates(t *testing.T) {
	for _, u := range []string{"", "localhost:4096", "ftp://x", "http://"} {
		if _, err := opencode.NewHTTPClient(u); err == nil {
			t.Errorf("NewHTTPClient(%q) accepted", u)
		}
	}
	if _, err := opencode.NewHTTPClient("http://127.0.0.1:1", opencode.WithStallTimeout(0)); err == nil {
		t.Error("zero stall timeout accepted")
	}
}

// sseServer serves the given frames on /global/event, then keeps the stream open silently
// until the client goes away.
func sseServer(frames ...string) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, f := range frames {
			fmt.Fprintf(w, "data: %s\n\n", f)
		}
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
}

func TestEventStreamDecodesFramesAndDetectsStall(t *testing.T) {
	ts := sseServer(
		`{"payload":{"id":"evt_1","type":"server.connected","properties":{}}}`,
		`{"directory":"/p","project":"global","payload":{"type":"sync","syncEvent":{}}}`,
		`not json`,
		`{"directory":"/p","project":"global","payload":{"id":"evt_2","type":"session.idle","properties":{"sessionID":"ses_1"}}}`,
		`{"id":"evt_3","type":"session.status","properties":{"sessionID":"ses_1","status":{"type":"busy"}}}`,
	)
	defer ts.Close()
	c, err := opencode.NewHTTPClient(ts.URL, opencode.WithStallTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Events(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var got []string
	var last error
	for ev, err := range s.All() {
		if err != nil {
			last = err
			break
		}
		p, _ := ev.Decode()
		got = append(got, ev.Type+"@"+ev.Directory+"#"+p.SessionID)
	}
	want := "server.connected@#,session.idle@/p#ses_1,session.status@#ses_1"
	if strings.Join(got, ",") != want {
		t.Errorf("events = %v, want %s", got, want)
	}
	if !errors.Is(last, opencode.ErrStreamStalled) {
		t.Errorf("end = %v, want ErrStreamStalled", last)
	}
}

func TestEventStreamEOF(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"type\":\"server.connected\",\"properties\":{}}\n\n")
	}))
	defer ts.Close()
	c, _ := opencode.NewHTTPClient(ts.URL)
	s, err := c.Events(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var n int
	for _, err := range s.All() {
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("end = %v, want io.EOF", err)
			}
			break
		}
		n++
	}
	if n != 1 {
		t.Fatalf("events = %d", n)
	}
}

func TestEventStreamEndsWithClosedOrCancelled(t *testing.T) {
	ts := sseServer(`{"payload":{"id":"evt_1","type":"server.connected","properties":{}}}`)
	defer ts.Close()
	c, err := opencode.NewHTTPClient(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	end := func(s opencode.EventStream, onFirst func()) error {
		for _, err := range s.All() {
			if err != nil {
				return err
			}
			onFirst()
		}
		return nil
	}

	// Close from another goroutine ends a range in progress; Close is idempotent.
	s, err := c.Events(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	err = end(s, func() {
		wg.Add(1)
		go func() { defer wg.Done(); s.Close() }()
	})
	wg.Wait()
	if !errors.Is(err, net.ErrClosed) {
		t.Errorf("after Close: %v, want net.ErrClosed", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	s, err = c.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := end(s, cancel); !errors.Is(err, context.Canceled) {
		t.Errorf("after cancelling the context: %v, want context.Canceled", err)
	}
}
