package opencode_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// TestTurns records how OpenCode 1.18.33 turns posted messages into model turns: which posts
// make the agent loop call the model, and what each call carries. Each subtest states its
// finding in its comment and asserts it on the real server, so an upgrade that changes the
// behaviour fails here first.
//
// What the subtests rely on, read from the bundled JS of 1.18.33 and confirmed by them:
//
//   - GET /session/{id}/message and the agent loop order a session's messages by their
//     creation time on the server (time_created), then by id. A client's messageID only breaks
//     ties within one millisecond: it does not place a message in the history.
//   - Each step of the loop takes the newest user message and the newest assistant message
//     (by creation time, then id) and stops when that assistant message finished (not
//     "tool-calls") and answers (parentID) that user message. So a user message created after
//     the reply being written makes the loop run one more step, whatever its id, and however
//     it was posted (prompt_async or a noReply message).
//   - A noReply post (POST /session/{id}/message with "noReply": true) stores the message
//     and returns; it never starts the loop.
//
// Requests are told apart by a tag in every text a subtest sends: a chat request belongs to
// the subtest whose tag it contains. Sessions have titles, so OpenCode makes no title
// request. A subtest that needs the session busy holds its first model request (HOLD:key in
// the prompt) until it has posted what it posts while busy, so nothing depends on timing.
func TestTurns(t *testing.T) {
	t.Parallel()
	srv := ownServer(t) // a server of its own: the test sets its model's script
	h := &holds{gates: map[string]chan struct{}{}}
	srv.Model.SetScript(h.script)
	t.Cleanup(h.releaseAll) // before the server's Close (cleanups run last first)
	c := srv.Client()
	// Boot the project's instance before the subtests subscribe to events.
	if _, err := c.CreateSession(context.Background(), opencode.CreateSessionRequest{Title: "warm-up"}); err != nil {
		t.Fatal(err)
	}

	// 1. noReply posts to an idle session make no model request and do not make the session
	// busy: the stream carries message.updated (and part and session updates) for each, but
	// no session.status. They are stored in order — creation order, which here is also id
	// order — each as one user message with its parts as sent (visible and synthetic).
	t.Run("noReplyIdle", func(t *testing.T) {
		t.Parallel()
		tt := newTurnTest(t, srv, c, h, "noreply-idle")
		rec := tt.record()
		ids := tt.noReplies(3, "")
		// A negative cannot be awaited: OpenCode's noReply path returns before the loop is
		// started at all, and a prompt_async marks its session busy within milliseconds, so
		// a quiet second is ample.
		time.Sleep(time.Second)
		if n := len(tt.requests()); n != 0 {
			t.Fatalf("noReply posts made %d model requests, want 0", n)
		}
		if !testmain.Eventually(30*time.Second, func() bool { return rec.count(opencode.EventMessageUpdated) >= 3 }) {
			t.Fatalf("message.updated events = %d, want one per noReply post", rec.count(opencode.EventMessageUpdated))
		}
		if n := rec.count(opencode.EventSessionStatus); n != 0 {
			t.Fatalf("noReply posts sent %d session.status events, want none", n)
		}
		if busy := rec.statuses("busy"); busy != 0 {
			t.Fatalf("noReply posts made the session busy (%d busy events)", busy)
		}
		if st := tt.status(); st != "" {
			t.Fatalf("session status = %q after noReply posts, want idle (absent)", st)
		}
		msgs := tt.messages()
		if got := messageIDs(msgs); !slices.Equal(got, ids) {
			t.Fatalf("stored messages %v, want %v", got, ids)
		}
		for i, m := range msgs {
			if m.Info.Role != opencode.RoleUser || len(m.Parts) != 2 || m.Parts[0].Synthetic || !m.Parts[1].Synthetic ||
				m.Parts[0].Text != tt.visible(i) || m.Parts[1].Text != tt.hidden(i) {
				t.Fatalf("message %d = %+v", i, m)
			}
		}
	})

	// 2. noReply posts then one prompt_async newer than all: exactly one model request. Its
	// context holds every noReply message, in order, as a user message of its own, with
	// its synthetic text part sent to the model like the visible one (OpenCode drops only
	// "ignored" and empty text parts), then the prompt last. The reply answers the prompt.
	t.Run("noReplyThenPrompt", func(t *testing.T) {
		t.Parallel()
		tt := newTurnTest(t, srv, c, h, "noreply-prompt")
		ids := tt.noReplies(3, "")
		wave := tt.promptAsync(opencode.NewMessageID(time.Now(), ids[2]), "wave")
		msgs := tt.settle()
		reqs := tt.requests()
		if len(reqs) != 1 {
			t.Fatalf("model requests = %d, want 1", len(reqs))
		}
		want := []string{
			tt.visible(0) + "\n" + tt.hidden(0),
			tt.visible(1) + "\n" + tt.hidden(1),
			tt.visible(2) + "\n" + tt.hidden(2),
			tt.text("wave"),
		}
		if got := userContents(reqs[0]); !slices.Equal(got, want) {
			t.Fatalf("user messages sent to the model:\n%q\nwant\n%q", got, want)
		}
		if parts := userParts(t, reqs[0]); len(parts) != 4 || len(parts[0]) != 2 {
			t.Fatalf("content parts of the user messages = %q, want 2 per noReply message", parts)
		}
		answered := answeredBy(msgs)
		if len(answered) != 1 || answered[0] != wave {
			t.Fatalf("assistant messages answer %v, want [%s]", answered, wave)
		}
	})

	// 3. A prompt_async whose message id sorts before the session's last assistant message
	// (here: before every message) still gets a turn. The id does not place the message:
	// it is created now, so it is listed last and is the loop's newest user message, which
	// no assistant message answers yet. (NewMessageID's comment expects the opposite; on
	// 1.18.33 the loop compares parentID with the newest user message, not ids.)
	t.Run("promptOlderID", func(t *testing.T) {
		t.Parallel()
		tt := newTurnTest(t, srv, c, h, "older-prompt")
		first := tt.promptAsync(opencode.NewMessageID(time.Now(), ""), "first")
		msgs := tt.settle()
		reply := msgs[len(msgs)-1].Info.ID
		old := opencode.NewMessageID(time.Now().Add(-time.Hour), "")
		if old >= first {
			t.Fatalf("id %s does not sort before %s", old, first)
		}
		tt.promptAsync(old, "late")
		msgs = tt.settle()
		reqs := tt.requests()
		if len(reqs) != 2 {
			t.Fatalf("model requests = %d, want 2 (the old-id prompt gets its turn)", len(reqs))
		}
		if got, want := userContents(reqs[1]), []string{tt.text("first"), tt.text("late")}; !slices.Equal(got, want) {
			t.Fatalf("user messages of the second request %q, want %q (by creation time)", got, want)
		}
		if got := messageIDs(msgs); len(got) != 4 || got[0] != first || got[1] != reply || got[2] != old {
			t.Fatalf("messages listed %v; want %s, %s, then the old id %s, then its reply", got, first, reply, old)
		}
		if answered := answeredBy(msgs); len(answered) != 2 || answered[1] != old {
			t.Fatalf("assistant messages answer %v, want the second to answer %s", answered, old)
		}
	})

	// 4. prompt_async posts to a busy session answer 204 at once, and are stored at once.
	// The running loop answers them all in ONE more step after the current one: that step's
	// context holds every queued prompt, in order, as plain user messages, and its reply
	// answers the newest; the earlier queued prompts get no reply of their own. Only
	// one session.idle comes, after that step.
	t.Run("promptsWhileBusy", func(t *testing.T) {
		t.Parallel()
		tt := newTurnTest(t, srv, c, h, "busy-prompts")
		rec := tt.record()
		first := tt.promptAsync(opencode.NewMessageID(time.Now(), ""), tt.hold("first"))
		tt.waitRequests(1) // the first step is now held in the model
		after := first
		var queued []string
		for i := range 3 {
			start := time.Now()
			after = tt.promptAsync(opencode.NewMessageID(time.Now(), after), fmt.Sprintf("queued %d", i))
			d := time.Since(start)
			if d > 2*time.Second {
				t.Errorf("prompt_async to a busy session took %v", d)
			}
			t.Logf("prompt_async %d to the busy session answered 204 in %v", i, d)
			queued = append(queued, after)
		}
		if st := tt.status(); st != "busy" {
			t.Fatalf("status while held = %q, want busy", st)
		}
		if got := messageIDs(tt.messages()); len(got) != 5 || !slices.Equal(got[2:], queued) {
			// first, its (running) assistant message, then the queued prompts
			t.Fatalf("messages while busy = %v, want the queued %v stored", got, queued)
		}
		h.release(tt.tag)
		msgs := tt.settle()
		reqs := tt.requests()
		if len(reqs) != 2 {
			t.Fatalf("model requests = %d, want 2 (the held step and one for all queued prompts)", len(reqs))
		}
		want := []string{tt.text(tt.hold("first")), tt.text("queued 0"), tt.text("queued 1"), tt.text("queued 2")}
		if got := userContents(reqs[1]); !slices.Equal(got, want) {
			t.Fatalf("user messages of the second step %q, want %q", got, want)
		}
		if answered := answeredBy(msgs); !slices.Equal(answered, []string{first, queued[2]}) {
			t.Fatalf("assistant messages answer %v, want [%s %s]", answered, first, queued[2])
		}
		if n := rec.count(opencode.EventSessionIdle); n != 1 {
			t.Fatalf("session.idle events = %d, want 1", n)
		}
	})

	// 5. noReply messages posted while the session is busy are NOT "no reply": they are user
	// messages created after the running step's reply, so the loop runs one more step for
	// them when the current one ends, and answers the newest. That step's context holds them
	// all. The held step itself (its request was already made) did not see them. The noReply
	// posts answer at once while the session is busy (the model is still held).
	t.Run("noReplyWhileBusy", func(t *testing.T) {
		t.Parallel()
		tt := newTurnTest(t, srv, c, h, "busy-noreply")
		first := tt.promptAsync(opencode.NewMessageID(time.Now(), ""), tt.hold("first"))
		tt.waitRequests(1)
		ids := tt.noReplies(3, first)
		h.release(tt.tag)
		msgs := tt.settle()
		reqs := tt.requests()
		if len(reqs) != 2 {
			t.Fatalf("model requests = %d, want 2 (noReply messages posted while busy get a step)", len(reqs))
		}
		if reqs[0].Contains(tt.visible(0)) {
			t.Fatal("the held step saw a noReply message posted after its request")
		}
		for i := range 3 {
			if !reqs[1].Contains(tt.visible(i)) || !reqs[1].Contains(tt.hidden(i)) {
				t.Fatalf("second step lacks noReply message %d: %q", i, userContents(reqs[1]))
			}
		}
		if answered := answeredBy(msgs); !slices.Equal(answered, []string{first, ids[2]}) {
			t.Fatalf("assistant messages answer %v, want [%s %s]", answered, first, ids[2])
		}
	})

	// 5b. The same within a multi-step turn: noReply messages posted while a step that calls
	// a tool is being answered are in the context of the loop's next step, after the tool
	// result, and that step's reply answers the newest of them (the loop then stops: the
	// rest of the original prompt's directive is not followed, as the newest user message
	// is now the noReply one).
	t.Run("noReplyMidTurn", func(t *testing.T) {
		t.Parallel()
		tt := newTurnTest(t, srv, c, h, "midturn-noreply")
		tt.promptAsync(opencode.NewMessageID(time.Now(), ""), tt.hold("RUN:echo tool-ran"))
		tt.waitRequests(1)
		ids := tt.noReplies(2, "")
		h.release(tt.tag)
		msgs := tt.settle()
		reqs := tt.requests()
		if len(reqs) != 2 {
			t.Fatalf("model requests = %d, want 2 (the tool step, then one step)", len(reqs))
		}
		var roles []string
		for _, m := range reqs[1].Messages {
			if m.Role != "system" {
				roles = append(roles, m.Role)
			}
		}
		if got, want := strings.Join(roles, " "), "user assistant tool user user"; got != want {
			t.Fatalf("roles of the second step = %q, want %q", got, want)
		}
		if answered := answeredBy(msgs); len(answered) != 2 || answered[1] != ids[1] {
			t.Fatalf("assistant messages answer %v, want the second to answer %s", answered, ids[1])
		}
	})

	// 6. One prompt_async with several text parts is one user message, one turn: the model
	// gets one user chat message whose content is one text part per input part, in order,
	// synthetic ones included and unmarked.
	t.Run("manyParts", func(t *testing.T) {
		t.Parallel()
		tt := newTurnTest(t, srv, c, h, "many-parts")
		var parts []opencode.TextPartInput
		var want []string
		for i := range 3 {
			parts = append(parts, opencode.NewText(tt.visible(i)), opencode.NewSyntheticText(tt.hidden(i)))
			want = append(want, tt.visible(i), tt.hidden(i))
		}
		id := opencode.NewMessageID(time.Now(), "")
		if err := c.PromptAsync(tt.ctx, tt.ses, opencode.PromptRequest{MessageID: id, Parts: parts}); err != nil {
			t.Fatal(err)
		}
		msgs := tt.settle()
		reqs := tt.requests()
		if len(reqs) != 1 {
			t.Fatalf("model requests = %d, want 1", len(reqs))
		}
		if got := userParts(t, reqs[0]); len(got) != 1 || !slices.Equal(got[0], want) {
			t.Fatalf("user content parts %q, want one message with %q", got, want)
		}
		if answered := answeredBy(msgs); len(answered) != 1 || answered[0] != id {
			t.Fatalf("assistant messages answer %v, want [%s]", answered, id)
		}
	})

	// 7. Two prompt_async posts to an idle session, the newer id (id2) arriving first, id1
	// right after (in a later millisecond): id1 does NOT ride on id2's turn, and its older
	// id does not make it count as answered. The loop starts on id2; id1, created later, is
	// then the newest user message by creation time, so the loop runs a second step for it,
	// with both prompts in its context (id2 first). Every run so far (-count=5, more than 10
	// runs) made 2 requests, the first answering id2; by the code a single request is
	// possible when id1 is stored before the loop's first step reads the messages, so the
	// test allows 1 and asserts the rest: the last request holds both prompts, id2 is
	// listed before id1, and the last reply answers id1.
	t.Run("outOfOrderIdle", func(t *testing.T) {
		t.Parallel()
		tt := newTurnTest(t, srv, c, h, "ooo-idle")
		id1 := opencode.NewMessageID(time.Now(), "")
		id2 := opencode.NewMessageID(time.Now(), id1)
		tt.promptAsync(id2, "second id")
		tt.nextMillisecond(id2)
		tt.promptAsync(id1, "first id")
		msgs := tt.settle()
		reqs := tt.requests()
		t.Logf("model requests: %d", len(reqs))
		if len(reqs) < 1 || len(reqs) > 2 {
			t.Fatalf("model requests = %d, want 1 or 2", len(reqs))
		}
		if got, want := userContents(reqs[len(reqs)-1]), []string{tt.text("second id"), tt.text("first id")}; !slices.Equal(got, want) {
			t.Fatalf("user messages of the last request %q, want %q", got, want)
		}
		if got := messageIDs(msgs); slices.Index(got, id2) > slices.Index(got, id1) {
			t.Fatalf("messages listed %v, want %s before %s (creation order)", got, id2, id1)
		}
		answered := answeredBy(msgs)
		if answered[len(answered)-1] != id1 {
			t.Fatalf("assistant messages answer %v, want the last to answer %s", answered, id1)
		}
		if len(reqs) == 2 && (answered[0] != id2 || reqs[0].Contains(tt.text("first id"))) {
			t.Fatalf("first of two steps answers %s (want %s), or saw id1", answered[0], id2)
		}
	})

	// 7b. The same two posts while the session is busy: deterministic. One more step after
	// the held one, with both prompts in creation order (id2 before id1); it answers id1,
	// the newest by creation time; id2 gets no reply of its own.
	t.Run("outOfOrderBusy", func(t *testing.T) {
		t.Parallel()
		tt := newTurnTest(t, srv, c, h, "ooo-busy")
		first := tt.promptAsync(opencode.NewMessageID(time.Now(), ""), tt.hold("first"))
		tt.waitRequests(1)
		id1 := opencode.NewMessageID(time.Now(), first)
		id2 := opencode.NewMessageID(time.Now(), id1)
		tt.promptAsync(id2, "second id")
		tt.nextMillisecond(id2)
		tt.promptAsync(id1, "first id")
		h.release(tt.tag)
		msgs := tt.settle()
		reqs := tt.requests()
		if len(reqs) != 2 {
			t.Fatalf("model requests = %d, want 2", len(reqs))
		}
		want := []string{tt.text(tt.hold("first")), tt.text("second id"), tt.text("first id")}
		if got := userContents(reqs[1]); !slices.Equal(got, want) {
			t.Fatalf("user messages of the second step %q, want %q", got, want)
		}
		if answered := answeredBy(msgs); !slices.Equal(answered, []string{first, id1}) {
			t.Fatalf("assistant messages answer %v, want [%s %s]", answered, first, id1)
		}
	})

	// 8. A noReply message whose id sorts before the session's newest assistant message is
	// stored (GET by id finds it), starts nothing, and is listed by creation time: after
	// that assistant message. The next turn's context has it there too, between the earlier
	// reply and the new prompt.
	t.Run("noReplyOlderID", func(t *testing.T) {
		t.Parallel()
		tt := newTurnTest(t, srv, c, h, "older-noreply")
		first := tt.promptAsync(opencode.NewMessageID(time.Now(), ""), "first")
		msgs := tt.settle()
		reply := msgs[len(msgs)-1].Info.ID
		old := opencode.NewMessageID(time.Now().Add(-time.Hour), "")
		m, err := c.Prompt(tt.ctx, tt.ses, opencode.PromptRequest{MessageID: old, NoReply: true,
			Parts: []opencode.TextPartInput{opencode.NewText(tt.visible(0)), opencode.NewSyntheticText(tt.hidden(0))}})
		if err != nil || m.Info.ID != old {
			t.Fatalf("noReply with an old id = %+v, %v", m, err)
		}
		if _, err := c.Message(tt.ctx, tt.ses, old); err != nil {
			t.Fatalf("GET the old-id message: %v", err)
		}
		if got := messageIDs(tt.messages()); len(got) != 3 || got[0] != first || got[1] != reply || got[2] != old {
			t.Fatalf("messages listed %v, want %s, %s, %s (creation order)", got, first, reply, old)
		}
		if st := tt.status(); st != "" {
			t.Fatalf("status after the noReply post = %q, want idle", st)
		}
		last := tt.promptAsync(opencode.NewMessageID(time.Now(), reply), "next")
		msgs = tt.settle()
		reqs := tt.requests()
		if len(reqs) != 2 {
			t.Fatalf("model requests = %d, want 2", len(reqs))
		}
		var got []string
		for _, m := range reqs[1].Messages {
			if m.Role != "system" {
				got = append(got, m.Role+": "+m.Content)
			}
		}
		want := []string{"user: " + tt.text("first"), "assistant: reply to " + tt.text("first"),
			"user: " + tt.visible(0) + "\n" + tt.hidden(0), "user: " + tt.text("next")}
		if !slices.Equal(got, want) {
			t.Fatalf("context of the next turn:\n%q\nwant\n%q", got, want)
		}
		if answered := answeredBy(msgs); !slices.Equal(answered, []string{first, last}) {
			t.Fatalf("assistant messages answer %v, want [%s %s]", answered, first, last)
		}
	})
}

// turnTest is one subtest's session on the shared server, with the tag its texts carry.
type turnTest struct {
	t   *testing.T
	ctx context.Context
	c   *opencode.HTTPClient
	srv *opencodetest.Server
	ses string
	tag string
}

func newTurnTest(t *testing.T, srv *opencodetest.Server, c *opencode.HTTPClient, h *holds, name string) *turnTest {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	s, err := c.CreateSession(ctx, opencode.CreateSessionRequest{Title: name})
	if err != nil {
		t.Fatal(err)
	}
	tt := &turnTest{t: t, ctx: ctx, c: c, srv: srv, ses: s.ID, tag: name + "-" + s.ID[len(s.ID)-8:]}
	h.add(tt.tag)
	t.Cleanup(func() { h.release(tt.tag) })
	return tt
}

// text returns s tagged for this subtest.
func (tt *turnTest) text(s string) string { return s + " [" + tt.tag + "]" }

// visible and hidden are the texts of the i-th noReply message's parts.
func (tt *turnTest) visible(i int) string { return tt.text(fmt.Sprintf("note %d", i)) }
func (tt *turnTest) hidden(i int) string  { return tt.text(fmt.Sprintf("hidden %d", i)) }

// hold returns s with the directive that holds its model request until released.
func (tt *turnTest) hold(s string) string { return s + " HOLD:" + tt.tag }

// noReplies posts n noReply messages with ascending ids newer than after, as the Manager
// posts a notification (a visible and a synthetic text part), and returns their ids.
func (tt *turnTest) noReplies(n int, after string) []string {
	tt.t.Helper()
	var ids []string
	for i := range n {
		id := opencode.NewMessageID(time.Now(), after)
		m, err := tt.c.Prompt(tt.ctx, tt.ses, opencode.PromptRequest{MessageID: id, NoReply: true,
			Parts: []opencode.TextPartInput{opencode.NewText(tt.visible(i)), opencode.NewSyntheticText(tt.hidden(i))}})
		if err != nil {
			tt.t.Fatal(err)
		}
		if m.Info.ID != id || m.Info.Role != opencode.RoleUser {
			tt.t.Fatalf("noReply post returned %+v", m.Info)
		}
		ids = append(ids, id)
		after = id
	}
	return ids
}

// promptAsync posts one tagged text with message id id and returns id.
func (tt *turnTest) promptAsync(id, text string) string {
	tt.t.Helper()
	err := tt.c.PromptAsync(tt.ctx, tt.ses, opencode.PromptRequest{MessageID: id,
		Parts: []opencode.TextPartInput{opencode.NewText(tt.text(text))}})
	if err != nil {
		tt.t.Fatal(err)
	}
	return id
}

// requests returns the chat requests of this subtest, oldest first.
func (tt *turnTest) requests() []opencodetest.Request {
	var out []opencodetest.Request
	for _, r := range tt.srv.Model.Requests() {
		if r.Kind == opencodetest.KindChat && r.Contains(tt.tag) {
			out = append(out, r)
		}
	}
	return out
}

// waitRequests waits until the model has received n requests of this subtest.
func (tt *turnTest) waitRequests(n int) {
	tt.t.Helper()
	if !testmain.Eventually(60*time.Second, func() bool { return len(tt.requests()) >= n }) {
		tt.t.Fatalf("model requests = %d, want %d", len(tt.requests()), n)
	}
}

func (tt *turnTest) status() string {
	tt.t.Helper()
	st, err := tt.c.SessionStatus(tt.ctx, "")
	if err != nil {
		tt.t.Fatal(err)
	}
	return st[tt.ses].Type
}

func (tt *turnTest) messages() []opencode.Message {
	tt.t.Helper()
	msgs, err := tt.c.Messages(tt.ctx, tt.ses, 0)
	if err != nil {
		tt.t.Fatal(err)
	}
	return msgs
}

// settle waits until the session is idle and its last listed message is a finished
// assistant message, and returns the messages. A posted prompt is listed last (by creation
// time) as soon as its post returned, so this cannot pass before its turn.
func (tt *turnTest) settle() []opencode.Message {
	tt.t.Helper()
	var msgs []opencode.Message
	ok := testmain.Eventually(60*time.Second, func() bool {
		st, err := tt.c.SessionStatus(tt.ctx, "")
		if err != nil || st[tt.ses].Type != "" {
			return false
		}
		msgs, err = tt.c.Messages(tt.ctx, tt.ses, 0)
		if err != nil || len(msgs) == 0 {
			return false
		}
		last := msgs[len(msgs)-1].Info
		return last.Role == opencode.RoleAssistant && last.Time.Completed != 0 && last.Finish == "stop"
	})
	if !ok {
		tt.t.Fatalf("session did not settle; messages: %s", describe(msgs))
	}
	return msgs
}

// nextMillisecond waits until message id is stored (prompt_async answers before it is:
// a GET right after it may be 404) and the server clock's millisecond is past its
// creation time, so that the next message is created in a later millisecond.
func (tt *turnTest) nextMillisecond(id string) {
	tt.t.Helper()
	var m *opencode.Message
	var err error
	if !testmain.Eventually(10*time.Second, func() bool {
		m, err = tt.c.Message(tt.ctx, tt.ses, id)
		return err == nil
	}) {
		tt.t.Fatal(err)
	}
	for time.Now().UnixMilli() <= m.Info.Time.Created {
		time.Sleep(time.Millisecond)
	}
}

// record subscribes to the session's events; the subscription is live when it returns.
func (tt *turnTest) record() *recorder {
	tt.t.Helper()
	ctx, cancel := context.WithCancel(tt.ctx)
	st, err := tt.c.Events(ctx)
	if err != nil {
		cancel()
		tt.t.Fatal(err)
	}
	r := &recorder{ses: tt.ses, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for ev, err := range st.All() {
			if err != nil {
				return
			}
			if sid := ev.SessionID(); sid != "" {
				r.add(sid, ev)
			}
		}
	}()
	tt.t.Cleanup(func() {
		st.Close()
		cancel()
		<-r.done
	})
	// Events of the first tens of milliseconds can be missed: abort an idle probe session
	// (which emits session.idle for it) until its event comes through.
	probe, err := tt.c.CreateSession(tt.ctx, opencode.CreateSessionRequest{Title: "probe " + tt.tag})
	if err != nil {
		tt.t.Fatal(err)
	}
	live := testmain.Eventually(30*time.Second, func() bool {
		if r.seen(probe.ID) {
			return true
		}
		if err := tt.c.Abort(tt.ctx, probe.ID); err != nil {
			tt.t.Error(err)
			return true
		}
		return false
	})
	if !live {
		tt.t.Fatal("event stream: no event about the probe session")
	}
	return r
}

// recorder keeps the events about a session (ses) and the ids of the other sessions
// that had events.
type recorder struct {
	ses    string
	mu     sync.Mutex
	events []opencode.Event
	others map[string]bool
	done   chan struct{}
}

func (r *recorder) add(sid string, ev opencode.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if sid == r.ses {
		r.events = append(r.events, ev)
		return
	}
	if r.others == nil {
		r.others = map[string]bool{}
	}
	r.others[sid] = true
}

func (r *recorder) seen(sid string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.others[sid]
}

func (r *recorder) count(typ string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, ev := range r.events {
		if ev.Type == typ {
			n++
		}
	}
	return n
}

// statuses counts the session.status events with status typ.
func (r *recorder) statuses(typ string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, ev := range r.events {
		if ev.Type != opencode.EventSessionStatus {
			continue
		}
		if p, err := ev.Decode(); err == nil && p.Status != nil && p.Status.Type == typ {
			n++
		}
	}
	return n
}

// holds keeps model requests whose last user message holds "HOLD:key" until key is
// released.
type holds struct {
	mu    sync.Mutex
	gates map[string]chan struct{}
}

func (h *holds) add(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.gates[key] = make(chan struct{})
}

func (h *holds) release(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if g, ok := h.gates[key]; ok {
		close(g)
		delete(h.gates, key)
	}
}

func (h *holds) releaseAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, g := range h.gates {
		close(g)
		delete(h.gates, k)
	}
}

// script is the model's ScriptFunc: it waits on the gate of a held request (at most a
// minute), then leaves the reply to the directives.
func (h *holds) script(r *opencodetest.Request) (opencodetest.Reply, bool) {
	_, last := r.LastUser()
	if _, key, ok := strings.Cut(last, "HOLD:"); ok {
		key, _, _ = strings.Cut(key, " ")
		h.mu.Lock()
		g := h.gates[key]
		h.mu.Unlock()
		if g != nil {
			select {
			case <-g:
			case <-time.After(time.Minute):
			}
		}
	}
	return opencodetest.Reply{}, false
}

// userContents returns the contents of the request's user messages.
func userContents(r opencodetest.Request) []string {
	var out []string
	for _, m := range r.Messages {
		if m.Role == "user" {
			out = append(out, m.Content)
		}
	}
	return out
}

// userParts returns the text parts of each user message of the request's raw body (a
// string content is one part).
func userParts(t *testing.T, r opencodetest.Request) [][]string {
	t.Helper()
	var body struct {
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil {
		t.Fatal(err)
	}
	var out [][]string
	for _, m := range body.Messages {
		if m.Role != "user" {
			continue
		}
		var s string
		if json.Unmarshal(m.Content, &s) == nil {
			out = append(out, []string{s})
			continue
		}
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(m.Content, &parts); err != nil {
			t.Fatalf("user content %s: %v", m.Content, err)
		}
		var texts []string
		for _, p := range parts {
			texts = append(texts, p.Text)
		}
		out = append(out, texts)
	}
	return out
}

func messageIDs(msgs []opencode.Message) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, m.Info.ID)
	}
	return out
}

// answeredBy returns the parentIDs of the assistant messages, in order.
func answeredBy(msgs []opencode.Message) []string {
	var out []string
	for _, m := range msgs {
		if m.Info.Role == opencode.RoleAssistant {
			out = append(out, m.Info.ParentID)
		}
	}
	return out
}

func describe(msgs []opencode.Message) string {
	var b strings.Builder
	for _, m := range msgs {
		fmt.Fprintf(&b, "\n  %s %s parent=%s created=%d completed=%d finish=%q", m.Info.ID, m.Info.Role,
			m.Info.ParentID, m.Info.Time.Created, m.Info.Time.Completed, m.Info.Finish)
		for _, p := range m.Parts {
			if p.Type == opencode.PartText {
				fmt.Fprintf(&b, " %q", p.Text)
			}
		}
	}
	return b.String()
}
