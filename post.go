package asyncagents

import (
	"context"
	"errors"
	"fmt"

	"github.com/asyncagents/asyncagents/opencode"
)

// postOnce posts a message to parent, as the Manager posts notifications and turn prompts:
// with an id of its own choosing, newer than the parent's newest message, and recorded
// (record) before it is posted (post), so that a lost answer or a host that stops does not
// make it post twice; when record fails (the store could not keep the id), nothing is
// posted. prev is the id an earlier attempt posted: found in the parent
// (GET /session/{parent}/message/{prev}), it landed, and nothing is posted (confirmed). skip,
// when not nil, is given the parent's newest message id and may end the attempt with nothing
// posted (skipped). It returns the id posted, or prev.
func (m *Manager) postOnce(ctx context.Context, parent, prev string, skip func(newest string) bool,
	record func(id string) error, post func(id string) (confirmed bool, err error)) (id string, confirmed, skipped bool, err error) {
	if prev != "" { // posted before: did it land?
		_, err := m.client.Message(ctx, parent, prev)
		if err == nil {
			return prev, true, false, nil // it landed; the answer was lost
		}
		if !errors.Is(err, opencode.ErrNotFound) {
			return "", false, false, fmt.Errorf("asyncagents: check message %s: %w", prev, err)
		}
		if _, err := m.client.GetSession(ctx, parent); err != nil {
			return "", false, false, err // NotFound here: the parent is gone
		}
	}
	after, err := m.newestBefore(ctx, parent)
	if err != nil {
		return "", false, false, err
	}
	if skip != nil && skip(after) {
		return "", false, true, nil
	}
	id = opencode.NewMessageID(m.now(), after)
	m.notes.heads.raise(parent, id, 0)
	if err := record(id); err != nil {
		return "", false, false, err
	}
	confirmed, err = post(id)
	return id, confirmed, false, err
}

// messagePoster is a Client that posts a message without decoding the answer
// (opencode.HTTPClient.PostMessage).
type messagePoster interface {
	PostMessage(ctx context.Context, sessionID string, req opencode.PromptRequest) (string, error)
}

// postNoReply posts req to session without reply (POST /session/{id}/message with noReply)
// and discards the answer, which echoes the message posted: with a client that can skip
// decoding it (a messagePoster, as opencode.HTTPClient is) it does, otherwise it is Prompt.
func (m *Manager) postNoReply(ctx context.Context, session string, req opencode.PromptRequest) error {
	req.NoReply = true
	if p, ok := m.client.(messagePoster); ok {
		_, err := p.PostMessage(ctx, session, req)
		return err
	}
	_, err := m.client.Prompt(ctx, session, req)
	return err
}
