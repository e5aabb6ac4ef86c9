package opencodetest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

func newHTTPServer(t *testing.T, opts ...opencodetest.HTTPServerOption) (*opencodetest.FakeClient, *opencodetest.HTTPServer, *opencode.HTTPClient) {
	t.Helper()
	f := opencodetest.NewFakeClient()
	srv := opencodetest.NewHTTPServer(f, opts...)
	t.Cleanup(func() {
		srv.Close()
		f.Close()
	})
	return f, srv, srv.Client()
}

// An unknown session is an *opencode.APIError matching ErrNotFound over HTTP, for every call
// that names one, with the fake's status, name and message.
func TestHTTPServerNotFound(t *testing.T) {
	_, _, c := newHTTPServer(t)
	const id = "ses_zzzzzzzzzzzzzzzzzzzzzzzzzz"
	_, err := c.GetSession(t.Context(), id)
	var ae *opencode.APIError
	if !errors.Is(err, opencode.ErrNotFound) || !errors.As(err, &ae) || ae.StatusCode != 404 || ae.Name != "NotFoundError" ||
		ae.Message != "Session not found: "+id || ae.Path != "/session/"+id {
		t.Errorf("GetSession(unknown) = %#v, want a 404 NotFoundError", err)
	}
	calls := map[string]error{}
	_, calls["Messages"] = c.Messages(t.Context(), id, 0)
	_, _, calls["MessagesBefore"] = c.MessagesBefore(t.Context(), id, 3, "")
	_, calls["Message"] = c.Message(t.Context(), id, "msg_x")
	_, calls["Prompt"] = c.Prompt(t.Context(), id, opencode.PromptRequest{Parts: []opencode.TextPartInput{opencode.NewText("x")}})
	calls["PromptAsync"] = c.PromptAsync(t.Context(), id, opencode.PromptRequest{Parts: []opencode.TextPartInput{opencode.NewText("x")}})
	for name, err := range calls {
		if !errors.Is(err, opencode.ErrNotFound) {
			t.Errorf("%s(unknown) = %v, want ErrNotFound", name, err)
		}
	}
}

// An error of the backing client that is not an APIError is OpenCode's 500 UnknownError
// carrying its text; an APIError keeps its status and body.
func TestHTTPServerErrors(t *testing.T) {
	f, srv, c := newHTTPServer(t)
	f.FailCalls("SessionStatus", 1, errors.New("disk on fire"))
	_, err := c.SessionStatus(t.Context(), "")
	var ae *opencode.APIError
	if !errors.As(err, &ae) || ae.StatusCode != 500 || ae.Name != "UnknownError" || ae.Message != "disk on fire" {
		t.Errorf("SessionStatus = %#v, want a 500 UnknownError with the message", err)
	}
	f.FailCalls("Agents", 1, nil)
	_, err = c.Agents(t.Context(), "")
	if !errors.As(err, &ae) || ae.StatusCode != 500 || ae.Name != "UnknownError" || !strings.Contains(string(ae.Body), `"ref":"err_opencodetest"`) {
		t.Errorf("Agents = %#v, want the fake's UnknownError body", err)
	}
	s, err := c.CreateSession(t.Context(), opencode.CreateSessionRequest{Title: "t"})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"limit=abc", "before=x", "limit=0&before=x"} {
		resp, err := http.Get(srv.URL + "/session/" + s.ID + "/message?" + q)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Errorf("GET …/message?%s = %d, want 400", q, resp.StatusCode)
		}
	}
	resp, err := http.Get(srv.URL + "/no/such/route")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("GET /no/such/route = %d, want 404", resp.StatusCode)
	}
	http.DefaultClient.CloseIdleConnections()
}

// Close ends an open event stream: the client reads io.EOF, as when a server closes it.
func TestHTTPServerCloseEndsEvents(t *testing.T) {
	_, srv, c := newHTTPServer(t)
	st, err := c.Events(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ended := make(chan error, 1)
	first := make(chan string, 1)
	go func() {
		for ev, err := range st.All() {
			if err != nil {
				ended <- err
				return
			}
			select {
			case first <- ev.Type:
			default:
			}
		}
	}()
	if typ := <-first; typ != opencode.EventServerConnected {
		t.Errorf("first event %q, want %s", typ, opencode.EventServerConnected)
	}
	closed := make(chan struct{})
	go func() {
		srv.Close()
		close(closed)
	}()
	select {
	case err := <-ended:
		if !errors.Is(err, io.EOF) {
			t.Errorf("stream ended with %v, want io.EOF", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not end on Close")
	}
	<-closed
}

// A stream whose backing stream ends (DropEvents) ends with io.EOF; a quiet stream carries
// server.heartbeat at the heartbeat interval.
func TestHTTPServerEventStream(t *testing.T) {
	f, _, c := newHTTPServer(t, opencodetest.WithHeartbeat(20*time.Millisecond))
	st, err := c.Events(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var types []string
	for ev, err := range st.All() {
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Errorf("stream ended with %v, want io.EOF", err)
			}
			break
		}
		types = append(types, ev.Type)
		if len(types) == 3 {
			f.DropEvents()
		}
	}
	want := []string{opencode.EventServerConnected, opencode.EventServerHeartbeat, opencode.EventServerHeartbeat}
	if len(types) < 3 || !slices.Equal(types[:3], want) {
		t.Errorf("events %v, want %v first", types, want)
	}
}

// A directory reaches the backing client from ?directory= and from x-opencode-directory
// (WithDirectory), and events keep the directory of their session.
func TestHTTPServerDirectory(t *testing.T) {
	_, srv, _ := newHTTPServer(t)
	other := srv.Client(opencode.WithDirectory("/opencodetest/other"))
	s, err := other.CreateSession(t.Context(), opencode.CreateSessionRequest{Title: "t"})
	if err != nil || s.Directory != "/opencodetest/other" {
		t.Fatalf("CreateSession with x-opencode-directory = %+v, %v", s, err)
	}
	s, err = srv.Client().CreateSession(t.Context(), opencode.CreateSessionRequest{Title: "t", Directory: "/opencodetest/third"})
	if err != nil || s.Directory != "/opencodetest/third" {
		t.Fatalf("CreateSession with ?directory= = %+v, %v", s, err)
	}
}

// burstClient's event stream is server.connected, then n events of about 1 KB (the first
// with indented properties), then the end.
type burstClient struct {
	opencode.Client // nil: only Events is served
	n               int
}

func (c burstClient) Events(ctx context.Context) (opencode.EventStream, error) {
	return burstStream{ctx: ctx, n: c.n}, nil
}

type burstStream struct {
	ctx context.Context
	n   int
}

func (s burstStream) All() iter.Seq2[opencode.Event, error] {
	return func(yield func(opencode.Event, error) bool) {
		if !yield(opencode.Event{Type: opencode.EventServerConnected, Properties: json.RawMessage(`{}`)}, nil) {
			return
		}
		pad := strings.Repeat("x", 1000)
		for i := range s.n {
			props := fmt.Sprintf(`{"sessionID":"ses_%d","pad":%q}`, i, pad)
			if i == 0 {
				props = "{\n  \"sessionID\": \"ses_0\",\n  \"pad\": \"" + pad + "\"\n}"
			}
			ev := opencode.Event{ID: fmt.Sprintf("evt_%d", i), Directory: "/p", Type: "x.burst", Properties: json.RawMessage(props)}
			if s.ctx.Err() != nil || !yield(ev, nil) {
				return
			}
		}
		yield(opencode.Event{}, io.EOF)
	}
}

func (burstStream) Close() error { return nil }

// A burst far larger than what the server queues for a client reaches a client that starts
// reading late whole and in order, each event as sent; properties with line breaks arrive
// compacted, as one frame.
func TestHTTPServerBurst(t *testing.T) {
	const n = 2000 // about 2 MB
	srv := opencodetest.NewHTTPServer(burstClient{n: n})
	defer srv.Close()
	st, err := srv.Client().Events(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	time.Sleep(50 * time.Millisecond) // let the server fill its queue and wait
	i := -1
	for ev, err := range st.All() {
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Errorf("stream ended with %v, want io.EOF", err)
			}
			break
		}
		if i == -1 {
			i++
			continue // server.connected
		}
		want := fmt.Sprintf(`{"sessionID":"ses_%d","pad":"%s"}`, i, strings.Repeat("x", 1000))
		if ev.ID != fmt.Sprintf("evt_%d", i) || ev.Directory != "/p" || ev.Type != "x.burst" || string(ev.Properties) != want {
			t.Fatalf("event %d = %+v", i, ev)
		}
		i++
	}
	if i != n {
		t.Errorf("read %d events, want %d", i, n)
	}
}
