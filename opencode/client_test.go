package opencode_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// shared is the real server the package's tests share, started on first use. It asks for a
// password, as TestRealServerBasicAuth checks; the other tests use its Client, which sends
// it. TestForkSession runs on it in parallel with the tests of other servers: the tests
// judge its model's requests by a text of their own, never by their count.
var shared = opencodetest.Shared{Options: []opencodetest.ServerOption{opencodetest.WithPassword(sharedPassword)}}

const sharedPassword = "s3cret-pw"

func TestMain(m *testing.M) { testmain.Run(m, shared.Close) }

// starts admits one server start at a time. Real-server tests run in parallel, and a start
// keeps a small machine's CPUs busy for seconds: three at once on a loaded machine overran
// the 60 s start timeout.
var starts = make(chan struct{}, 1)

var sharedOnce sync.Once

// sharedServer returns the shared server, starting it (one start at a time) on first use.
func sharedServer(t *testing.T) *opencodetest.Server {
	t.Helper()
	sharedOnce.Do(func() {
		starts <- struct{}{}
		defer func() { <-starts }()
		shared.Get(t)
	})
	return shared.Get(t)
}

// ownServer starts a server for t alone (one start at a time), closed when t ends.
func ownServer(t *testing.T, opts ...opencodetest.ServerOption) *opencodetest.Server {
	t.Helper()
	starts <- struct{}{}
	defer func() { <-starts }()
	return opencodetest.Start(t, opts...)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestRealServerSessionLifecycle(t *testing.T) {
	srv := sharedServer(t)
	c := srv.Client()
	ctx := ctxT(t)

	if srv.Version != "1.18.33" {
		t.Logf("server version %s (pinned 1.18.33)", srv.Version)
	}
	parent, err := c.CreateSession(ctx, opencode.CreateSessionRequest{Title: "parent"})
	if err != nil {
		t.Fatal(err)
	}
	child, err := c.CreateSession(ctx, opencode.CreateSessionRequest{
		ParentID:   parent.ID,
		Title:      "child",
		Permission: []opencode.PermissionRule{{Permission: "asyncagents_*", Pattern: "*", Action: "deny"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(child.ID, "ses_") || child.ParentID != parent.ID || child.Directory != srv.Directory {
		t.Fatalf("child session = %+v", child)
	}
	got, err := c.GetSession(ctx, child.ID)
	if err != nil || got.Title != "child" || len(got.Permission) != 1 {
		t.Fatalf("GetSession = %+v, %v", got, err)
	}

	// noReply stores a synthetic user message without calling the model: no request holds
	// its text (a step of the agent loop sends the session's messages, synthetic ones too).
	note := "context of " + child.ID
	m, err := c.Prompt(ctx, child.ID, opencode.PromptRequest{NoReply: true, Parts: []opencode.TextPartInput{opencode.NewSyntheticText(note)}})
	if err != nil {
		t.Fatal(err)
	}
	if m.Info.Role != opencode.RoleUser || len(m.Parts) != 1 || !m.Parts[0].Synthetic {
		t.Fatalf("noReply prompt returned %+v", m)
	}
	if n := requestsWith(srv, note); n != 0 {
		t.Fatalf("noReply called the model (%d requests)", n)
	}

	// A blocking prompt runs the agent loop: one bash call, then a text reply.
	reply, err := c.Prompt(ctx, child.ID, opencode.PromptRequest{Parts: []opencode.TextPartInput{opencode.NewText("RUN:echo hi-from-bash")}})
	if err != nil {
		t.Fatal(err)
	}
	if reply.Info.Finish != "stop" || !strings.Contains(textOf(reply), "hi-from-bash") {
		t.Fatalf("prompt reply = %+v", reply)
	}
	msgs, err := c.Messages(ctx, child.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var tool *opencode.Part
	for i := range msgs {
		for j := range msgs[i].Parts {
			if msgs[i].Parts[j].Type == opencode.PartTool {
				tool = &msgs[i].Parts[j]
			}
		}
	}
	if tool == nil || tool.Tool != "bash" || tool.State.Status != opencode.ToolCompleted || tool.State.Output != "hi-from-bash\n" {
		t.Fatalf("tool part = %+v", tool)
	}
	if code, ok := tool.State.ExitCode(); !ok || code != 0 {
		t.Fatalf("exit code = %v, %v", code, ok)
	}
	last2, err := c.Messages(ctx, child.ID, 2)
	if err != nil || len(last2) != 2 || last2[1].Info.ID != msgs[len(msgs)-1].Info.ID {
		t.Fatalf("Messages(limit 2) = %d messages, %v", len(last2), err)
	}
}

// requestsWith counts the model requests of srv that hold text.
func requestsWith(srv *opencodetest.Server, text string) int {
	n := 0
	for _, r := range srv.Model.Requests() {
		if r.Contains(text) {
			n++
		}
	}
	return n
}

func textOf(m *opencode.Message) string {
	var b strings.Builder
	for _, p := range m.Parts {
		if p.Type == opencode.PartText {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

func TestRealServerPromptAsyncEventsAbort(t *testing.T) {
	srv := sharedServer(t)
	c := srv.Client()
	ctx := ctxT(t)

	s, err := c.CreateSession(ctx, opencode.CreateSessionRequest{Title: "async"})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := c.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()

	if err := c.PromptAsync(ctx, s.ID, opencode.PromptRequest{Agent: "general", Parts: []opencode.TextPartInput{opencode.NewText("SLEEP:30")}}); err != nil {
		t.Fatal(err)
	}
	var sawBusy, sawIdle bool
	for ev, err := range stream.All() {
		if err != nil {
			t.Fatal(err)
		}
		p, err := ev.Decode()
		if err != nil || p.SessionID != s.ID {
			continue
		}
		switch ev.Type {
		case opencode.EventSessionStatus:
			if p.Status.Type == "busy" && !sawBusy {
				sawBusy = true
				if ev.Directory != srv.Directory {
					t.Errorf("event directory = %q, want %q", ev.Directory, srv.Directory)
				}
				st, err := c.SessionStatus(ctx, "")
				if err != nil || st[s.ID].Type != "busy" {
					t.Fatalf("SessionStatus = %v, %v", st, err)
				}
				if err := c.Abort(ctx, s.ID); err != nil {
					t.Fatal(err)
				}
			}
		case opencode.EventSessionIdle:
			sawIdle = true
		}
		if sawIdle {
			break
		}
	}
	if !sawBusy {
		t.Fatal("no busy status seen")
	}
	msgs, err := c.Messages(ctx, s.ID, 1)
	if err != nil {
		t.Fatal(err)
	}
	if e := msgs[0].Info.Error; e == nil || e.Name != "MessageAbortedError" {
		t.Fatalf("last message error = %+v", e)
	}
	st, err := c.SessionStatus(ctx, srv.Directory)
	if err != nil {
		t.Fatal(err)
	}
	if _, busy := st[s.ID]; busy {
		t.Fatalf("session still in status map after abort: %v", st)
	}
}

func TestRealServerErrors(t *testing.T) {
	srv := sharedServer(t)
	c := srv.Client()
	ctx := ctxT(t)

	_, err := c.GetSession(ctx, "ses_zzzzzzzzzzzzzzzzzzzzzzzzzz")
	var apiErr *opencode.APIError
	if !errors.Is(err, opencode.ErrNotFound) || !errors.As(err, &apiErr) || apiErr.Name != "NotFoundError" || apiErr.StatusCode != 404 {
		t.Fatalf("GetSession(unknown) = %v", err)
	}
	if _, err := c.Messages(ctx, "ses_zzzzzzzzzzzzzzzzzzzzzzzzzz", 0); !errors.Is(err, opencode.ErrNotFound) {
		t.Fatalf("Messages(unknown) = %v", err)
	}
	if err := c.Abort(ctx, "ses_zzzzzzzzzzzzzzzzzzzzzzzzzz"); err != nil {
		t.Fatalf("Abort(unknown) = %v, OpenCode answers true", err)
	}
	_, err = c.Prompt(ctx, "ses_zzzzzzzzzzzzzzzzzzzzzzzzzz", opencode.PromptRequest{Parts: []opencode.TextPartInput{opencode.NewText("x")}})
	if !errors.Is(err, opencode.ErrNotFound) {
		t.Fatalf("Prompt(unknown) = %v", err)
	}
	agents, err := c.Agents(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, a := range agents {
		names[a.Name] = true
	}
	for _, want := range []string{"build", "plan", "general", "explore"} {
		if !names[want] {
			t.Errorf("agent %q missing from %v", want, names)
		}
	}
}

// The shared server asks for a password: requests without it, or with another, are refused
// (routes and the event stream); a closed stream gives no more events.
func TestRealServerBasicAuth(t *testing.T) {
	srv := sharedServer(t)
	ctx := ctxT(t)

	if _, err := srv.Client().Agents(ctx, ""); err != nil {
		t.Fatalf("with credentials: %v", err)
	}
	noAuth, err := opencode.NewHTTPClient(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := noAuth.Agents(ctx, ""); !errors.Is(err, opencode.ErrUnauthorized) {
		t.Fatalf("without credentials: %v, want ErrUnauthorized", err)
	}
	if _, err := noAuth.Events(ctx); !errors.Is(err, opencode.ErrUnauthorized) {
		t.Fatalf("events without credentials: %v, want ErrUnauthorized", err)
	}
	wrong := srv.Client(opencode.WithBasicAuth("opencode", "nope"))
	if _, err := wrong.SessionStatus(ctx, ""); !errors.Is(err, opencode.ErrUnauthorized) {
		t.Fatalf("wrong password: %v, want ErrUnauthorized", err)
	}
	stream, err := srv.Client().Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for ev, err := range stream.All() {
		if err != nil || ev.Type != opencode.EventServerConnected {
			t.Fatalf("first event = %+v, %v", ev, err)
		}
		break
	}
	stream.Close()
	for _, err := range stream.All() {
		if err == nil {
			t.Fatal("ranging a closed stream gave an event")
		}
		break
	}
}

// PostMessage on the real server: a message without reply with a chosen id is stored whole
// (both parts, the synthetic one marked), the answer's id is the one posted, the model is not
// called, and an unknown session matches ErrNotFound.
func TestRealServerPostMessage(t *testing.T) {
	srv := sharedServer(t)
	c := srv.Client()
	ctx := ctxT(t)
	s, err := c.CreateSession(ctx, opencode.CreateSessionRequest{Title: "post message"})
	if err != nil {
		t.Fatal(err)
	}
	want := opencode.NewMessageID(time.Now(), "")
	req := opencode.PromptRequest{MessageID: want, NoReply: true,
		Parts: []opencode.TextPartInput{opencode.NewText("visible \"quoted\" ✓"), opencode.NewSyntheticText("hidden\nhint " + s.ID)}}
	id, err := c.PostMessage(ctx, s.ID, req)
	if err != nil || id != want {
		t.Fatalf("PostMessage = %q, %v; want %q", id, err, want)
	}
	m, err := c.Message(ctx, s.ID, want)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Parts) != 2 || m.Parts[0].Text != "visible \"quoted\" ✓" || m.Parts[0].Synthetic || !m.Parts[1].Synthetic || m.Parts[1].Text != "hidden\nhint "+s.ID {
		t.Errorf("stored message = %+v", m.Parts)
	}
	if n := requestsWith(srv, "hint "+s.ID); n != 0 {
		t.Errorf("a message without reply called the model (%d requests)", n)
	}
	if _, err := c.PostMessage(ctx, "ses_zzzzzzzzzzzzzzzzzzzzzzzzzz", req); !errors.Is(err, opencode.ErrNotFound) {
		t.Errorf("PostMessage(unknown) = %v, want ErrNotFound", err)
	}
}

// PostMessage takes the id from any message the server answers with, and fails on an answer
// that is not one (OpenCode 1.14 answers an unknown session with 200 and no body).
func TestPostMessageAnswers(t *testing.T) {
	for _, c := range []struct {
		body, id string
	}{
		{`{"info":{"id":"msg_1","role":"user"},"parts":[{"id":"prt_1","type":"text","text":"x"}]}`, "msg_1"},
		{`{"parts":[],"info":{"role":"user","id":"msg_\u0032"}}`, "msg_2"}, // an escape: decoded
		{`{ "info" : { "id" : "msg_3" } }`, "msg_3"},                       // whitespace: decoded
		{``, ""},
		{`{"parts":[]}`, ""},
		{`[]`, ""},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, c.body)
		}))
		cl, err := opencode.NewHTTPClient(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		id, err := cl.PostMessage(context.Background(), "ses_1", opencode.PromptRequest{NoReply: true})
		if id != c.id || (err == nil) != (c.id != "") {
			t.Errorf("PostMessage answered %s = %q, %v; want %q", c.body, id, err, c.id)
		}
		cl.CloseIdleConnections()
		srv.Close()
	}
}
