package opencodetest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/asyncagents/asyncagents/opencode"
)

// Messages returns the last limit messages of a session (all for limit ≤ 0), oldest first,
// as GET /session/{id}/message does. Parts carry their JSON in Part.Raw, as decoded from the
// real server.
func (f *FakeClient) Messages(ctx context.Context, sessionID string, limit int) ([]opencode.Message, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	path := sessionPath(sessionID, "/message")
	if err := f.enter(ctx, "Messages", http.MethodGet, path); err != nil {
		return nil, err
	}
	s, err := f.session(http.MethodGet, path, sessionID)
	if err != nil {
		return nil, err
	}
	msgs := s.msgs
	if limit > 0 && len(msgs) > limit {
		msgs = msgs[len(msgs)-limit:]
	}
	out := make([]opencode.Message, len(msgs))
	for i, m := range msgs {
		out[i] = m.message()
	}
	return out, nil
}

// MessagesBefore returns one page of a session's messages, oldest first, as GET
// /session/{id}/message?limit&before does: the limit newest messages older than the cursor
// before ("" for the newest), and the cursor of the next older page, "" on the last page. Like
// OpenCode's, a cursor is base64url JSON naming the oldest message of its page ({"id",
// "time"}) and the next page holds the messages older than that one, by creation time and
// then id. A limit below 1 is an error, as for [opencode.HTTPClient.MessagesBefore]; a
// cursor that does not decode fails with an [*opencode.APIError] of status 400 (BadRequest).
func (f *FakeClient) MessagesBefore(ctx context.Context, sessionID string, limit int, before string) ([]opencode.Message, string, error) {
	if limit < 1 {
		return nil, "", fmt.Errorf("opencode: MessagesBefore: limit %d must be positive", limit)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	path := sessionPath(sessionID, "/message")
	if err := f.enter(ctx, "MessagesBefore", http.MethodGet, path); err != nil {
		return nil, "", err
	}
	s, err := f.session(http.MethodGet, path, sessionID)
	if err != nil {
		return nil, "", err
	}
	msgs := s.msgs
	if before != "" {
		c, ok := decodeCursor(before)
		if !ok {
			return nil, "", apiError(http.MethodGet, path, http.StatusBadRequest, map[string]any{"_tag": "BadRequest"})
		}
		var older []*fakeMessage
		for _, m := range msgs {
			if c.older(m.info) {
				older = append(older, m)
			}
		}
		msgs = older
	}
	next := ""
	if len(msgs) > limit {
		msgs = msgs[len(msgs)-limit:]
		next = encodeCursor(msgs[0].info)
	}
	out := make([]opencode.Message, len(msgs))
	for i, m := range msgs {
		out[i] = m.message()
	}
	return out, next, nil
}

// cursor is what a page cursor names: the oldest message of the page before it.
type cursor struct {
	ID   string `json:"id"`
	Time int64  `json:"time"`
}

func encodeCursor(m infoJSON) string {
	b, _ := json.Marshal(cursor{ID: m.ID, Time: m.Time.Created})
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string) (cursor, bool) {
	var c cursor
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
	if err != nil || json.Unmarshal(b, &c) != nil || c.ID == "" {
		return cursor{}, false
	}
	return c, true
}

// older reports whether m comes before the message c names (creation time, then id).
func (c cursor) older(m infoJSON) bool {
	return m.Time.Created < c.Time || (m.Time.Created == c.Time && m.ID < c.ID)
}

// Message returns one message, as GET /session/{id}/message/{messageID} does; an unknown
// session or message fails with an error matching [opencode.ErrNotFound].
func (f *FakeClient) Message(ctx context.Context, sessionID, messageID string) (*opencode.Message, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	path := sessionPath(sessionID, "/message/"+url.PathEscape(messageID))
	if err := f.enter(ctx, "Message", http.MethodGet, path); err != nil {
		return nil, err
	}
	s, err := f.session(http.MethodGet, path, sessionID)
	if err != nil {
		return nil, err
	}
	for _, m := range s.msgs {
		if m.info.ID == messageID {
			msg := m.message()
			return &msg, nil
		}
	}
	return nil, notFound(http.MethodGet, path, messageID)
}
