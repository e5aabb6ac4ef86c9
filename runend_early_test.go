package asyncagents_test

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/asyncagentstest"
	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// Issue 34, item 8: a multi-step run must not be decided before its last step, whatever
// idle events come in the middle of it. Here the test plays OpenCode 1.18.33 for the task's
// session, step by step: what GET /session/{id}/message lists, whether GET /session/status
// lists the session as busy, and the events of the stream (message.updated, the parts, the
// status and idle events, in the order OpenCode publishes them). Mid-run it injects a fault
// — a session.idle between two steps, a duplicate one, one while a steer is being taken or
// is still on its way — and checks that the task is still running; then it plays the run's
// real end and checks that the task completed with the reply of the last step.
//
// The loop of OpenCode 1.18.33 (SessionPrompt.run) ends only when its newest assistant
// message (by creation time, then id) has a finish other than "tool-calls" and "unknown",
// no tool part but interrupted ones, and answers the newest user message (parentID); it
// publishes session.idle when it has ended (and after a failed step).

// earlyClient is a FakeClient for everything but the task's session, whose OpenCode the test
// plays: a prompt posted to any session other than parent is recorded and not run (with
// hold set, the post waits for it to be closed, as a post still on its way), reads of the
// task's messages and the status of its directory answer what the test scripted, and the
// Manager's event stream delivers what the test sends.
type earlyClient struct {
	*opencodetest.FakeClient
	events chan opencode.Event

	mu       sync.Mutex
	parent   string
	task     string
	prompts  []string // ids of the prompts posted to the task's session
	hold     chan struct{}
	listing  []opencode.Message
	busy     bool
	reads    int
	statuses int
}

func newEarlyClient(t *testing.T) *earlyClient {
	return &earlyClient{FakeClient: asyncagentstest.NewFakeClient(t), events: make(chan opencode.Event, 1024)}
}

func (c *earlyClient) isTask(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return id != "" && id == c.task
}

func (c *earlyClient) PromptAsync(ctx context.Context, sid string, req opencode.PromptRequest) error {
	c.mu.Lock()
	if sid == c.parent {
		c.mu.Unlock()
		return c.FakeClient.PromptAsync(ctx, sid, req)
	}
	c.task = sid
	hold := c.hold
	c.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	c.mu.Lock()
	c.prompts = append(c.prompts, req.MessageID)
	c.mu.Unlock()
	return nil
}

// posted returns the ids of the prompts the task's session took so far.
func (c *earlyClient) posted() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.prompts...)
}

func (c *earlyClient) Messages(ctx context.Context, sid string, limit int) ([]opencode.Message, error) {
	if !c.isTask(sid) {
		return c.FakeClient.Messages(ctx, sid, limit)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reads++
	msgs := c.listing
	if limit > 0 && len(msgs) > limit {
		msgs = msgs[len(msgs)-limit:]
	}
	return append([]opencode.Message(nil), msgs...), nil
}

func (c *earlyClient) MessagesBefore(ctx context.Context, sid string, limit int, before string) ([]opencode.Message, string, error) {
	if !c.isTask(sid) {
		return c.FakeClient.MessagesBefore(ctx, sid, limit, before)
	}
	msgs, err := c.Messages(ctx, sid, 0)
	return msgs, "", err
}

func (c *earlyClient) SessionStatus(ctx context.Context, dir string) (map[string]opencode.SessionStatus, error) {
	st, err := c.FakeClient.SessionStatus(ctx, dir)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.statuses++
	if c.task != "" && c.busy {
		st[c.task] = opencode.SessionStatus{Type: "busy"}
	}
	return st, nil
}

// counts returns how many reads of the task's messages and status requests were made.
func (c *earlyClient) counts() (reads, statuses int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads, c.statuses
}

// set scripts what the task's session lists and whether it is busy.
func (c *earlyClient) set(msgs []earlyMsg, busy bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.listing = nil
	for _, m := range msgs {
		c.listing = append(c.listing, m.message(c.task))
	}
	c.busy = busy
}

// send delivers events to the Manager's stream, in order.
func (c *earlyClient) send(evs ...opencode.Event) {
	for _, ev := range evs {
		c.events <- ev
	}
}

func (c *earlyClient) Events(ctx context.Context) (opencode.EventStream, error) {
	return &earlyStream{c: c, ctx: ctx, closed: make(chan struct{})}, nil
}

// earlyStream is the event stream of an earlyClient: server.connected, then the events the
// test sends. It starts no goroutine.
type earlyStream struct {
	c      *earlyClient
	ctx    context.Context
	once   sync.Once
	closed chan struct{}
}

func (s *earlyStream) All() iter.Seq2[opencode.Event, error] {
	return func(yield func(opencode.Event, error) bool) {
		if !yield(opencode.Event{Type: opencode.EventServerConnected, Properties: json.RawMessage(`{}`)}, nil) {
			return
		}
		for {
			select {
			case ev := <-s.c.events:
				if !yield(ev, nil) {
					return
				}
			case <-s.closed:
				yield(opencode.Event{}, fmt.Errorf("early stream: %w", net.ErrClosed))
				return
			case <-s.ctx.Done():
				yield(opencode.Event{}, s.ctx.Err())
				return
			}
		}
	}
}

func (s *earlyStream) Close() error {
	s.once.Do(func() { close(s.closed) })
	return nil
}

// earlyMsg is a message of the task's session as the test scripts it.
type earlyMsg struct {
	id, parent, role, finish string
	done                     bool // time.completed set (an assistant message)
	parts                    []earlyPart
}

// earlyPart is a part: text (with its text), tool (with its state's status), step-start or
// step-finish.
type earlyPart struct{ id, typ, text, status string }

var earlyPartSeq struct {
	sync.Mutex
	n int
}

func earlyNewPart(typ, text, status string) earlyPart {
	earlyPartSeq.Lock()
	defer earlyPartSeq.Unlock()
	earlyPartSeq.n++
	return earlyPart{id: fmt.Sprintf("prt_early%06d", earlyPartSeq.n), typ: typ, text: text, status: status}
}

// earlyToolStep is an assistant step that ran a bash command and finished with finish.
func earlyToolStep(id, parent, finish string) earlyMsg {
	return earlyMsg{id: id, parent: parent, role: opencode.RoleAssistant, finish: finish, done: true, parts: []earlyPart{
		earlyNewPart("step-start", "", ""), earlyNewPart("tool", "", opencode.ToolCompleted), earlyNewPart("step-finish", "", "")}}
}

// earlyTextStep is an assistant step that answered text and finished "stop".
func earlyTextStep(id, parent, text string) earlyMsg {
	return earlyMsg{id: id, parent: parent, role: opencode.RoleAssistant, finish: "stop", done: true, parts: []earlyPart{
		earlyNewPart("step-start", "", ""), earlyNewPart("text", text, ""), earlyNewPart("step-finish", "", "")}}
}

// earlyStarted is an assistant step that has just started.
func earlyStarted(id, parent string) earlyMsg {
	return earlyMsg{id: id, parent: parent, role: opencode.RoleAssistant, parts: []earlyPart{earlyNewPart("step-start", "", "")}}
}

func earlyUser(id, text string) earlyMsg {
	return earlyMsg{id: id, role: opencode.RoleUser, parts: []earlyPart{earlyNewPart("text", text, "")}}
}

func (m earlyMsg) info(sid string, final bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, `{"id":%q,"sessionID":%q,"role":%q`, m.id, sid, m.role)
	if m.parent != "" {
		fmt.Fprintf(&b, `,"parentID":%q`, m.parent)
	}
	if final && m.done {
		b.WriteString(`,"time":{"created":1,"completed":2}`)
	} else {
		b.WriteString(`,"time":{"created":1}`)
	}
	if final && m.finish != "" {
		fmt.Fprintf(&b, `,"finish":%q`, m.finish)
	}
	b.WriteString("}")
	return b.String()
}

func (p earlyPart) json(sid, mid string, final bool) string {
	head := fmt.Sprintf(`{"id":%q,"messageID":%q,"sessionID":%q,"type":%q`, p.id, mid, sid, p.typ)
	switch p.typ {
	case "text":
		if !final {
			return head + `,"text":"","time":{"start":1}}`
		}
		return head + fmt.Sprintf(`,"text":%q,"time":{"start":1,"end":2}}`, p.text)
	case "tool":
		if !final {
			return head + `,"callID":"call_1","tool":"bash","state":{"status":"pending","input":{},"raw":""}}`
		}
		return head + fmt.Sprintf(`,"callID":"call_1","tool":"bash","state":{"status":%q,"input":{"command":"echo"},"output":"x","title":"echo","metadata":{},"time":{"start":1,"end":2}}}`, p.status)
	case "step-finish":
		return head + `,"reason":"stop"}`
	}
	return head + "}"
}

// message is m as GET /session/{id}/message lists it.
func (m earlyMsg) message(sid string) opencode.Message {
	parts := make([]string, len(m.parts))
	for i, p := range m.parts {
		parts[i] = p.json(sid, m.id, true)
	}
	var msg opencode.Message
	if err := json.Unmarshal([]byte(`{"info":`+m.info(sid, true)+`,"parts":[`+strings.Join(parts, ",")+`]}`), &msg); err != nil {
		panic(err)
	}
	return msg
}

// frames are the events OpenCode publishes for m: its message.updated, the updates of its
// parts, and for a finished step its final message.updated, twice.
func (m earlyMsg) frames(sid string) []opencode.Event {
	ev := func(typ, props string) opencode.Event {
		return opencode.Event{Type: typ, Properties: json.RawMessage(props)}
	}
	msg := func(final bool) opencode.Event {
		return ev(opencode.EventMessageUpdated, fmt.Sprintf(`{"sessionID":%q,"info":%s}`, sid, m.info(sid, final)))
	}
	part := func(p earlyPart, final bool) opencode.Event {
		return ev(opencode.EventMessagePartUpdate, fmt.Sprintf(`{"sessionID":%q,"part":%s,"time":1}`, sid, p.json(sid, m.id, final)))
	}
	evs := []opencode.Event{msg(m.role == opencode.RoleUser)}
	for _, p := range m.parts {
		if p.typ == "text" || p.typ == "tool" {
			evs = append(evs, part(p, false))
		}
		evs = append(evs, part(p, true))
	}
	if m.done {
		evs = append(evs, msg(true), msg(true))
	}
	return evs
}

func earlyFrames(sid string, msgs ...earlyMsg) []opencode.Event {
	var evs []opencode.Event
	for _, m := range msgs {
		evs = append(evs, m.frames(sid)...)
	}
	return evs
}

func earlyStatus(sid, typ string) opencode.Event {
	return opencode.Event{Type: opencode.EventSessionStatus,
		Properties: json.RawMessage(fmt.Sprintf(`{"sessionID":%q,"status":{"type":%q}}`, sid, typ))}
}

func earlyIdle(sid string) opencode.Event {
	return opencode.Event{Type: opencode.EventSessionIdle, Properties: json.RawMessage(fmt.Sprintf(`{"sessionID":%q}`, sid))}
}

// earlyIdles are the events of a session going idle: session.status idle, then session.idle.
func earlyIdles(sid string) []opencode.Event {
	return []opencode.Event{earlyStatus(sid, "idle"), earlyIdle(sid)}
}

// earlyIDs mints message ids as OpenCode's server does: each newer than the one before.
type earlyIDs struct{ last string }

func (g *earlyIDs) next() string {
	g.last = opencode.NewMessageID(time.Now(), g.last)
	return g.last
}

// earlyRun is one case's Manager, client, caller and task.
type earlyRun struct {
	t      *testing.T
	c      *earlyClient
	m      *asyncagents.Manager
	caller asyncagents.Caller
	task   string // the task's id, for the Manager
	sid    string // the task's session, for OpenCode
	prompt string // the launch prompt's id
	ids    earlyIDs
}

func startEarlyRun(t *testing.T) *earlyRun {
	c := newEarlyClient(t)
	m := asyncagentstest.NewManager(t, c, asyncagents.WithPollInterval(time.Hour), asyncagents.WithNotifications(false))
	caller := asyncagentstest.NewParent(t, c)
	c.mu.Lock()
	c.parent = caller.SessionID
	c.mu.Unlock()
	// An event before the prompt: the connection carries the task's run whole (mirror.go).
	c.send(opencode.Event{Type: opencode.EventSessionUpdated, Properties: json.RawMessage(fmt.Sprintf(`{"sessionID":%q}`, caller.SessionID))})
	if !testmain.Eventually(2*time.Second, func() bool { return asyncagents.StreamLive(m) }) {
		t.Fatal("the Manager's event stream delivers nothing")
	}
	task := asyncagentstest.Launch(t, m, caller, "RUN:echo 1 ||| echo 2 ||| echo 3 ||| echo 4 ||| echo 5")
	if !testmain.Eventually(2*time.Second, func() bool { return len(c.posted()) == 1 }) {
		t.Fatal("the task's prompt was not posted")
	}
	c.mu.Lock()
	sid := c.task
	c.mu.Unlock()
	r := &earlyRun{t: t, c: c, m: m, caller: caller, task: task.ID, sid: sid, prompt: c.posted()[0]}
	r.ids.last = r.prompt
	return r
}

// fault delivers evs, a fault in the middle of the run, and settles what follows.
func (r *earlyRun) fault(what string, evs ...opencode.Event) {
	r.t.Helper()
	reads, statuses := r.c.counts()
	r.c.send(evs...)
	r.settle(reads, statuses, what)
}

// settle waits until the Manager has made, after a fault, a read of the task's messages and
// then a status request (what a read that finds the run unfinished leads to), or ended the
// task; then, a moment later, fails the test when the task is no longer running.
func (r *earlyRun) settle(reads, statuses int, what string) {
	r.t.Helper()
	ended := func() bool {
		task, err := r.m.Get(r.task)
		return err != nil || task.Status.Terminal()
	}
	if !testmain.Eventually(2*time.Second, func() bool {
		n, s := r.c.counts()
		return n > reads && s > statuses || ended()
	}) {
		n, s := r.c.counts()
		r.t.Fatalf("%s: the Manager read the task's messages %d times and its status %d times, and the task is still running", what, n-reads, s-statuses)
	}
	time.Sleep(100 * time.Millisecond) // what a second idle's read would do
	if task, err := r.m.Get(r.task); err != nil || task.Status != asyncagents.StatusRunning {
		r.t.Errorf("%s: the run was decided before its last step: %s, result %q, error %q (%v)", what, task.Status, task.Result, task.Error, err)
	}
}

// end plays the rest of the run (msgs, all the session's messages), its end, and checks that
// the task completed with want.
func (r *earlyRun) end(msgs []earlyMsg, fresh []earlyMsg, want string) {
	r.t.Helper()
	sid := r.sid
	r.c.set(msgs, false)
	r.c.send(append(append([]opencode.Event{earlyStatus(sid, "busy")}, earlyFrames(sid, fresh...)...), append([]opencode.Event{earlyStatus(sid, "busy")}, earlyIdles(sid)...)...)...)
	var task asyncagents.Task
	if !testmain.Eventually(3*time.Second, func() bool {
		var err error
		task, err = r.m.Get(r.task)
		return err == nil && task.Status.Terminal()
	}) {
		r.t.Fatalf("the run's end was not decided: %s", task.Status)
	}
	if task.Status != asyncagents.StatusCompleted || task.Result != want {
		r.t.Errorf("task ended %s with result %q (error %q), want completed with %q", task.Status, task.Result, task.Error, want)
	}
	r.t.Logf("runs completed from the stream alone, without a read: %d", asyncagents.StreamDecided(r.m))
}

// steps returns the assistant steps of the 6-step run after from (tool steps, then the
// reply), answering parent.
func (r *earlyRun) steps(parent string, from int) []earlyMsg {
	var out []earlyMsg
	for i := from; i < 5; i++ {
		out = append(out, earlyToolStep(r.ids.next(), parent, "tool-calls"))
	}
	return append(out, earlyTextStep(r.ids.next(), parent, "Ran 5 command(s); last output: 5"))
}

func TestRunIsNotDecidedBeforeItsLastStep(t *testing.T) {
	const last = "Ran 5 command(s); last output: 5"

	// An idle between two steps (OpenCode sends none there; a stale or duplicate one): the
	// step before it called a tool, the next one has started.
	t.Run("idle between two steps", func(t *testing.T) {
		r := startEarlyRun(t)
		sid := r.sid
		u := earlyUser(r.prompt, "RUN:…")
		a1, a2 := earlyToolStep(r.ids.next(), r.prompt, "tool-calls"), earlyStarted(r.ids.next(), r.prompt)
		r.c.set([]earlyMsg{u, a1, a2}, true)
		r.fault("idle after a tool step", append(earlyFrames(sid, u, a1, a2), earlyIdles(sid)...)...)
		a2 = earlyToolStep(a2.id, r.prompt, "tool-calls")
		rest := r.steps(r.prompt, 2)
		r.end(append([]earlyMsg{u, a1, a2}, rest...), append([]earlyMsg{a2}, rest...), last)
	})

	// The incident's shape: a step that called a tool but that OpenCode finished "unknown"
	// (its stream ended without a finish reason) or "stop" — the loop goes on after both —
	// read on an idle, twice.
	for _, finish := range []string{"unknown", "stop"} {
		t.Run("duplicate idle after a tool step finished "+finish, func(t *testing.T) {
			r := startEarlyRun(t)
			sid := r.sid
			u := earlyUser(r.prompt, "RUN:…")
			a1 := earlyToolStep(r.ids.next(), r.prompt, finish)
			r.c.set([]earlyMsg{u, a1}, true)
			r.fault("idles after a tool step finished "+finish, append(append(earlyFrames(sid, u, a1), earlyIdles(sid)...), earlyIdles(sid)...)...)
			rest := r.steps(r.prompt, 1)
			r.end(append([]earlyMsg{u, a1}, rest...), rest, last)
		})
	}

	// A steer is stored while a step is being set up: the step, created after it, still
	// answers the first prompt (its parentID) and finishes "stop" without a tool. OpenCode's
	// loop goes on (its newest assistant message does not answer its newest user message)
	// and answers the steer in one more step. An idle now (stale, or the status poll missing
	// the session) must not end the run with the reply to the first prompt.
	t.Run("idle after a step that answers the prompt before a steer", func(t *testing.T) {
		r := startEarlyRun(t)
		sid := r.sid
		u := earlyUser(r.prompt, "RUN:…")
		a1 := earlyToolStep(r.ids.next(), r.prompt, "tool-calls")
		r.c.set([]earlyMsg{u, a1}, true)
		r.c.send(earlyFrames(sid, u, a1)...)
		if _, err := r.m.Steer(context.Background(), r.caller, r.task, "stop and say hi"); err != nil {
			t.Fatal(err)
		}
		steer := r.c.posted()[1]
		r.ids.last = max(r.ids.last, steer)
		s := earlyUser(steer, "stop and say hi")
		a2 := earlyTextStep(r.ids.next(), r.prompt, "reply to the first prompt")
		r.c.set([]earlyMsg{u, a1, s, a2}, true)
		r.fault("idle after the reply to the prompt before the steer", append(earlyFrames(sid, s, a2), earlyIdles(sid)...)...)
		a3 := earlyTextStep(r.ids.next(), steer, "hi")
		r.end([]earlyMsg{u, a1, s, a2, a3}, []earlyMsg{a3}, "hi")
	})

	// A steer still on its way (OpenCode took 14 s to store a prompt on a loaded server)
	// when the run ends with the reply to the first prompt: that reply, created after the
	// steer's id was chosen, has a newer id, but it does not show the steer was stored. When
	// the steer lands OpenCode starts a run for it, which the task follows as its own.
	t.Run("steer on its way when the run ends", func(t *testing.T) {
		r := startEarlyRun(t)
		sid := r.sid
		u := earlyUser(r.prompt, "RUN:…")
		a1 := earlyToolStep(r.ids.next(), r.prompt, "tool-calls")
		r.c.set([]earlyMsg{u, a1}, true)
		r.c.send(earlyFrames(sid, u, a1)...)
		hold := make(chan struct{})
		r.c.mu.Lock()
		r.c.hold = hold
		r.c.mu.Unlock()
		var once sync.Once
		release := func() { once.Do(func() { close(hold) }) }
		var steerErr error
		steered := make(chan struct{})
		go func() {
			defer close(steered)
			_, steerErr = r.m.Steer(context.Background(), r.caller, r.task, "stop and say hi")
		}()
		defer func() { // the post ends whatever the test found
			release()
			<-steered
		}()
		var steer string
		if !testmain.Eventually(2*time.Second, func() bool {
			task, err := r.m.Get(r.task)
			steer = task.PromptID
			return err == nil && task.Steers == 1
		}) {
			t.Fatal("the steer was not sent")
		}
		r.ids.last = max(r.ids.last, steer)
		a2 := earlyTextStep(r.ids.next(), r.prompt, "reply to the first prompt")
		r.c.set([]earlyMsg{u, a1, a2}, false)
		r.fault("the run's idle while the steer is on its way", append(append(earlyFrames(sid, a2), earlyStatus(sid, "busy")), earlyIdles(sid)...)...)
		release() // the steer lands: OpenCode runs it
		<-steered
		if steerErr != nil {
			t.Fatalf("steer: %v", steerErr)
		}
		s := earlyUser(steer, "stop and say hi")
		a3 := earlyTextStep(r.ids.next(), steer, "hi")
		r.end([]earlyMsg{u, a1, a2, s, a3}, []earlyMsg{s, a3}, "hi")
	})
}
