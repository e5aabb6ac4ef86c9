package opencodetest_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"iter"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// fixedClock makes the fake's timestamps and ids repeatable.
func fixedClock() time.Time { return time.UnixMilli(1795310573870) }

func newFake(t *testing.T, opts ...opencodetest.FakeOption) *opencodetest.FakeClient {
	t.Helper()
	f := opencodetest.NewFakeClient(append([]opencodetest.FakeOption{opencodetest.WithClock(fixedClock)}, opts...)...)
	t.Cleanup(func() { f.Close() })
	return f
}

// events reads one stream of a client; next waits for the next event of a session.
type events struct {
	t      *testing.T
	stream opencode.EventStream
	next   func() (opencode.Event, error, bool)
}

func subscribe(t *testing.T, c opencode.Client) *events {
	t.Helper()
	st, err := c.Events(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	next, stop := iter.Pull2(st.All())
	t.Cleanup(func() { st.Close(); stop() })
	e := &events{t: t, stream: st, next: next}
	if ev, err, _ := next(); err != nil || ev.Type != opencode.EventServerConnected {
		t.Fatalf("first event = %+v, %v", ev, err)
	}
	return e
}

// until returns "type[:detail]" of the session's events up to the first that stop accepts.
func (e *events) until(sessionID string, stop func(opencode.Event, opencode.EventProperties) bool) []string {
	e.t.Helper()
	var got []string
	for {
		ev, err, ok := e.next()
		if !ok || err != nil {
			e.t.Fatalf("stream ended (%v) after %v", err, got)
		}
		p, _ := ev.Decode()
		if p.SessionID != sessionID {
			continue
		}
		got = append(got, describe(ev, p))
		if stop(ev, p) {
			return got
		}
	}
}

// idles returns the session's events up to its n-th session.idle.
func (e *events) idles(sessionID string, n int) []string {
	e.t.Helper()
	seen := 0
	return e.until(sessionID, func(ev opencode.Event, _ opencode.EventProperties) bool {
		if ev.Type == opencode.EventSessionIdle {
			seen++
		}
		return seen == n
	})
}

func (e *events) untilType(sessionID, typ string) []string {
	e.t.Helper()
	return e.until(sessionID, func(ev opencode.Event, _ opencode.EventProperties) bool { return ev.Type == typ })
}

func describe(ev opencode.Event, p opencode.EventProperties) string {
	switch {
	case p.Status != nil:
		return ev.Type + ":" + p.Status.Type
	case p.Part != nil && p.Part.State != nil:
		return ev.Type + ":tool:" + p.Part.State.Status
	case p.Part != nil:
		return ev.Type + ":" + p.Part.Type
	case p.Error != nil:
		return ev.Type + ":" + p.Error.Name
	case ev.Type == opencode.EventMessageUpdated:
		var info opencode.MessageInfo
		if err := json.Unmarshal(p.Info, &info); err == nil {
			return ev.Type + ":" + info.Role
		}
	}
	return ev.Type
}

func prompt(text string) opencode.PromptRequest {
	return opencode.PromptRequest{Parts: []opencode.TextPartInput{opencode.NewText(text)}}
}

func lastMessage(t *testing.T, c opencode.Client, sessionID string) opencode.Message {
	t.Helper()
	msgs, err := c.Messages(t.Context(), sessionID, 1)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("Messages = %d, %v", len(msgs), err)
	}
	return msgs[0]
}

// The sequence the real server sent for "RUN:echo hi" in a new, titled session
// (opencode 1.18.33, after the instance's plugin.added burst).
func TestFakeRunEventsFollowTheRealServer(t *testing.T) {
	f := newFake(t)
	ev := subscribe(t, f)
	s, err := f.CreateSession(t.Context(), opencode.CreateSessionRequest{Title: "events"})
	if err != nil {
		t.Fatal(err)
	}
	ev.untilType(s.ID, opencode.EventSessionCreated)
	if err := f.PromptAsync(t.Context(), s.ID, prompt("RUN:echo hi")); err != nil {
		t.Fatal(err)
	}
	got := ev.untilType(s.ID, opencode.EventSessionIdle)
	want := []string{
		"session.updated", "message.updated:user", "message.part.updated:text", "session.updated", "session.status:busy",
		"message.updated:assistant", "session.updated", "session.diff", "message.updated:user", "session.status:busy",
		"message.part.updated:step-start", "message.part.updated:tool:pending", "message.part.updated:tool:running",
		"message.part.updated:tool:running", "message.part.updated:tool:running", "message.part.updated:tool:completed",
		"message.part.updated:step-finish", "message.updated:assistant", "message.updated:assistant", "session.status:busy",
		"message.updated:assistant", "session.updated", "session.diff", "message.updated:user", "session.status:busy",
		"message.part.updated:step-start", "message.part.updated:text", "message.part.delta", "message.part.updated:text",
		"message.part.updated:step-finish", "message.updated:assistant", "message.updated:assistant",
		"session.status:busy", "session.status:idle", "session.idle",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-real +fake):\n%s", diff)
	}
	if got := ev.untilType(s.ID, opencode.EventMessageUpdated); !slicesEqual(got, []string{"session.updated", "session.diff", "message.updated:user"}) {
		t.Errorf("events after idle = %v", got)
	}
}

func slicesEqual(a, b []string) bool { return cmp.Equal(a, b) }

func TestFakeSessionsAndIDs(t *testing.T) {
	ids := func() []string {
		f := opencodetest.NewFakeClient(opencodetest.WithClock(fixedClock), opencodetest.WithFakeDirectory("/p"))
		defer f.Close()
		var out []string
		for range 3 {
			s, err := f.CreateSession(t.Context(), opencode.CreateSessionRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if s.Directory != "/p" || s.Title != "New session - 2026-11-22T01:22:53.870Z" || s.Time.Created != 1795310573870 {
				t.Errorf("session = %+v", s)
			}
			out = append(out, s.ID)
		}
		return out
	}
	a, b := ids(), ids()
	if !cmp.Equal(a, b) {
		t.Errorf("ids differ between runs with a fixed clock: %v, %v", a, b)
	}
	if !(a[2] < a[1] && a[1] < a[0]) {
		t.Errorf("session ids %v: newer must sort first", a)
	}
	if !strings.HasPrefix(a[0], "ses_dff26a6d1ffe") {
		t.Errorf("first id %s: want the time part OpenCode makes for that millisecond", a[0])
	}
}

func TestFakeHeldRunFailsWithModelError(t *testing.T) {
	f := newFake(t, opencodetest.WithHeldRuns())
	ev := subscribe(t, f)
	s, _ := f.CreateSession(t.Context(), opencode.CreateSessionRequest{Title: "held"})
	if err := f.PromptAsync(t.Context(), s.ID, prompt("hello")); err != nil {
		t.Fatal(err)
	}
	if st, _ := f.SessionStatus(t.Context(), ""); st[s.ID].Type != "busy" {
		t.Fatalf("status after PromptAsync = %v", st)
	}
	ev.until(s.ID, func(e opencode.Event, p opencode.EventProperties) bool {
		return e.Type == opencode.EventSessionStatus && p.Status.Type == "busy" && len(mustMessages(t, f, s.ID)) == 2
	})
	if m := lastMessage(t, f, s.ID); m.Info.Role != opencode.RoleAssistant || m.Info.Time.Completed != 0 {
		t.Fatalf("held run's message = %+v", m.Info)
	}
	if err := f.Release(s.ID, opencodetest.Fail(400)); err != nil {
		t.Fatal(err)
	}
	got := ev.until(s.ID, func(e opencode.Event, p opencode.EventProperties) bool {
		return e.Type == opencode.EventSessionIdle && p.SessionID == s.ID
	})
	if got[len(got)-3] != "session.error:APIError" {
		t.Errorf("events = %v", got)
	}
	m := lastMessage(t, f, s.ID)
	if m.Info.Error == nil || m.Info.Error.Name != "APIError" || m.Info.Error.Message() != "scripted failure (HTTP 400)" || len(m.Parts) != 0 {
		t.Errorf("failed message = %+v", m)
	}
	if err := f.Release("ses_zzzzzzzzzzzzzzzzzzzzzzzzzz"); !errors.Is(err, opencode.ErrNotFound) {
		t.Errorf("Release(unknown) = %v", err)
	}
}

func mustMessages(t *testing.T, c opencode.Client, id string) []opencode.Message {
	msgs, err := c.Messages(t.Context(), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

// A prompt sent while busy is answered by the same run, which goes idle once.
func TestFakeQueuedPromptSameRun(t *testing.T) {
	f := newFake(t, opencodetest.WithHeldRuns())
	ev := subscribe(t, f)
	s, _ := f.CreateSession(t.Context(), opencode.CreateSessionRequest{Title: "queue"})
	if err := f.PromptAsync(t.Context(), s.ID, prompt("first")); err != nil {
		t.Fatal(err)
	}
	ev.until(s.ID, func(e opencode.Event, p opencode.EventProperties) bool {
		return e.Type == opencode.EventSessionStatus && len(mustMessages(t, f, s.ID)) == 2
	})
	if err := f.PromptAsync(t.Context(), s.ID, prompt("second")); err != nil {
		t.Fatal(err)
	}
	if err := f.Release(s.ID, opencodetest.Text("to the first")); err != nil {
		t.Fatal(err)
	}
	got := ev.untilType(s.ID, opencode.EventSessionIdle)
	var idles int
	for _, g := range got {
		if g == "session.status:idle" {
			idles++
		}
	}
	msgs := mustMessages(t, f, s.ID)
	var roles []string
	for _, m := range msgs {
		r := m.Info.Role
		for _, p := range m.Parts {
			if p.Type == opencode.PartText {
				r += ":" + p.Text
			}
		}
		roles = append(roles, r)
	}
	want := []string{"user:first", "assistant:to the first", "user:second", "assistant:reply to second"}
	if idles != 1 || !cmp.Equal(roles, want) {
		t.Errorf("idles %d, messages %v, want 1 and %v", idles, roles, want)
	}
	if msgs[3].Info.ParentID != msgs[2].Info.ID {
		t.Errorf("second reply's parent = %s, want %s", msgs[3].Info.ParentID, msgs[2].Info.ID)
	}
}

func TestFakeAbortHeldRunIsImmediate(t *testing.T) {
	f := newFake(t, opencodetest.WithHeldRuns())
	ev := subscribe(t, f)
	s, _ := f.CreateSession(t.Context(), opencode.CreateSessionRequest{Title: "abort"})
	if err := f.PromptAsync(t.Context(), s.ID, prompt("never answered")); err != nil {
		t.Fatal(err)
	}
	ev.until(s.ID, func(e opencode.Event, p opencode.EventProperties) bool {
		return e.Type == opencode.EventSessionStatus && len(mustMessages(t, f, s.ID)) == 2
	})
	if err := f.Abort(t.Context(), s.ID); err != nil {
		t.Fatal(err)
	}
	// Everything is visible when Abort returns.
	if m := lastMessage(t, f, s.ID); m.Info.Error == nil || m.Info.Error.Name != "MessageAbortedError" || m.Info.Time.Completed == 0 {
		t.Errorf("aborted message = %+v", m.Info)
	}
	if st, _ := f.SessionStatus(t.Context(), ""); len(st) != 0 {
		t.Errorf("status after abort = %v", st)
	}
	got := ev.idles(s.ID, 2)
	want := []string{"session.error:MessageAbortedError", "session.status:idle", "session.idle", "message.updated:assistant", "session.status:idle", "session.idle"}
	if !cmp.Equal(got[len(got)-len(want):], want) {
		t.Errorf("events = %v, want ending in %v", got, want)
	}
}

func TestFakeAbortRunningBashCommand(t *testing.T) {
	f := newFake(t)
	ev := subscribe(t, f)
	s, _ := f.CreateSession(t.Context(), opencode.CreateSessionRequest{Title: "sleep"})
	if err := f.PromptAsync(t.Context(), s.ID, prompt("RUN:sleep 30")); err != nil {
		t.Fatal(err)
	}
	ev.until(s.ID, func(e opencode.Event, p opencode.EventProperties) bool {
		return p.Part != nil && p.Part.State != nil && p.Part.State.Status == opencode.ToolRunning && len(p.Part.State.Metadata) > 0
	})
	if err := f.Abort(t.Context(), s.ID); err != nil {
		t.Fatal(err)
	}
	m := lastMessage(t, f, s.ID)
	p := m.Parts[1]
	if _, ok := p.State.ExitCode(); ok || p.State.Status != opencode.ToolCompleted ||
		p.State.Output != "(no output)\n\n<shell_metadata>\nUser aborted the command\n</shell_metadata>" || m.Info.Error.Name != "MessageAbortedError" {
		t.Errorf("aborted tool part = %+v, message error %+v", p.State, m.Info.Error)
	}
}

func TestFakePermissions(t *testing.T) {
	f := newFake(t)
	ev := subscribe(t, f)
	ctx := t.Context()
	asked := func(s *opencode.Session, text string) opencode.EventProperties {
		t.Helper()
		if err := f.PromptAsync(ctx, s.ID, prompt(text)); err != nil {
			t.Fatal(err)
		}
		var got opencode.EventProperties
		ev.until(s.ID, func(e opencode.Event, p opencode.EventProperties) bool {
			got = p
			return e.Type == opencode.EventPermissionAsked
		})
		return got
	}

	// "always" allows the same folder for the rest of the session.
	s, _ := f.CreateSession(ctx, opencode.CreateSessionRequest{Title: "always"})
	p := asked(s, "RUN:cat /etc/hostname ||| cat /etc/hosts ||| cd /srv/")
	if p.Permission != "external_directory" || !cmp.Equal(p.Patterns, []string{"/etc/*"}) {
		t.Fatalf("permission.asked = %+v", p)
	}
	if st, _ := f.SessionStatus(ctx, f.Directory()); st[s.ID].Type != "busy" {
		t.Errorf("status while asking = %v", st)
	}
	if list, _ := f.Permissions(ctx, ""); len(list) != 1 || list[0].ID != p.ID || list[0].Tool == nil {
		t.Errorf("Permissions = %+v", list)
	}
	if err := f.ReplyPermission(ctx, "/elsewhere", p.ID, opencode.PermissionReply{Reply: opencode.ReplyOnce}); !errors.Is(err, opencode.ErrNotFound) {
		t.Errorf("reply in another directory = %v", err)
	}
	if err := f.ReplyPermission(ctx, "", p.ID, opencode.PermissionReply{Reply: "maybe"}); !isStatus(err, 400) {
		t.Errorf("bad reply = %v", err)
	}
	if err := f.ReplyPermission(ctx, "", p.ID, opencode.PermissionReply{Reply: opencode.ReplyAlways}); err != nil {
		t.Fatal(err)
	}
	var next opencode.EventProperties
	ev.until(s.ID, func(e opencode.Event, q opencode.EventProperties) bool {
		next = q
		return e.Type == opencode.EventPermissionAsked
	})
	if !cmp.Equal(next.Patterns, []string{"/srv/*"}) {
		t.Errorf("second ask = %+v, want only /srv/* (/etc/* is allowed now)", next)
	}
	if err := f.ReplyPermission(ctx, "", next.ID, opencode.PermissionReply{Reply: opencode.ReplyOnce}); err != nil {
		t.Fatal(err)
	}
	ev.untilType(s.ID, opencode.EventSessionIdle)
	if m := lastMessage(t, f, s.ID); m.Parts[1].Text != "Ran 3 command(s); last output: (no output)" {
		t.Errorf("reply = %q", m.Parts[1].Text)
	}

	// A rejection without a message stops the loop.
	s2, _ := f.CreateSession(ctx, opencode.CreateSessionRequest{Title: "reject"})
	p = asked(s2, "RUN:rm -rf /var/tmp/x ||| echo never")
	if err := f.ReplyPermission(ctx, "", p.ID, opencode.PermissionReply{Reply: opencode.ReplyReject}); err != nil {
		t.Fatal(err)
	}
	got := ev.untilType(s2.ID, opencode.EventSessionIdle)
	if want := []string{"permission.replied", "message.part.updated:tool:error", "message.part.updated:step-finish",
		"message.updated:assistant", "message.updated:assistant", "session.status:idle", "session.idle"}; !cmp.Equal(got, want) {
		t.Errorf("events = %v, want %v", got, want)
	}
	if m := lastMessage(t, f, s2.ID); m.Info.Finish != "tool-calls" || m.Parts[1].State.Error != "The user rejected permission to use this specific tool call." {
		t.Errorf("last message = %+v, tool %+v", m.Info, m.Parts[1].State)
	}

	// Abort while asking: the tool part ends in error and the request stays listed.
	s3, _ := f.CreateSession(ctx, opencode.CreateSessionRequest{Title: "abort"})
	p = asked(s3, "RUN:touch /opt/x")
	if err := f.Abort(ctx, s3.ID); err != nil {
		t.Fatal(err)
	}
	if m := lastMessage(t, f, s3.ID); m.Parts[1].State.Status != opencode.ToolError || m.Parts[1].State.Error != "Tool execution aborted" {
		t.Errorf("tool after abort = %+v", m.Parts[1].State)
	}
	if list, _ := f.Permissions(ctx, ""); len(list) != 1 || list[0].ID != p.ID {
		t.Errorf("Permissions after abort = %+v, want the request still listed", list)
	}

	// A deny rule on the session ends the call without asking.
	s4, _ := f.CreateSession(ctx, opencode.CreateSessionRequest{Title: "deny", Permission: []opencode.PermissionRule{
		{Permission: "external_directory", Pattern: "/etc/*", Action: "deny"}}})
	m, err := f.Prompt(ctx, s4.ID, prompt("RUN:cat /etc/hostname"))
	if err != nil || !strings.Contains(m.Parts[1].Text, "The user has specified a rule which prevents you from using this specific tool call.") {
		t.Errorf("denied run = %+v, %v", m, err)
	}
}

func isStatus(err error, status int) bool {
	var ae *opencode.APIError
	return errors.As(err, &ae) && ae.StatusCode == status
}

func TestFakeRetriesServerErrors(t *testing.T) {
	f := newFake(t)
	ev := subscribe(t, f)
	s, _ := f.CreateSession(t.Context(), opencode.CreateSessionRequest{Title: "retry"})
	f.FailNext(1, 503)
	m, err := f.Prompt(t.Context(), s.ID, prompt("hello"))
	if err != nil || m.Info.Error != nil || m.Parts[1].Text != "reply to hello" {
		t.Fatalf("Prompt after one 503 = %+v, %v", m, err)
	}
	if got := ev.untilType(s.ID, opencode.EventSessionIdle); !strings.Contains(strings.Join(got, " "), "session.status:retry session.status:busy") {
		t.Errorf("events = %v, want a retry status", got)
	}
	f.FailNext(6, 500)
	m, err = f.Prompt(t.Context(), s.ID, prompt("hello again"))
	if err != nil || m.Info.Error == nil || m.Info.Error.Name != "APIError" || !strings.Contains(string(m.Info.Error.Data), `"isRetryable":true`) {
		t.Fatalf("Prompt after six 500s = %+v, %v", m, err)
	}
	if n := len(f.Requests()); n != 2+6 {
		t.Errorf("model requests = %d, want 8 (503 and success, then six 500s)", n)
	}
}

func TestFakeBlockingPromptAndContext(t *testing.T) {
	f := newFake(t, opencodetest.WithHeldRuns())
	s, _ := f.CreateSession(t.Context(), opencode.CreateSessionRequest{Title: "blocking"})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := f.Prompt(ctx, s.ID, prompt("wait"))
		done <- err
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Prompt with a cancelled context = %v", err)
	}
	// The run goes on: a blocking prompt queued behind it returns the last reply.
	ev := subscribe(t, f)
	go func() {
		m, err := f.Prompt(t.Context(), s.ID, prompt("after"))
		if err == nil && m.Parts[1].Text != "reply to after" {
			err = errors.New("reply " + m.Parts[1].Text)
		}
		done <- err
	}()
	ev.until(s.ID, func(_ opencode.Event, p opencode.EventProperties) bool {
		return p.Part != nil && p.Part.Text == "after"
	})
	if err := f.Release(s.ID); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestFakeFaults(t *testing.T) {
	f := newFake(t)
	ctx := t.Context()
	s, _ := f.CreateSession(ctx, opencode.CreateSessionRequest{Title: "faults"})
	f.FailCalls("GetSession", 1, nil)
	if _, err := f.GetSession(ctx, s.ID); !isStatus(err, 500) {
		t.Errorf("failed GetSession = %v", err)
	}
	if _, err := f.GetSession(ctx, s.ID); err != nil {
		t.Errorf("GetSession after the failure = %v", err)
	}
	boom := errors.New("boom")
	f.FailCalls("PromptAsync", 2, boom)
	for range 2 {
		if err := f.PromptAsync(ctx, s.ID, prompt("x")); !errors.Is(err, boom) {
			t.Errorf("PromptAsync = %v", err)
		}
	}
	if msgs := mustMessages(t, f, s.ID); len(msgs) != 0 {
		t.Errorf("a failed call stored %d messages", len(msgs))
	}

	ev := subscribe(t, f)
	if _, err := f.CreateSession(ctx, opencode.CreateSessionRequest{Title: "before drop"}); err != nil {
		t.Fatal(err)
	}
	f.DropEvents()
	if e, err, _ := ev.next(); err != nil || e.Type != opencode.EventSessionCreated {
		t.Errorf("after DropEvents the queued event = %+v, %v", e, err)
	}
	if _, err, _ := ev.next(); err != io.EOF {
		t.Errorf("dropped stream ended with %v, want io.EOF", err)
	}
	subscribe(t, f) // a new stream works

	defer func() {
		if recover() == nil {
			t.Error("FailCalls with an unknown method did not panic")
		}
	}()
	f.FailCalls("Prompt async", 1, nil)
}

func TestFakeCloseStopsEverything(t *testing.T) {
	f := opencodetest.NewFakeClient(opencodetest.WithHeldRuns())
	ctx := t.Context()
	ev := subscribe(t, f)
	s, _ := f.CreateSession(ctx, opencode.CreateSessionRequest{Title: "close"})
	s2, _ := f.CreateSession(ctx, opencode.CreateSessionRequest{Title: "sleeping"})
	if err := f.PromptAsync(ctx, s.ID, prompt("held")); err != nil {
		t.Fatal(err)
	}
	if err := f.Release(s2.ID); err != nil {
		t.Fatal(err)
	}
	if err := f.PromptAsync(ctx, s2.ID, prompt("SLEEP:60")); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := f.Prompt(ctx, s.ID, prompt("queued"))
		done <- err
	}()
	ev.until(s2.ID, func(e opencode.Event, _ opencode.EventProperties) bool {
		return e.Type == opencode.EventMessagePartDelta
	})
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Errorf("waiting Prompt after Close = %v", err)
	}
	for {
		_, err, ok := ev.next()
		if !ok {
			t.Fatal("stream ended without an error")
		}
		if err != nil {
			if err != io.EOF {
				t.Errorf("stream ended with %v, want io.EOF", err)
			}
			break
		}
	}
	if _, err := f.GetSession(ctx, s.ID); !errors.Is(err, net.ErrClosed) {
		t.Errorf("GetSession after Close = %v", err)
	}
	if err := f.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
}

func TestFakeToolFunc(t *testing.T) {
	f := newFake(t, opencodetest.WithToolFunc(func(call opencodetest.ToolCall) (opencodetest.ToolResult, bool) {
		switch call.Name {
		case "read":
			return opencodetest.ToolResult{Output: "file body", Title: "notes.txt"}, true
		case "webfetch":
			return opencodetest.ToolResult{Output: "page", Permission: "webfetch", Patterns: []string{"https://example.com"}}, true
		}
		return opencodetest.ToolResult{}, false
	}))
	ev := subscribe(t, f)
	s, _ := f.CreateSession(t.Context(), opencode.CreateSessionRequest{Title: "tools", Permission: []opencode.PermissionRule{
		{Permission: "webfetch", Pattern: "*", Action: "ask"}}})
	m, err := f.Prompt(t.Context(), s.ID, prompt(`TOOL:read {"filePath":"notes.txt"}`))
	if err != nil || m.Parts[1].Text != "Called read." {
		t.Fatalf("Prompt = %+v, %v", m, err)
	}
	if tool := mustMessages(t, f, s.ID)[1].Parts[1]; tool.State.Output != "file body" || tool.State.Title != "notes.txt" {
		t.Errorf("read part = %+v", tool.State)
	}
	if err := f.PromptAsync(t.Context(), s.ID, prompt(`TOOL:webfetch {"url":"https://example.com"}`)); err != nil {
		t.Fatal(err)
	}
	var asked opencode.EventProperties
	ev.until(s.ID, func(e opencode.Event, p opencode.EventProperties) bool {
		asked = p
		return e.Type == opencode.EventPermissionAsked
	})
	if asked.Permission != "webfetch" {
		t.Fatalf("asked = %+v", asked)
	}
	if err := f.ReplyPermission(t.Context(), "", asked.ID, opencode.PermissionReply{Reply: opencode.ReplyOnce}); err != nil {
		t.Fatal(err)
	}
	ev.untilType(s.ID, opencode.EventSessionIdle)
	if tool := mustMessages(t, f, s.ID)[4].Parts[1]; tool.State.Output != "page" {
		t.Errorf("webfetch part = %+v", tool.State)
	}
}

func TestFakeUntitledSessionGetsTitle(t *testing.T) {
	f := newFake(t)
	s, _ := f.CreateSession(t.Context(), opencode.CreateSessionRequest{ParentID: "ses_parent"})
	if !strings.HasPrefix(s.Title, "Child session - ") {
		t.Errorf("title = %q", s.Title)
	}
	if _, err := f.Prompt(t.Context(), s.ID, prompt("hi")); err != nil {
		t.Fatal(err)
	}
	got, _ := f.GetSession(t.Context(), s.ID)
	reqs := f.Requests()
	if got.Title != "Scripted title" || len(reqs) != 2 || reqs[0].Kind != opencodetest.KindTitle || reqs[1].Kind != opencodetest.KindChat {
		t.Errorf("title %q, requests %+v", got.Title, reqs)
	}
}

func TestNewFakeClientRejectsBadOptions(t *testing.T) {
	for name, opt := range map[string]opencodetest.FakeOption{
		"relative dir": opencodetest.WithFakeDirectory("project"),
		"empty dir":    opencodetest.WithFakeDirectory(""),
		"nil clock":    opencodetest.WithClock(nil),
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("NewFakeClient did not panic")
				}
			}()
			opencodetest.NewFakeClient(opt).Close()
		})
	}
}
