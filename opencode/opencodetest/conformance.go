package opencodetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/asyncagents/asyncagents/opencode"
)

// Harness describes the server behind the client that [TestClient] checks.
type Harness struct {
	// Directory is the project directory of the client's sessions: what Session.Directory,
	// Event.Directory and SessionStatus(ctx, Directory) refer to. Required.
	Directory string
	// Requests, when set, returns the model requests made so far ([Model.Requests] of the
	// server's model, or [FakeClient.Requests]); TestClient then also checks that a NoReply
	// prompt calls no model, and that a session's model is told the session's directory.
	Requests func() []Request
	// OtherDirectory, when set, is a second project directory the server serves with the
	// same model ([Server.NewProject]; any clean absolute path for a [FakeClient]):
	// TestClient then checks that a session created there belongs to that instance.
	OtherDirectory string
}

// CheckTimeout bounds each check of [TestClient]: how long it waits for a run or an event.
const CheckTimeout = 60 * time.Second

// permissionClient is the part of a client that lists and answers permission requests
// ([opencode.HTTPClient], [FakeClient]).
type permissionClient interface {
	Permissions(ctx context.Context, directory string) ([]opencode.Permission, error)
	ReplyPermission(ctx context.Context, directory, requestID string, reply opencode.PermissionReply) error
}

// TestClient checks that c behaves like OpenCode 1.18.33 serving the scripted model of this
// package: a [Server] (its [Server.Client]) or a [FakeClient]. It returns every violation it
// found, joined with errors.Join, or nil. It creates sessions and runs prompts driven by the
// model's directives (RUN:, SLEEP:, FAIL:), so the server's model must answer them.
//
// The checks: session creation and lookup (id shape and order, default titles, child
// sessions, an unknown id matching [opencode.ErrNotFound] as an [*opencode.APIError]); a
// NoReply prompt; a PromptAsync run with a bash tool (the order and shapes of its events, the
// reply carried whole by the events before the idle, and its final messages); a blocking Prompt; Messages with a limit; MessagesBefore paging; the status of a busy session
// and its abort; abort of an idle and an unknown session; the agent list; an unknown agent
// and an unknown model; a failed model call; a permission request and a session rule that
// allows it; a session created in [Harness.OtherDirectory] (its Directory, its events'
// Directory, the status of each instance, the working directory its model is told); and the
// event stream contract of [opencode.EventStream]. When c also has Permissions and ReplyPermission methods, like [opencode.HTTPClient] and
// [FakeClient], the permission check lists the request and rejects it; otherwise it aborts
// the session.
//
// Each check waits at most [CheckTimeout]; ctx bounds them all.
func TestClient(ctx context.Context, c opencode.Client, h Harness) error {
	if h.Directory == "" {
		return errors.New("opencodetest: TestClient: Harness.Directory is required")
	}
	checks := []struct {
		name string
		run  func(*checker)
	}{
		{"sessions", checkSessions},
		{"no reply", checkNoReply},
		{"message id", checkMessageID},
		{"paging", checkPaging},
		{"run", checkRun},
		{"blocking prompt", checkBlockingPrompt},
		{"abort busy", checkAbortBusy},
		{"abort idle", checkAbortIdle},
		{"agents", checkAgents},
		{"directory", checkDirectory},
		{"unknown agent", checkUnknownAgent},
		{"unknown model", checkUnknownModel},
		{"model failure", checkModelFailure},
		{"permission", checkPermission},
		{"permission rule", checkPermissionRule},
		{"event stream", checkEventStream},
	}
	var errs []error
	for _, ch := range checks {
		cctx, cancel := context.WithTimeout(ctx, CheckTimeout)
		k := &checker{ctx: cctx, c: c, h: h, name: ch.name}
		ch.run(k)
		k.closeStreams()
		cancel()
		errs = append(errs, k.errs...)
		if ctx.Err() != nil {
			errs = append(errs, fmt.Errorf("opencodetest: TestClient: %w", ctx.Err()))
			break
		}
	}
	return errors.Join(errs...)
}

// checker collects the violations of one check.
type checker struct {
	ctx     context.Context
	c       opencode.Client
	h       Harness
	name    string
	errs    []error
	streams []*eventReader
}

func (k *checker) errorf(format string, args ...any) {
	k.errs = append(k.errs, fmt.Errorf("%s: "+format, append([]any{k.name}, args...)...))
}

// ok records err (with what was being done) and reports whether it was nil.
func (k *checker) ok(err error, doing string) bool {
	if err != nil {
		k.errorf("%s: %v", doing, err)
	}
	return err == nil
}

func (k *checker) session(req opencode.CreateSessionRequest) *opencode.Session {
	s, err := k.c.CreateSession(k.ctx, req)
	if !k.ok(err, "CreateSession") {
		return nil
	}
	return s
}

func (k *checker) messages(id string, limit int) []opencode.Message {
	m, err := k.c.Messages(k.ctx, id, limit)
	if !k.ok(err, "Messages") {
		return nil
	}
	return m
}

func text(s string) []opencode.TextPartInput { return []opencode.TextPartInput{opencode.NewText(s)} }

// eventReader reads one stream with iter.Pull2, so several waits share one range over All.
type eventReader struct {
	k      *checker
	stream opencode.EventStream
	next   func() (opencode.Event, error, bool)
	stop   func()
	err    error
}

// probeSession is the unknown session whose aborts subscribe uses as a probe.
const probeSession = "ses_zzzzzzzzzzzzzzzzzzzzzprobe"

// subscribe opens a stream, consumes its first event, which must be server.connected, and
// returns once the stream delivers events. OpenCode 1.18.33 sends server.connected before a
// /global/event subscription is live: events of the next few tens of milliseconds can be
// lost. So subscribe aborts an unknown session every 50 ms (which emits session.idle for it)
// until one of those events arrives.
func (k *checker) subscribe() *eventReader {
	st, err := k.c.Events(k.ctx)
	if !k.ok(err, "Events") {
		return nil
	}
	r := &eventReader{k: k, stream: st}
	r.next, r.stop = iter.Pull2(st.All())
	k.streams = append(k.streams, r)
	if ev, err, ok := r.next(); !ok || err != nil || ev.Type != opencode.EventServerConnected {
		k.errorf("first event = %q (%v), want %s", ev.Type, err, opencode.EventServerConnected)
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			_ = k.c.Abort(k.ctx, probeSession)
			select {
			case <-tick.C:
			case <-stop:
				return
			case <-k.ctx.Done():
				return
			}
		}
	}()
	r.until(probeSession, "the stream to deliver events", isType(opencode.EventSessionIdle))
	close(stop)
	<-done
	return r
}

func (k *checker) closeStreams() {
	for _, r := range k.streams {
		r.stream.Close()
		r.stop()
	}
}

type sessionEv struct {
	opencode.Event
	p opencode.EventProperties
}

// until returns the events of sessionID up to and including the first for which stop
// reports true. It records a violation when the stream ends first.
func (r *eventReader) until(sessionID, what string, stop func(sessionEv) bool) []sessionEv {
	var got []sessionEv
	if r == nil || r.err != nil {
		return nil
	}
	for {
		ev, err, ok := r.next()
		if !ok || err != nil {
			r.err = err
			r.k.errorf("waiting for %s: stream ended: %v (after %s)", what, err, types(got))
			return got
		}
		p, err := ev.Decode()
		if err != nil || p.SessionID != sessionID {
			continue
		}
		got = append(got, sessionEv{ev, p})
		if stop(got[len(got)-1]) {
			return got
		}
	}
}

// idles waits for the n-th session.idle of sessionID.
func (r *eventReader) idles(sessionID string, n int) []sessionEv {
	seen := 0
	return r.until(sessionID, fmt.Sprintf("session.idle #%d", n), func(e sessionEv) bool {
		if e.Type == opencode.EventSessionIdle {
			seen++
		}
		return seen == n
	})
}

func types(evs []sessionEv) string {
	var b []string
	for _, e := range evs {
		t := e.Type
		if e.p.Status != nil {
			t += ":" + e.p.Status.Type
		}
		b = append(b, t)
	}
	return "[" + strings.Join(b, " ") + "]"
}

func indexOf(evs []sessionEv, from int, match func(sessionEv) bool) int {
	for i := max(from, 0); i < len(evs); i++ {
		if match(evs[i]) {
			return i
		}
	}
	return -1
}

func isStatus(typ string) func(sessionEv) bool {
	return func(e sessionEv) bool {
		return e.Type == opencode.EventSessionStatus && e.p.Status != nil && e.p.Status.Type == typ
	}
}

func isType(typ string) func(sessionEv) bool { return func(e sessionEv) bool { return e.Type == typ } }

// info decodes the message info of a message.updated event.
func (e sessionEv) info() (opencode.MessageInfo, bool) {
	var m opencode.Message
	if e.Type != opencode.EventMessageUpdated || decodeJSON(e.p.Info, &m.Info) != nil {
		return opencode.MessageInfo{}, false
	}
	return m.Info, true
}

const unknownSession = "ses_zzzzzzzzzzzzzzzzzzzzzzzzzz"

var sessionIDShape = regexp.MustCompile(`^ses_[0-9a-f]{12}[0-9A-Za-z]{14}$`)

func checkSessions(k *checker) {
	a := k.session(opencode.CreateSessionRequest{Title: "conformance a"})
	b := k.session(opencode.CreateSessionRequest{Title: "conformance b"})
	if a == nil || b == nil {
		return
	}
	for _, s := range []*opencode.Session{a, b} {
		if !sessionIDShape.MatchString(s.ID) {
			k.errorf("session id %q, want ses_ + 12 hex digits + 14 base62 characters", s.ID)
		}
		if s.Directory != k.h.Directory || s.Version == "" || s.Time.Created <= 0 || s.Time.Updated < s.Time.Created || s.ParentID != "" {
			k.errorf("created session = %+v, want directory %s, a version and times", s, k.h.Directory)
		}
	}
	if !(b.ID < a.ID) {
		k.errorf("session ids %s then %s: a newer session must sort first", a.ID, b.ID)
	}
	if got, err := k.c.GetSession(k.ctx, a.ID); k.ok(err, "GetSession") && (got.ID != a.ID || got.Title != "conformance a" || got.Directory != k.h.Directory) {
		k.errorf("GetSession = %+v, want %+v", got, a)
	}
	if s := k.session(opencode.CreateSessionRequest{}); s != nil && !strings.HasPrefix(s.Title, "New session - ") {
		k.errorf("untitled session title %q, want \"New session - <time>\"", s.Title)
	}

	rules := []opencode.PermissionRule{{Permission: "asyncagents_*", Pattern: "*", Action: "deny"}}
	child := k.session(opencode.CreateSessionRequest{ParentID: a.ID, Title: "conformance child", Permission: rules})
	if child != nil {
		got, err := k.c.GetSession(k.ctx, child.ID)
		for _, s := range []*opencode.Session{child, got} {
			if err == nil && (s.ParentID != a.ID || s.Directory != k.h.Directory || s.Title != "conformance child" || !slices.Equal(s.Permission, rules)) {
				k.errorf("child session = %+v, want parent %s and the permission rules", s, a.ID)
			}
		}
		k.ok(err, "GetSession(child)")
	}
	if s := k.session(opencode.CreateSessionRequest{ParentID: a.ID}); s != nil && !strings.HasPrefix(s.Title, "Child session - ") {
		k.errorf("untitled child title %q, want \"Child session - <time>\"", s.Title)
	}
	if _, err := k.c.CreateSession(k.ctx, opencode.CreateSessionRequest{ParentID: "bogus"}); !isAPIError(err, 400) {
		k.errorf("CreateSession(parent \"bogus\") = %v, want HTTP 400", err)
	}

	_, err := k.c.GetSession(k.ctx, unknownSession)
	var ae *opencode.APIError
	if !errors.Is(err, opencode.ErrNotFound) || !errors.As(err, &ae) || ae.StatusCode != 404 || ae.Name != "NotFoundError" ||
		ae.Message != "Session not found: "+unknownSession {
		k.errorf("GetSession(unknown) = %v, want a 404 NotFoundError", err)
	}
	if _, err := k.c.Messages(k.ctx, unknownSession, 0); !errors.Is(err, opencode.ErrNotFound) {
		k.errorf("Messages(unknown) = %v, want ErrNotFound", err)
	}
	if err := k.c.PromptAsync(k.ctx, unknownSession, opencode.PromptRequest{Parts: text("x")}); !errors.Is(err, opencode.ErrNotFound) {
		k.errorf("PromptAsync(unknown) = %v, want ErrNotFound", err)
	}
	if _, err := k.c.Prompt(k.ctx, unknownSession, opencode.PromptRequest{Parts: text("x")}); !errors.Is(err, opencode.ErrNotFound) {
		k.errorf("Prompt(unknown) = %v, want ErrNotFound", err)
	}
}

func isAPIError(err error, status int) bool {
	var ae *opencode.APIError
	return errors.As(err, &ae) && ae.StatusCode == status
}

func checkNoReply(k *checker) {
	s := k.session(opencode.CreateSessionRequest{Title: "conformance no reply"})
	if s == nil {
		return
	}
	token := "CONFORMANCE_TOKEN=" + s.ID
	m, err := k.c.Prompt(k.ctx, s.ID, opencode.PromptRequest{NoReply: true,
		Parts: []opencode.TextPartInput{opencode.NewSyntheticText(token), opencode.NewText("second part")}})
	if !k.ok(err, "Prompt(NoReply)") {
		return
	}
	if m.Info.Role != opencode.RoleUser || m.Info.SessionID != s.ID || !strings.HasPrefix(m.Info.ID, "msg_") || len(m.Parts) != 2 ||
		!m.Parts[0].Synthetic || m.Parts[0].Text != token || m.Parts[1].Synthetic || m.Parts[1].Text != "second part" {
		k.errorf("NoReply prompt returned %+v, want the user message with both parts", m)
	}
	if msgs := k.messages(s.ID, 0); len(msgs) != 1 || msgs[0].Info.ID != m.Info.ID {
		k.errorf("messages after NoReply = %d, want just the user message", len(msgs))
	}
	if k.h.Requests != nil {
		for _, r := range k.h.Requests() {
			if r.Contains(token) {
				k.errorf("a NoReply prompt called the model")
			}
		}
	}
}

// checkPaging: MessagesBefore pages from the newest message back, oldest first within a
// page, with a cursor on every page but the last (also when the last page is exactly full);
// the pages rebuild the list of Messages exactly, whatever the page sizes, and a cursor still
// reads the same older messages after a newer message arrived. A bad cursor is HTTP 400, a
// limit below 1 an error, an unknown session ErrNotFound.
func checkPaging(k *checker) {
	s := k.session(opencode.CreateSessionRequest{Title: "conformance paging"})
	if s == nil {
		return
	}
	for i := range 7 {
		if _, err := k.c.Prompt(k.ctx, s.ID, opencode.PromptRequest{NoReply: true, Parts: text(fmt.Sprint("page message ", i))}); !k.ok(err, "Prompt(NoReply)") {
			return
		}
	}
	all := k.messages(s.ID, 0)
	if len(all) != 7 {
		k.errorf("messages = %d, want 7", len(all))
		return
	}
	ids := func(msgs []opencode.Message) []string {
		var out []string
		for _, m := range msgs {
			out = append(out, m.Info.ID)
		}
		return out
	}
	want := ids(all)
	// read pages with the given limits (the last one repeats) from cursor, and check them.
	read := func(cursor string, limits ...int) []string {
		var got []string
		for i := 0; ; i++ {
			limit := limits[min(i, len(limits)-1)]
			page, next, err := k.c.MessagesBefore(k.ctx, s.ID, limit, cursor)
			if !k.ok(err, fmt.Sprintf("MessagesBefore(limit %d, page %d)", limit, i)) {
				return nil
			}
			if len(page) == 0 || len(page) > limit {
				k.errorf("limits %v: page %d has %d messages", limits, i, len(page))
				return nil
			}
			got = append(ids(page), got...)
			if next == "" {
				return got
			}
			if i > len(want) {
				k.errorf("limits %v: more pages than messages", limits)
				return nil
			}
			cursor = next
		}
	}
	for _, limits := range [][]int{{3}, {2}, {1}, {7}, {8}, {100}, {4, 3}, {5, 2}, {6, 1}, {2, 4, 10}} {
		if got := read("", limits...); got != nil && !slices.Equal(got, want) {
			k.errorf("pages of %v rebuilt %v, want %v", limits, got, want)
		}
	}
	if page, next, err := k.c.MessagesBefore(k.ctx, s.ID, 7, ""); k.ok(err, "MessagesBefore(limit 7)") && (next != "" || len(page) != 7) {
		k.errorf("MessagesBefore(limit = all 7) = %d messages, cursor %q; want all and no cursor", len(page), next)
	}

	first, next, err := k.c.MessagesBefore(k.ctx, s.ID, 3, "")
	if k.ok(err, "MessagesBefore(limit 3)") && next != "" {
		if !slices.Equal(ids(first), want[4:]) {
			k.errorf("first page %v, want the newest three %v", ids(first), want[4:])
		}
		if _, err := k.c.Prompt(k.ctx, s.ID, opencode.PromptRequest{NoReply: true, Parts: text("newer")}); k.ok(err, "Prompt(NoReply)") {
			if got := read(next, 3); got != nil && !slices.Equal(got, want[:4]) {
				k.errorf("after a newer message, the cursor read %v, want %v", got, want[:4])
			}
		}
	}

	if _, _, err := k.c.MessagesBefore(k.ctx, s.ID, 2, "abc"); !isAPIError(err, 400) {
		k.errorf("MessagesBefore(cursor \"abc\") = %v, want HTTP 400", err)
	}
	if _, _, err := k.c.MessagesBefore(k.ctx, s.ID, 0, ""); err == nil {
		k.errorf("MessagesBefore(limit 0) succeeded, want an error")
	}
	if _, _, err := k.c.MessagesBefore(k.ctx, unknownSession, 2, ""); !errors.Is(err, opencode.ErrNotFound) {
		k.errorf("MessagesBefore(unknown) = %v, want ErrNotFound", err)
	}
}

// checkMessageID: a prompt with a client-chosen message id creates the message with that id,
// GET /session/{id}/message/{messageID} finds it (and an unknown id is NotFound), and a prompt
// that re-uses the id adds its parts to that message instead of creating another.
func checkMessageID(k *checker) {
	s := k.session(opencode.CreateSessionRequest{Title: "conformance message id"})
	if s == nil {
		return
	}
	first, err := k.c.Prompt(k.ctx, s.ID, opencode.PromptRequest{NoReply: true, Parts: text("first")})
	if !k.ok(err, "Prompt(NoReply)") {
		return
	}
	id := opencode.NewMessageID(time.Now(), first.Info.ID)
	m, err := k.c.Prompt(k.ctx, s.ID, opencode.PromptRequest{NoReply: true, MessageID: id, Parts: text("chosen")})
	if !k.ok(err, "Prompt(MessageID)") {
		return
	}
	if m.Info.ID != id {
		k.errorf("prompt with messageID %s created %s", id, m.Info.ID)
	}
	got, err := k.c.Message(k.ctx, s.ID, id)
	if k.ok(err, "Message") && (got.Info.ID != id || len(got.Parts) != 1 || got.Parts[0].Text != "chosen") {
		k.errorf("Message(%s) = %+v", id, got)
	}
	if _, err := k.c.Message(k.ctx, s.ID, opencode.NewMessageID(time.Now(), id)); !errors.Is(err, opencode.ErrNotFound) {
		k.errorf("Message of an unknown id = %v, want ErrNotFound", err)
	}
	if _, err := k.c.Message(k.ctx, "ses_"+strings.Repeat("0", 26), id); !errors.Is(err, opencode.ErrNotFound) {
		k.errorf("Message in an unknown session = %v, want ErrNotFound", err)
	}
	if _, err := k.c.Prompt(k.ctx, s.ID, opencode.PromptRequest{NoReply: true, MessageID: id, Parts: text("again")}); !k.ok(err, "Prompt(same MessageID)") {
		return
	}
	msgs := k.messages(s.ID, 0)
	if len(msgs) != 2 || msgs[1].Info.ID != id || len(msgs[1].Parts) != 2 {
		k.errorf("after re-using the id: %d messages, last %+v; want 2, the last with both parts", len(msgs), msgs[len(msgs)-1].Info)
	}
}

func checkRun(k *checker) {
	events := k.subscribe()
	s := k.session(opencode.CreateSessionRequest{Title: "conformance run"})
	if s == nil || events == nil {
		return
	}
	if !k.ok(k.c.PromptAsync(k.ctx, s.ID, opencode.PromptRequest{Parts: text("RUN:echo conformance-run")}), "PromptAsync") {
		return
	}
	evs := events.idles(s.ID, 1)
	if len(evs) == 0 {
		return
	}
	user := indexOf(evs, 0, func(e sessionEv) bool { i, ok := e.info(); return ok && i.Role == opencode.RoleUser })
	busy := indexOf(evs, 0, isStatus("busy"))
	asst := indexOf(evs, 0, func(e sessionEv) bool { i, ok := e.info(); return ok && i.Role == opencode.RoleAssistant })
	if user < 0 || busy < user || asst < busy {
		k.errorf("events %s: want the user message, then session.status busy, then an assistant message", types(evs))
	}
	var states []string
	for _, e := range evs {
		if e.Type == opencode.EventMessagePartUpdate && e.p.Part != nil && e.p.Part.Type == opencode.PartTool {
			if st := e.p.Part.State.Status; len(states) == 0 || states[len(states)-1] != st {
				states = append(states, st)
			}
			if e.p.Part.State.Status == opencode.ToolCompleted && e.p.Part.State.Output != "conformance-run\n" {
				k.errorf("completed tool part event output %q", e.p.Part.State.Output)
			}
		}
	}
	if !slices.Equal(states, []string{opencode.ToolPending, opencode.ToolRunning, opencode.ToolCompleted}) {
		k.errorf("tool part states %v, want pending, running, completed", states)
	}
	toolCalls := indexOf(evs, 0, func(e sessionEv) bool { i, ok := e.info(); return ok && i.Finish == "tool-calls" })
	stop := indexOf(evs, 0, func(e sessionEv) bool { i, ok := e.info(); return ok && i.Finish == "stop" })
	if toolCalls < 0 || stop < toolCalls {
		k.errorf("events %s: want an assistant message with finish tool-calls, then one with stop", types(evs))
	}
	if n := len(evs); n < 2 || !isStatus("idle")(evs[n-2]) || indexOf(evs, 0, isType(opencode.EventSessionError)) >= 0 {
		k.errorf("events %s: want session.status idle right before session.idle, and no session.error", types(evs))
	}
	if st, err := k.c.SessionStatus(k.ctx, k.h.Directory); k.ok(err, "SessionStatus") {
		if _, busy := st[s.ID]; busy {
			k.errorf("status of an idle session = %v, want it absent", st[s.ID])
		}
	}

	msgs := k.messages(s.ID, 0)
	if len(msgs) != 3 {
		k.errorf("messages = %d, want user, assistant (tool-calls), assistant (stop)", len(msgs))
		return
	}
	u, a1, a2 := msgs[0], msgs[1], msgs[2]
	if u.Info.Role != opencode.RoleUser || len(u.Parts) != 1 || u.Parts[0].Text != "RUN:echo conformance-run" {
		k.errorf("user message = %+v", u)
	}
	for i, m := range msgs[1:] {
		in := m.Info
		if in.Role != opencode.RoleAssistant || in.ParentID != u.Info.ID || in.Agent != "build" || in.Mode != "build" ||
			in.ModelID == "" || in.Provider == "" || in.Time.Created <= 0 || in.Time.Completed < in.Time.Created || in.Error != nil {
			k.errorf("assistant message %d info = %+v", i+1, in)
		}
	}
	for i := 1; i < len(msgs); i++ {
		if !(msgs[i-1].Info.ID < msgs[i].Info.ID) {
			k.errorf("message ids %s, %s: want them in creation order", msgs[i-1].Info.ID, msgs[i].Info.ID)
		}
	}
	if got := partTypes(a1); a1.Info.Finish != "tool-calls" || !slices.Equal(got, []string{"step-start", "tool", "step-finish"}) {
		k.errorf("first step: finish %q, parts %v; want tool-calls, [step-start tool step-finish]", a1.Info.Finish, got)
	} else if p := a1.Parts[1]; p.Tool != "bash" || p.CallID == "" || p.State.Status != opencode.ToolCompleted ||
		p.State.Output != "conformance-run\n" || p.State.Title != "echo conformance-run" && p.State.Title != "scripted step" {
		// The title is the command; before OpenCode 1.17 it was the call's description.
		k.errorf("tool part = %+v, state %+v", p, p.State)
	} else if code, ok := p.State.ExitCode(); !ok || code != 0 {
		k.errorf("tool exit code = %v, %v; want 0", code, ok)
	}
	if got := partTypes(a2); a2.Info.Finish != "stop" || !slices.Equal(got, []string{"step-start", "text", "step-finish"}) {
		k.errorf("last step: finish %q, parts %v; want stop, [step-start text step-finish]", a2.Info.Finish, got)
	} else if t := a2.Parts[1].Text; t != "Ran 1 command(s); last output: conformance-run" {
		k.errorf("reply text %q", t)
	}
	// The events up to the first idle carry the reply whole: its text part with an end time
	// and the final text, and its info completed with finish stop.
	var streamed string
	completed := false
	for _, e := range evs {
		if p := e.p.Part; e.Type == opencode.EventMessagePartUpdate && p != nil && p.MessageID == a2.Info.ID &&
			p.Type == opencode.PartText && strings.Contains(string(p.Raw), `"end":`) {
			streamed = p.Text
		}
		if i, ok := e.info(); ok && i.ID == a2.Info.ID && i.Finish == "stop" && i.Time.Completed != 0 {
			completed = true
		}
	}
	if len(a2.Parts) > 1 && (streamed != a2.Parts[1].Text || !completed) {
		k.errorf("events before the idle: final text %q, completed %v; want %q, true", streamed, completed, a2.Parts[1].Text)
	}
	if last2 := k.messages(s.ID, 2); len(last2) != 2 || last2[0].Info.ID != a1.Info.ID || last2[1].Info.ID != a2.Info.ID {
		k.errorf("Messages(limit 2) = %d messages, want the last two, oldest first", len(last2))
	}
	if all := k.messages(s.ID, 100); len(all) != 3 {
		k.errorf("Messages(limit 100) = %d messages, want all 3", len(all))
	}
}

func partTypes(m opencode.Message) []string {
	var t []string
	for _, p := range m.Parts {
		t = append(t, p.Type)
	}
	return t
}

func checkBlockingPrompt(k *checker) {
	s := k.session(opencode.CreateSessionRequest{Title: "conformance blocking"})
	if s == nil {
		return
	}
	m, err := k.c.Prompt(k.ctx, s.ID, opencode.PromptRequest{Parts: text("RUN:echo conformance-sync")})
	if !k.ok(err, "Prompt") {
		return
	}
	if m.Info.Role != opencode.RoleAssistant || m.Info.Finish != "stop" || m.Info.Time.Completed == 0 || len(m.Parts) < 2 ||
		m.Parts[len(m.Parts)-2].Text != "Ran 1 command(s); last output: conformance-sync" {
		k.errorf("Prompt returned %+v, want the last assistant message", m)
	}
	if msgs := k.messages(s.ID, 0); len(msgs) != 3 || msgs[2].Info.ID != m.Info.ID {
		k.errorf("messages after Prompt = %d, want 3 ending with the returned one", len(msgs))
	}
}

func checkAbortBusy(k *checker) {
	events := k.subscribe()
	s := k.session(opencode.CreateSessionRequest{Title: "conformance abort"})
	if s == nil || events == nil {
		return
	}
	if !k.ok(k.c.PromptAsync(k.ctx, s.ID, opencode.PromptRequest{Parts: text("SLEEP:30")}), "PromptAsync") {
		return
	}
	// Abort while the model streams its text: the run's state is then the same on every
	// server (earlier, OpenCode may still be writing the step's first updates).
	started := events.streaming(s.ID)
	if indexOf(started, 0, isStatus("busy")) < 0 {
		k.errorf("events %s: want session.status busy before the text part", types(started))
	}
	for _, dir := range []string{"", k.h.Directory} {
		if st, err := k.c.SessionStatus(k.ctx, dir); k.ok(err, "SessionStatus") && st[s.ID].Type != "busy" {
			k.errorf("SessionStatus(%q) of a running session = %v, want busy", dir, st)
		}
	}
	if !k.ok(k.c.Abort(k.ctx, s.ID), "Abort") {
		return
	}
	evs := events.idles(s.ID, 2)
	errAt := indexOf(evs, 0, isType(opencode.EventSessionError))
	if errAt < 0 || evs[errAt].p.Error.Name != "MessageAbortedError" || indexOf(evs, 0, isType(opencode.EventSessionIdle)) < errAt {
		k.errorf("events after Abort %s: want session.error MessageAbortedError, then idle", types(evs))
	}
	if msgs := k.messages(s.ID, 1); len(msgs) == 1 {
		in := msgs[0].Info
		if in.Role != opencode.RoleAssistant || in.Error == nil || in.Error.Name != "MessageAbortedError" ||
			in.Error.Message() != "Aborted" || in.Time.Completed == 0 || in.Finish != "" {
			k.errorf("aborted message info = %+v, error %+v", in, in.Error)
		}
	}
	if st, err := k.c.SessionStatus(k.ctx, ""); k.ok(err, "SessionStatus") {
		if _, busy := st[s.ID]; busy {
			k.errorf("status after Abort = %v, want absent", st[s.ID])
		}
	}
}

// streaming returns the events of sessionID up to the first update of the text part its
// assistant message streams.
func (r *eventReader) streaming(sessionID string) []sessionEv {
	var asst string
	return r.until(sessionID, "the streamed text part", func(e sessionEv) bool {
		if i, ok := e.info(); ok && i.Role == opencode.RoleAssistant {
			asst = i.ID
		}
		return e.Type == opencode.EventMessagePartUpdate && e.p.Part != nil && e.p.Part.Type == opencode.PartText &&
			asst != "" && e.p.Part.MessageID == asst
	})
}

func checkAbortIdle(k *checker) {
	s := k.session(opencode.CreateSessionRequest{Title: "conformance idle abort"})
	events := k.subscribe()
	if s == nil || events == nil {
		return
	}
	for _, id := range []string{s.ID, unknownSession} {
		if !k.ok(k.c.Abort(k.ctx, id), "Abort(idle or unknown)") {
			continue
		}
		evs := events.idles(id, 1)
		if len(evs) != 2 || !isStatus("idle")(evs[0]) {
			k.errorf("events after Abort(%s) %s: want session.status idle, session.idle", id, types(evs))
		}
	}
}

func checkAgents(k *checker) {
	agents, err := k.c.Agents(k.ctx, "")
	if !k.ok(err, "Agents") {
		return
	}
	want := map[string]opencode.Agent{
		"build": {Mode: "primary"}, "plan": {Mode: "primary"}, "general": {Mode: "subagent"}, "explore": {Mode: "subagent"},
		"compaction": {Mode: "primary", Hidden: true}, "summary": {Mode: "primary", Hidden: true}, "title": {Mode: "primary", Hidden: true},
	}
	for _, a := range agents {
		if w, ok := want[a.Name]; ok {
			if a.Mode != w.Mode || a.Hidden != w.Hidden || (!a.Hidden && a.Description == "") {
				k.errorf("agent %s = %+v, want mode %s, hidden %v", a.Name, a, w.Mode, w.Hidden)
			}
			delete(want, a.Name)
		}
	}
	for name := range want {
		k.errorf("agent %s missing", name)
	}
}

// checkDirectory: a child session created in another directory than its parent's belongs
// to that directory's instance, whatever the client's default.
func checkDirectory(k *checker) {
	other := k.h.OtherDirectory
	if other == "" {
		return
	}
	events := k.subscribe()
	parent := k.session(opencode.CreateSessionRequest{Title: "conformance directory parent"})
	if parent == nil || events == nil {
		return
	}
	s := k.session(opencode.CreateSessionRequest{Directory: other, ParentID: parent.ID, Title: "conformance directory"})
	if s == nil {
		return
	}
	if s.Directory != other || s.ParentID != parent.ID || parent.Directory != k.h.Directory {
		k.errorf("session created in %s = %+v (parent %+v)", other, s, parent)
	}
	if got, err := k.c.GetSession(k.ctx, s.ID); k.ok(err, "GetSession") && got.Directory != other {
		k.errorf("GetSession(%s).Directory = %q, want %q", s.ID, got.Directory, other)
	}
	if agents, err := k.c.Agents(k.ctx, other); k.ok(err, "Agents") &&
		!slices.ContainsFunc(agents, func(a opencode.Agent) bool { return a.Name == "build" }) {
		k.errorf("Agents(%s) = %v, want build among them", other, agents)
	}
	seen := 0
	if k.h.Requests != nil {
		seen = len(k.h.Requests())
	}
	if !k.ok(k.c.PromptAsync(k.ctx, s.ID, opencode.PromptRequest{Parts: text("SLEEP:30 directory")}), "PromptAsync") {
		return
	}
	evs := events.streaming(s.ID)
	for dir, busy := range map[string]bool{other: true, "": false, k.h.Directory: false} {
		if st, err := k.c.SessionStatus(k.ctx, dir); k.ok(err, "SessionStatus") && (st[s.ID].Type == "busy") != busy {
			k.errorf("SessionStatus(%q)[%s] = %+v, want busy %v", dir, s.ID, st[s.ID], busy)
		}
	}
	k.ok(k.c.Abort(k.ctx, s.ID), "Abort")
	evs = append(evs, events.idles(s.ID, 2)...)
	for _, e := range evs {
		if e.Directory != other {
			k.errorf("event %s of the session has directory %q, want %q", e.Type, e.Directory, other)
			break
		}
	}
	if k.h.Requests == nil {
		return
	}
	var sys string
	for _, r := range k.h.Requests()[seen:] {
		if _, u := r.LastUser(); r.Kind == KindChat && strings.Contains(u, "SLEEP:30 directory") {
			sys = r.System()
		}
	}
	if want := "Working directory: " + other + "\n"; !strings.Contains(sys+"\n", want) {
		k.errorf("the model of a session in %s was not told %q; system prompt:\n%s", other, strings.TrimSpace(want), head(sys, 2000))
	}
}

// head returns the first n bytes of s, for messages.
func head(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func checkUnknownAgent(k *checker) {
	s := k.session(opencode.CreateSessionRequest{Title: "conformance unknown agent"})
	events := k.subscribe()
	if s == nil || events == nil {
		return
	}
	if !k.ok(k.c.PromptAsync(k.ctx, s.ID, opencode.PromptRequest{Agent: "no-such-agent", Parts: text("hi")}), "PromptAsync(unknown agent)") {
		return
	}
	n := 0
	evs := events.until(s.ID, "two session.error events", func(e sessionEv) bool {
		if e.Type == opencode.EventSessionError {
			n++
		}
		return n == 2
	})
	if len(evs) != 2 || evs[0].p.Error.Name != "UnknownError" ||
		evs[0].p.Error.Message() != `Agent not found: "no-such-agent". Available agents: build, explore, general, plan` {
		k.errorf("events %s: want just two session.error events, the first naming the agent", types(evs))
	}
	if msgs := k.messages(s.ID, 0); len(msgs) != 0 {
		k.errorf("messages = %d, want none", len(msgs))
	}
	if st, err := k.c.SessionStatus(k.ctx, ""); k.ok(err, "SessionStatus") {
		if _, busy := st[s.ID]; busy {
			k.errorf("status = %v, want absent", st[s.ID])
		}
	}
	if _, err := k.c.Prompt(k.ctx, s.ID, opencode.PromptRequest{Agent: "no-such-agent", Parts: text("hi")}); !isAPIError(err, 500) {
		k.errorf("Prompt(unknown agent) = %v, want HTTP 500", err)
	}
}

func checkUnknownModel(k *checker) {
	events := k.subscribe()
	s := k.session(opencode.CreateSessionRequest{Title: "conformance unknown model"})
	if s == nil || events == nil {
		return
	}
	model := &opencode.Model{ProviderID: ProviderID, ModelID: "no-such-model"}
	if !k.ok(k.c.PromptAsync(k.ctx, s.ID, opencode.PromptRequest{Model: model, Parts: text("hi")}), "PromptAsync(unknown model)") {
		return
	}
	evs := events.idles(s.ID, 1)
	busy, errAt := indexOf(evs, 0, isStatus("busy")), indexOf(evs, 0, isType(opencode.EventSessionError))
	if busy < 0 || errAt < busy || evs[errAt].p.Error.Message() != "Model not found: "+ProviderID+"/no-such-model." {
		k.errorf("events %s: want busy, session.error \"Model not found\", idle", types(evs))
	}
	if msgs := k.messages(s.ID, 0); len(msgs) != 1 || msgs[0].Info.Role != opencode.RoleUser {
		k.errorf("messages = %d, want only the user message", len(msgs))
	}
}

func checkModelFailure(k *checker) {
	events := k.subscribe()
	s := k.session(opencode.CreateSessionRequest{Title: "conformance model failure"})
	if s == nil || events == nil {
		return
	}
	if !k.ok(k.c.PromptAsync(k.ctx, s.ID, opencode.PromptRequest{Parts: text("FAIL:400")}), "PromptAsync") {
		return
	}
	evs := events.idles(s.ID, 2)
	errAt := indexOf(evs, 0, isType(opencode.EventSessionError))
	if errAt < 0 || evs[errAt].p.Error.Name != "APIError" {
		k.errorf("events %s: want session.error APIError", types(evs))
	}
	msgs := k.messages(s.ID, 0)
	if len(msgs) != 2 {
		k.errorf("messages = %d, want the user message and the failed assistant message", len(msgs))
		return
	}
	in := msgs[1].Info
	var data struct {
		StatusCode  int  `json:"statusCode"`
		IsRetryable bool `json:"isRetryable"`
	}
	if in.Error == nil || in.Error.Name != "APIError" || decodeJSON(in.Error.Data, &data) != nil || data.StatusCode != 400 || data.IsRetryable ||
		in.Finish != "" || in.Time.Completed == 0 || len(msgs[1].Parts) != 0 {
		k.errorf("failed message info = %+v, error %+v, parts %d", in, in.Error, len(msgs[1].Parts))
	}
}

func checkPermission(k *checker) {
	events := k.subscribe()
	s := k.session(opencode.CreateSessionRequest{Title: "conformance permission"})
	if s == nil || events == nil {
		return
	}
	if !k.ok(k.c.PromptAsync(k.ctx, s.ID, opencode.PromptRequest{Parts: text("RUN:cat /no/such/conformance.txt")}), "PromptAsync") {
		return
	}
	evs := events.until(s.ID, "permission.asked", isType(opencode.EventPermissionAsked))
	if len(evs) == 0 || evs[len(evs)-1].Type != opencode.EventPermissionAsked {
		return
	}
	var asked opencode.Permission
	if err := decodeJSON(evs[len(evs)-1].Properties, &asked); err != nil || !strings.HasPrefix(asked.ID, "per_") ||
		asked.Permission != "external_directory" || !slices.Equal(asked.Patterns, []string{"/no/such/*"}) ||
		asked.Tool == nil || asked.Tool.CallID == "" {
		k.errorf("permission.asked = %+v (%v), want external_directory for /no/such/*", asked, err)
	}
	if st, err := k.c.SessionStatus(k.ctx, ""); k.ok(err, "SessionStatus") && st[s.ID].Type != "busy" {
		k.errorf("status while asking = %v, want busy", st[s.ID])
	}
	if msgs := k.messages(s.ID, 1); len(msgs) == 1 {
		if p := toolPart(msgs[0]); p == nil || p.State.Status != opencode.ToolRunning {
			k.errorf("tool part while asking = %+v, want running", p)
		}
	}
	pc, ok := k.c.(permissionClient)
	if !ok {
		if k.ok(k.c.Abort(k.ctx, s.ID), "Abort") {
			events.idles(s.ID, 2)
			if msgs := k.messages(s.ID, 1); len(msgs) == 1 {
				if p := toolPart(msgs[0]); p == nil || p.State.Status != opencode.ToolError || p.State.Error != "Tool execution aborted" {
					k.errorf("tool part after Abort = %+v, want error \"Tool execution aborted\"", p)
				}
			}
		}
		return
	}
	for _, dir := range []string{"", k.h.Directory} {
		list, err := pc.Permissions(k.ctx, dir)
		if k.ok(err, "Permissions") && !slices.ContainsFunc(list, func(p opencode.Permission) bool {
			return p.ID == asked.ID && p.SessionID == s.ID && slices.Equal(p.Patterns, asked.Patterns)
		}) {
			k.errorf("Permissions(%q) = %+v, want the pending request %s", dir, list, asked.ID)
		}
	}
	reject := opencode.PermissionReply{Reply: opencode.ReplyReject, Message: "conformance says no"}
	if !k.ok(pc.ReplyPermission(k.ctx, "", asked.ID, reject), "ReplyPermission") {
		return
	}
	evs = events.idles(s.ID, 1)
	replied := indexOf(evs, 0, isType(opencode.EventPermissionReplied))
	toolErr := indexOf(evs, 0, func(e sessionEv) bool {
		return e.Type == opencode.EventMessagePartUpdate && e.p.Part != nil && e.p.Part.State != nil && e.p.Part.State.Status == opencode.ToolError
	})
	if replied < 0 || toolErr < replied {
		k.errorf("events after the reply %s: want permission.replied, then the tool part with status error", types(evs))
	}
	msgs := k.messages(s.ID, 0)
	if len(msgs) != 3 {
		k.errorf("messages = %d, want user, tool step, reply", len(msgs))
		return
	}
	rejected := "The user rejected permission to use this specific tool call with the following feedback: conformance says no"
	if p := toolPart(msgs[1]); p == nil || p.State.Status != opencode.ToolError || p.State.Error != rejected {
		k.errorf("rejected tool part = %+v, want status error %q", p, rejected)
	}
	if reply := msgs[2]; reply.Info.Finish != "stop" || len(reply.Parts) < 2 || !strings.Contains(reply.Parts[len(reply.Parts)-2].Text, rejected) {
		k.errorf("reply after the rejection = %+v", msgs[2])
	}
	if err := pc.ReplyPermission(k.ctx, "", asked.ID, reject); !errors.Is(err, opencode.ErrNotFound) {
		k.errorf("second reply = %v, want ErrNotFound", err)
	}
}

func toolPart(m opencode.Message) *opencode.Part {
	for i := range m.Parts {
		if m.Parts[i].Type == opencode.PartTool {
			return &m.Parts[i]
		}
	}
	return nil
}

func checkPermissionRule(k *checker) {
	s := k.session(opencode.CreateSessionRequest{Title: "conformance permission rule", Permission: []opencode.PermissionRule{
		{Permission: "external_directory", Pattern: "*", Action: "allow"}}})
	if s == nil {
		return
	}
	m, err := k.c.Prompt(k.ctx, s.ID, opencode.PromptRequest{Parts: text("RUN:cat /no/such/conformance.txt")})
	if !k.ok(err, "Prompt") {
		return
	}
	want := "cat: /no/such/conformance.txt: No such file or directory\n"
	if m.Info.Finish != "stop" || len(m.Parts) < 2 || m.Parts[len(m.Parts)-2].Text != "Ran 1 command(s); last output: "+strings.TrimSpace(want) {
		k.errorf("reply = %+v, want the command's error output", m)
	}
	if msgs := k.messages(s.ID, 0); len(msgs) == 3 {
		p := toolPart(msgs[1])
		code, _ := p.State.ExitCode()
		if p == nil || p.State.Status != opencode.ToolCompleted || p.State.Output != want || code != 1 {
			k.errorf("tool part = %+v, want completed with %q, exit 1", p, want)
		}
	} else {
		k.errorf("messages = %d, want 3", len(msgs))
	}
}

func checkEventStream(k *checker) {
	a, b := k.subscribe(), k.subscribe()
	s := k.session(opencode.CreateSessionRequest{Title: "conformance events"})
	if s == nil || a == nil || b == nil {
		return
	}
	for _, r := range []*eventReader{a, b} {
		evs := r.until(s.ID, "session.created", isType(opencode.EventSessionCreated))
		if len(evs) != 1 || evs[0].Directory != k.h.Directory {
			k.errorf("events %s: every stream should carry session.created first, with directory %s", types(evs), k.h.Directory)
		}
	}
	if err := a.stream.Close(); err != nil {
		k.errorf("Close = %v", err)
	}
	if err := a.stream.Close(); err != nil {
		k.errorf("second Close = %v", err)
	}
	if _, err, ok := a.next(); !ok || !errors.Is(err, net.ErrClosed) {
		k.errorf("range after Close ended with %v (%v), want an error matching net.ErrClosed", err, ok)
	}
	if _, err, ok := a.next(); ok {
		k.errorf("range after its final error yielded %v", err)
	}

	ctx, cancel := context.WithCancel(k.ctx)
	defer cancel()
	st, err := k.c.Events(ctx)
	if !k.ok(err, "Events") {
		return
	}
	defer st.Close()
	for ev, err := range st.All() {
		if err == nil {
			if ev.Type == opencode.EventServerConnected {
				cancel()
			}
			continue
		}
		if !errors.Is(err, context.Canceled) {
			k.errorf("range after the context was cancelled ended with %v, want context.Canceled", err)
		}
	}
}

func decodeJSON(b []byte, v any) error { return json.Unmarshal(b, v) }
