package leanserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents/internal/leanserver"
	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

func TestMain(m *testing.M) { testmain.Run(m) }

// noModel is the lean server as opencodetest.TestClient sees it: a PromptAsync to a session
// without a parent fails at once. The server itself stores such a prompt and starts no run
// (it is a parent's notification), so a check that waits for the model's run would wait
// CheckTimeout for nothing; failing at once, each check that needs a model ends with a
// violation of its own, and notApplicable names it.
type noModel struct{ *leanserver.Server }

func (c noModel) PromptAsync(ctx context.Context, id string, req opencode.PromptRequest) error {
	s, err := c.GetSession(ctx, id)
	if err != nil {
		return err
	}
	if s.ParentID == "" && !req.NoReply {
		return errors.New("no model: a session without a parent runs no prompt on the lean server")
	}
	return c.Server.PromptAsync(ctx, id, req)
}

// notApplicable names the checks of opencodetest.TestClient that do not apply to the lean
// server, and why. The others (sessions, no reply, message id, paging, abort idle, agents,
// event stream) apply and pass but for the differences below; directory is not run (the
// lean server has one directory, Harness.OtherDirectory is not set).
var notApplicable = map[string]string{
	"run":             "a model run with a bash tool; the lean server's runs are one text step of a child session, ended by End (TestRunAsTheFakeSends)",
	"blocking prompt": "Prompt stores NoReply prompts only: there is no model to answer",
	"abort busy":      "it aborts a model's run (SLEEP:); TestAbortEndsTheRun aborts a child's run",
	"unknown agent":   "no model run, so no agent is looked up",
	"unknown model":   "no model run, so no model is looked up",
	"model failure":   "no model to fail",
	"permission":      "no tools, so no permission request",
	"permission rule": "no tools, so no permission request",
	"fork":            "no fork: the scale benchmarks launch no forked task",
}

// differences are the violations of the checks that apply that the lean server is known to
// give, each with why the benchmarks do not need it otherwise.
var differences = []struct{ check, violation, why string }{}

// The checks of opencodetest.TestClient that apply pass, on the server and on the server
// behind opencodetest.HTTPServer (as transport=http and transport=process use it); each one
// that does not, and each known difference, is listed and shows.
func TestConformance(t *testing.T) {
	for _, overHTTP := range []bool{false, true} {
		t.Run(fmt.Sprintf("http=%v", overHTTP), func(t *testing.T) {
			t.Parallel()
			s := leanserver.New()
			defer s.Close()
			var c opencode.Client = noModel{s}
			if overHTTP {
				front := opencodetest.NewHTTPServer(c)
				defer front.Close()
				c = front.Client()
			}
			err := opencodetest.TestClient(t.Context(), c, opencodetest.Harness{Directory: leanserver.Directory})
			checkViolations(t, err)
		})
	}
}

// checkViolations fails t for each violation in err (from TestClient) of a check that
// applies other than a known difference, and for each check listed as not applying, or
// difference, that err does not show.
func checkViolations(t *testing.T, err error) {
	t.Helper()
	var violations []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		violations = j.Unwrap()
	} else if err != nil {
		violations = []error{err}
	}
	seen := map[string]bool{}
	for _, v := range violations {
		msg := v.Error()
		check, _, _ := strings.Cut(msg, ": ")
		if _, ok := notApplicable[check]; ok {
			seen[check] = true
			continue
		}
		i := slices.IndexFunc(differences, func(d struct{ check, violation, why string }) bool {
			return d.check == check && strings.Contains(msg, d.violation)
		})
		if i < 0 {
			t.Errorf("violation: %s", msg)
			continue
		}
		seen[check+": "+differences[i].violation] = true
	}
	for check, why := range notApplicable {
		if !seen[check] {
			t.Errorf("check %q passes (listed as not applying: %s)", check, why)
		}
	}
	for _, d := range differences {
		if !seen[d.check+": "+d.violation] {
			t.Errorf("known difference %q of check %q not found (%s)", d.violation, d.check, d.why)
		}
	}
}

// recorded is an event of a session as a test compares it.
type recorded struct {
	opencode.Event
	p opencode.EventProperties
}

// recorder reads an event stream until it ends, keeping each session's events.
type recorder struct {
	mu   sync.Mutex
	evs  map[string][]recorded // by session id
	done chan struct{}
}

// record subscribes to c's events; the subscription is open when it returns, and ends when
// the test does.
func record(t *testing.T, c opencode.Client) *recorder {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := c.Events(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	r := &recorder{evs: map[string][]recorded{}, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for ev, err := range st.All() {
			if err != nil {
				return
			}
			p, err := ev.Decode()
			if err != nil || p.SessionID == "" {
				continue
			}
			r.mu.Lock()
			r.evs[p.SessionID] = append(r.evs[p.SessionID], recorded{ev, p})
			r.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cancel()
		_ = st.Close()
		<-r.done
	})
	return r
}

// of returns the events of session id so far.
func (r *recorder) of(id string) []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.evs[id])
}

// wait waits until session id has at least n events.
func (r *recorder) wait(t *testing.T, id string, n int) {
	t.Helper()
	if !testmain.Eventually(10*time.Second, func() bool { return len(r.of(id)) >= n }) {
		t.Fatalf("session %s: %d events, want %d: %s", id, len(r.of(id)), n, kinds(r.of(id)))
	}
}

// kind is what an event is: its type, the status, role and finish, the part's type and text.
func kind(e recorded) string {
	k := e.Type
	if e.p.Status != nil {
		k += " " + e.p.Status.Type
	}
	var info struct{ Role, Finish string }
	if e.Type == opencode.EventMessageUpdated && json.Unmarshal(e.p.Info, &info) == nil {
		k += " " + info.Role + " " + info.Finish
	}
	if pt := e.p.Part; pt != nil {
		k += fmt.Sprintf(" %s %q synthetic=%v", pt.Type, pt.Text, pt.Synthetic)
	}
	return k
}

func kinds(evs []recorded) string {
	var out []string
	for _, e := range evs {
		out = append(out, kind(e))
	}
	return "[" + strings.Join(out, ", ") + "]"
}

// script is what TestRunAsTheFakeSends does on a server: a parent and a child session, a
// prompt in the child, the run's end (end), then a notification posted to the parent without
// reply. wait waits until a session has as many events as the lean server sent it by then.
type script struct {
	parent, child string
}

func runScript(t *testing.T, c opencode.Client, end func(id string), wait func(phase int, s script)) script {
	t.Helper()
	ctx := t.Context()
	parent, err := c.CreateSession(ctx, opencode.CreateSessionRequest{Title: "parent"})
	if err != nil {
		t.Fatal(err)
	}
	child, err := c.CreateSession(ctx, opencode.CreateSessionRequest{ParentID: parent.ID, Title: "Background: scan part 1"})
	if err != nil {
		t.Fatal(err)
	}
	s := script{parent: parent.ID, child: child.ID}
	prompt := opencode.PromptRequest{Agent: "general", Parts: []opencode.TextPartInput{opencode.NewText("Scan the next part of the logs.")}}
	if err := c.PromptAsync(ctx, child.ID, prompt); err != nil {
		t.Fatal(err)
	}
	wait(0, s)
	end(child.ID)
	wait(1, s)
	note := opencode.PromptRequest{NoReply: true, Agent: "build", Parts: []opencode.TextPartInput{
		opencode.NewText("✓ Agent \"scan part 1\" finished in 2s.\nTask Progress: 1/1"), opencode.NewSyntheticText("All 1 tasks finished.")}}
	if _, err := c.Prompt(ctx, parent.ID, note); err != nil {
		t.Fatal(err)
	}
	wait(2, s)
	return s
}

// A child's run, from its session's creation to its end, and a notification posted to its
// parent, give the events opencodetest.FakeClient gives for a run answered with one text step:
// the same types in the same order, session by session, with the same statuses, roles,
// finishes and parts; each event's properties have no field that the fake's lack, but for
// those in sentByOpenCode, and are about the size of the fake's (within a third, the whole
// within a fifth). The messages the sessions hold then are the fake's too.
func TestRunAsTheFakeSends(t *testing.T) {
	lean := leanserver.New()
	defer lean.Close()
	lr := record(t, lean)
	var counts [3][2]int // the lean server's events per phase, of the parent and of the child
	ls := runScript(t, lean, func(id string) { lean.End(id) }, func(phase int, s script) {
		if !testmain.Eventually(10*time.Second, lean.Settled) {
			t.Fatal("the lean server's events were not read")
		}
		counts[phase] = [2]int{len(lr.of(s.parent)), len(lr.of(s.child))}
	})

	fake := opencodetest.NewFakeClient(opencodetest.WithHeldRuns())
	defer fake.Close()
	fr := record(t, fake)
	fs := runScript(t, fake, func(id string) {
		if err := fake.Release(id, opencodetest.Text("Found 3 warnings in "+ls.child+".")); err != nil {
			t.Fatal(err)
		}
	}, func(phase int, s script) {
		fr.wait(t, s.parent, counts[phase][0])
		fr.wait(t, s.child, counts[phase][1])
	})
	time.Sleep(100 * time.Millisecond) // any event the fake sends after the lean server's last

	var leanBytes, fakeBytes int
	for _, ids := range [][2]string{{ls.parent, fs.parent}, {ls.child, fs.child}} {
		le, fe := lr.of(ids[0]), fr.of(ids[1])
		// The fake's texts name its own session ids; the lean server's reply names its child.
		lk := strings.ReplaceAll(kinds(le), ls.child, "<child>")
		fk := strings.ReplaceAll(kinds(fe), ls.child, "<child>")
		if lk != fk {
			t.Errorf("events of a session:\nlean %s\nfake %s", lk, fk)
			continue
		}
		for i := range le {
			leanBytes, fakeBytes = leanBytes+len(le[i].Properties), fakeBytes+len(fe[i].Properties)
			extra := slices.DeleteFunc(missingFields(le[i].Properties, fe[i].Properties), func(f string) bool {
				return slices.ContainsFunc(sentByOpenCode, func(p string) bool { return strings.HasPrefix(f, p) })
			})
			if len(extra) > 0 {
				t.Errorf("%s: fields the fake's lacks: %v\nlean %s\nfake %s", kind(le[i]), extra, le[i].Properties, fe[i].Properties)
			}
			if l, f := len(le[i].Properties), len(fe[i].Properties); 3*l < 2*f || 2*l > 3*f {
				t.Errorf("%s: %d bytes of properties, the fake's %d: want within a third", kind(le[i]), l, f)
			}
		}
	}
	if 10*leanBytes < 8*fakeBytes || 10*leanBytes > 12*fakeBytes {
		t.Errorf("the events' properties come to %d bytes, the fake's to %d: want within a fifth", leanBytes, fakeBytes)
	}
	t.Logf("properties: %d bytes, the fake's %d", leanBytes, fakeBytes)

	for _, ids := range [][2]string{{ls.parent, fs.parent}, {ls.child, fs.child}} {
		lm, fm := messages(t, lean, ids[0]), messages(t, fake, ids[1])
		if l, f := strings.ReplaceAll(lm, ls.child, "<child>"), strings.ReplaceAll(fm, ls.child, "<child>"); l != f {
			t.Errorf("messages of a session:\nlean %s\nfake %s", l, f)
		}
	}
}

// sentByOpenCode are the fields of the lean server's events that the fake leaves out where
// OpenCode 1.18.33 sends them: a session's summary and permission rules, a user message's
// summary, and the total of an assistant message's tokens (fork/testdata/captured.json shows
// the last two).
var sentByOpenCode = []string{".info.summary", ".info.permission:", ".info.tokens.total:"}

// messages returns what a session's messages are: each one's role, finish, whether it has an
// error, and its parts' types and texts.
func messages(t *testing.T, c opencode.Client, id string) string {
	t.Helper()
	msgs, err := c.Messages(t.Context(), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range msgs {
		s := fmt.Sprintf("%s %s error=%v completed=%v:", m.Info.Role, m.Info.Finish, m.Info.Error != nil, m.Info.Time.Completed != 0)
		for _, p := range m.Parts {
			s += fmt.Sprintf(" %s %q", p.Type, p.Text)
		}
		out = append(out, s)
	}
	return strings.Join(out, "\n")
}

// missingFields returns the paths of the JSON fields in a that b does not have with a value of
// the same kind (object, array, string, number, bool, null).
func missingFields(a, b []byte) []string {
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return []string{"(not JSON)"}
	}
	fb := map[string]bool{}
	for _, f := range fields(vb, "") {
		fb[f] = true
	}
	var out []string
	for _, f := range fields(va, "") {
		if !fb[f] {
			out = append(out, f)
		}
	}
	return out
}

// fields returns the paths of v's values with their kinds: "info.time.created:number".
func fields(v any, path string) []string {
	switch v := v.(type) {
	case map[string]any:
		var out []string
		for k, x := range v {
			out = append(out, fields(x, path+"."+k)...)
		}
		return append(out, path+":object")
	case []any:
		out := []string{path + ":array"}
		for _, x := range v {
			out = append(out, fields(x, path+"[]")...)
		}
		return out
	case string:
		return []string{path + ":string"}
	case float64:
		return []string{path + ":number"}
	case bool:
		return []string{path + ":bool"}
	}
	return []string{path + ":null"}
}

// newRun creates a parent and a child session on s and starts the child's run.
func newRun(t *testing.T, s *leanserver.Server) (parent, child string) {
	t.Helper()
	p, err := s.CreateSession(t.Context(), opencode.CreateSessionRequest{Title: "parent"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.CreateSession(t.Context(), opencode.CreateSessionRequest{ParentID: p.ID, Title: "task"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PromptAsync(t.Context(), c.ID, opencode.PromptRequest{Agent: "general", Parts: []opencode.TextPartInput{opencode.NewText("go")}}); err != nil {
		t.Fatal(err)
	}
	return p.ID, c.ID
}

// busy reports whether SessionStatus of dir lists session id busy.
func busy(t *testing.T, s *leanserver.Server, dir, id string) bool {
	t.Helper()
	st, err := s.SessionStatus(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	return st[id].Type == "busy"
}

// A child's run is busy (in SessionStatus of "" and of Directory, of no other directory) from
// its prompt until End; a prompt to its parent starts no run; End of a session without a run
// panics.
func TestRunIsBusyUntilEnd(t *testing.T) {
	s := leanserver.New()
	defer s.Close()
	parent, child := newRun(t, s)
	if !busy(t, s, "", child) || !busy(t, s, leanserver.Directory, child) || busy(t, s, "/elsewhere", child) {
		t.Error("a running child is not busy in its directory only")
	}
	if err := s.PromptAsync(t.Context(), parent, opencode.PromptRequest{Parts: []opencode.TextPartInput{opencode.NewText("note")}}); err != nil {
		t.Fatal(err)
	}
	if busy(t, s, "", parent) {
		t.Error("a prompt to a parent started a run")
	}
	s.End(child)
	if busy(t, s, "", child) {
		t.Error("busy after End")
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("End of a session without a run did not panic")
			}
		}()
		s.End(child)
	}()
}

// Abort ends a child's run: its assistant message is completed with MessageAbortedError "Aborted",
// without a finish, and the session is no longer busy.
func TestAbortEndsTheRun(t *testing.T) {
	s := leanserver.New()
	defer s.Close()
	_, child := newRun(t, s)
	if err := s.Abort(t.Context(), child); err != nil {
		t.Fatal(err)
	}
	msgs, err := s.Messages(t.Context(), child, 1)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("Messages = %d, %v", len(msgs), err)
	}
	in := msgs[0].Info
	if in.Role != opencode.RoleAssistant || in.Error == nil || in.Error.Name != "MessageAbortedError" || in.Error.Message() != "Aborted" ||
		in.Finish != "" || in.Time.Completed == 0 {
		t.Errorf("aborted message = %+v, error %+v", in, in.Error)
	}
	if busy(t, s, "", child) {
		t.Error("busy after Abort")
	}
}

// drain reads st in a goroutine of its own until it ends, and returns the number of events
// read so far, server.connected left out. The stream is closed when the test ends.
func drain(t *testing.T, st opencode.EventStream) func() int64 {
	var n atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev, err := range st.All() {
			if err != nil {
				return
			}
			if ev.Type != opencode.EventServerConnected {
				n.Add(1)
			}
		}
	}()
	t.Cleanup(func() {
		_ = st.Close()
		<-done
	})
	return n.Load
}

// A stream marks when it read a run's idle; the first read of the session's messages after
// the run's end (the first page of MessagesBefore, or Messages) is recorded, once; Settled
// holds once every event sent was read.
func TestPhases(t *testing.T) {
	s := leanserver.New()
	defer s.Close()
	st, err := s.Events(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	_, child := newRun(t, s)
	ended := s.End(child)
	if read, msgs := s.Phases(child); !read.IsZero() || !msgs.IsZero() {
		t.Errorf("Phases before any read = %v, %v", read, msgs)
	}
	if s.Settled() {
		t.Error("Settled with events unread")
	}
	drain(t, st)
	if !testmain.Eventually(10*time.Second, s.Settled) {
		t.Fatal("not Settled once the stream was read")
	}
	if read, _ := s.Phases(child); read.Before(ended) {
		t.Errorf("idle read at %v, before it was sent at %v", read, ended)
	}
	if _, _, err := s.MessagesBefore(t.Context(), child, 2, ""); err != nil {
		t.Fatal(err)
	}
	_, first := s.Phases(child)
	if _, err := s.Messages(t.Context(), child, 0); err != nil {
		t.Fatal(err)
	}
	if _, msgs := s.Phases(child); first.Before(ended) || !msgs.Equal(first) {
		t.Errorf("messages read at %v, then %v; the run ended at %v", first, msgs, ended)
	}
}

// A Served server's streams mark no read (MarkRead does), and Sent counts each event once
// per open stream.
func TestServed(t *testing.T) {
	s := leanserver.New(leanserver.Served())
	defer s.Close()
	var read []func() int64
	for range 2 {
		st, err := s.Events(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		read = append(read, drain(t, st))
	}
	_, child := newRun(t, s)
	s.End(child)
	if !testmain.Eventually(10*time.Second, s.Settled) {
		t.Fatal("not Settled once the streams were read")
	}
	if a, b := read[0](), read[1](); a == 0 || a != b || s.Sent() != a+b {
		t.Errorf("the streams read %d and %d events, Sent = %d", a, b, s.Sent())
	}
	if r, _ := s.Phases(child); !r.IsZero() {
		t.Errorf("a served stream marked its read at %v", r)
	}
	before := time.Now()
	s.MarkRead(child)
	if r, _ := s.Phases(child); r.Before(before) {
		t.Errorf("MarkRead marked %v, before it was called at %v", r, before)
	}
}

// After Close every call fails with an error matching net.ErrClosed, and an open stream ends
// with one; Close again is harmless.
func TestClose(t *testing.T) {
	s := leanserver.New()
	st, err := s.Events(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	parent, _ := newRun(t, s)
	for range 2 {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	var last error
	for _, err := range st.All() {
		last = err
	}
	if !errors.Is(last, net.ErrClosed) {
		t.Errorf("stream ended with %v, want net.ErrClosed", last)
	}
	if _, err := s.GetSession(t.Context(), parent); !errors.Is(err, net.ErrClosed) {
		t.Errorf("GetSession = %v", err)
	}
	if _, err := s.CreateSession(t.Context(), opencode.CreateSessionRequest{}); !errors.Is(err, net.ErrClosed) {
		t.Errorf("CreateSession = %v", err)
	}
	if _, err := s.Events(t.Context()); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Events = %v", err)
	}
}
