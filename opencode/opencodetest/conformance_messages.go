package opencodetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/asyncagents/asyncagents/opencode"
)

// checkNoReply: a NoReply prompt stores the user message with its parts (a synthetic one
// too), returns it, and calls no model.
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
	checkModelNotCalled(k, token)
}

// checkModelNotCalled: no model request holds token (when the harness shows the requests).
func checkModelNotCalled(k *checker, token string) {
	if k.h.Requests == nil {
		return
	}
	for _, r := range k.h.Requests() {
		if r.Contains(token) {
			k.errorf("a NoReply prompt called the model")
		}
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
	checkPartIDs(k, s.ID)
}

// checkPartIDs: parts posted with ids of their own keep them and are ordered by id within
// their message; the same prompt posted again (same message id, same part ids, one text
// changed) leaves one message whose parts are replaced, not added, and keeps its place
// before a message posted in between.
func checkPartIDs(k *checker, session string) {
	last := k.messages(session, 0)
	id := opencode.NewMessageID(time.Now(), last[len(last)-1].Info.ID)
	a, b := opencode.PartID(id, "a"), opencode.PartID(id, "b")
	req := opencode.PromptRequest{NoReply: true, MessageID: id, Parts: []opencode.TextPartInput{
		{ID: b, Type: opencode.PartText, Text: "second", Synthetic: true}, {ID: a, Type: opencode.PartText, Text: "first"}}}
	if _, err := k.c.Prompt(k.ctx, session, req); !k.ok(err, "Prompt(part ids)") {
		return
	}
	if _, err := k.c.Prompt(k.ctx, session, opencode.PromptRequest{NoReply: true, Parts: text("in between")}); !k.ok(err, "Prompt(NoReply)") {
		return
	}
	req.Parts[1].Text = "first, again"
	if _, err := k.c.Prompt(k.ctx, session, req); !k.ok(err, "Prompt(same part ids)") {
		return
	}
	msgs := k.messages(session, 0)
	var got []string
	for _, m := range msgs[len(last):] {
		got = append(got, m.Info.ID)
		for _, p := range m.Parts {
			got = append(got, p.ID+" "+p.Text)
		}
	}
	want := []string{id, a + " first, again", b + " second", msgs[len(msgs)-1].Info.ID, msgs[len(msgs)-1].Parts[0].ID + " in between"}
	if !slices.Equal(got, want) {
		k.errorf("a prompt posted twice with the same message and part ids, a message between:\n got %q\nwant %q", got, want)
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
	want := messageIDs(all)
	for _, limits := range [][]int{{3}, {2}, {1}, {7}, {8}, {100}, {4, 3}, {5, 2}, {6, 1}, {2, 4, 10}} {
		if got := readPages(k, s.ID, len(want), "", limits...); got != nil && !slices.Equal(got, want) {
			k.errorf("pages of %v rebuilt %v, want %v", limits, got, want)
		}
	}
	if page, next, err := k.c.MessagesBefore(k.ctx, s.ID, 7, ""); k.ok(err, "MessagesBefore(limit 7)") && (next != "" || len(page) != 7) {
		k.errorf("MessagesBefore(limit = all 7) = %d messages, cursor %q; want all and no cursor", len(page), next)
	}
	checkCursorAfterNewer(k, s.ID, want)
	checkPagingErrors(k, s.ID)
}

// messageIDs returns the ids of msgs, in order.
func messageIDs(msgs []opencode.Message) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, m.Info.ID)
	}
	return out
}

// readPages reads the pages of a session of count messages from cursor with the given
// limits (the last one repeats), checks each page, and returns the ids read, oldest first;
// nil after a violation.
func readPages(k *checker, sessionID string, count int, cursor string, limits ...int) []string {
	var got []string
	for i := 0; ; i++ {
		limit := limits[min(i, len(limits)-1)]
		page, next, err := k.c.MessagesBefore(k.ctx, sessionID, limit, cursor)
		if !k.ok(err, fmt.Sprintf("MessagesBefore(limit %d, page %d)", limit, i)) {
			return nil
		}
		if len(page) == 0 || len(page) > limit {
			k.errorf("limits %v: page %d has %d messages", limits, i, len(page))
			return nil
		}
		got = append(messageIDs(page), got...)
		if next == "" {
			return got
		}
		if i > count {
			k.errorf("limits %v: more pages than messages", limits)
			return nil
		}
		cursor = next
	}
}

// checkCursorAfterNewer: the first page holds the newest messages, and its cursor still
// reads the older ones after a newer message arrived.
func checkCursorAfterNewer(k *checker, sessionID string, want []string) {
	first, next, err := k.c.MessagesBefore(k.ctx, sessionID, 3, "")
	if !k.ok(err, "MessagesBefore(limit 3)") || next == "" {
		return
	}
	if !slices.Equal(messageIDs(first), want[4:]) {
		k.errorf("first page %v, want the newest three %v", messageIDs(first), want[4:])
	}
	if _, err := k.c.Prompt(k.ctx, sessionID, opencode.PromptRequest{NoReply: true, Parts: text("newer")}); k.ok(err, "Prompt(NoReply)") {
		if got := readPages(k, sessionID, len(want), next, 3); got != nil && !slices.Equal(got, want[:4]) {
			k.errorf("after a newer message, the cursor read %v, want %v", got, want[:4])
		}
	}
}

// checkPagingErrors: a bad cursor is HTTP 400, a limit below 1 an error, an unknown session
// ErrNotFound.
func checkPagingErrors(k *checker, sessionID string) {
	if _, _, err := k.c.MessagesBefore(k.ctx, sessionID, 2, "abc"); !isAPIError(err, 400) {
		k.errorf("MessagesBefore(cursor \"abc\") = %v, want HTTP 400", err)
	}
	if _, _, err := k.c.MessagesBefore(k.ctx, sessionID, 0, ""); err == nil {
		k.errorf("MessagesBefore(limit 0) succeeded, want an error")
	}
	if _, _, err := k.c.MessagesBefore(k.ctx, unknownSession, 2, ""); !errors.Is(err, opencode.ErrNotFound) {
		k.errorf("MessagesBefore(unknown) = %v, want ErrNotFound", err)
	}
}
