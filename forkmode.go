package asyncagents

import (
	"context"
	"fmt"

	"github.com/asyncagents/asyncagents/fork"
	"github.com/asyncagents/asyncagents/opencode"
)

// ForkMode is how a forked task gets its caller's context.
type ForkMode string

// Fork modes.
const (
	// ForkDigest renders the caller's messages as one text, cut by the fork pipeline (the
	// latest compaction, old tool results cut, a character budget; see package fork) with a
	// preamble saying what was cut, and sends it before the prompt. The child's requests
	// share nothing with the caller's beyond the system prompt and tools: a provider's
	// prompt cache does not help it.
	ForkDigest ForkMode = "digest"
	// ForkNative starts the child from OpenCode's own copy of the caller's session
	// (POST /session/{id}/fork): the caller's messages as they are, up to the one that
	// launched the task (Caller.MessageID; all of them without it), then the prompt as the
	// next user message. With the caller's agent and model, the child's first model request
	// repeats the caller's last request as a prefix, which a provider's prompt cache reads at
	// a fraction of the input price. When the history does not fit the fork pipeline's
	// budget (the pipeline would drop its oldest messages, or clip the one left), the task
	// falls back to ForkDigest (Task.ForkMode says which was used). OpenCode does not
	// make the copy a child of the caller: it has no parentID, its title is the caller's with
	// " (fork #1)", it takes no permission rules (the Manager still refuses launches from a
	// task at the deepest nesting level), and deleting the caller does not delete it (the
	// Manager cancels its task as for any task of a deleted parent).
	ForkNative ForkMode = "native"
)

// valid reports whether m is a mode, or "" (the Manager's).
func (m ForkMode) valid() bool { return m == "" || m == ForkDigest || m == ForkNative }

// native reports whether a fork's pipeline result lets the child start from OpenCode's copy
// of the caller: the pipeline kept every message, the budget did not clip it. (Tool results
// the tiers cut are no reason: the copy keeps them whole, and the cache reads them.)
func native(s fork.Stats) bool { return s.RemovedMessages == 0 && !s.BudgetClipped }

// forkChild creates a native fork's session: OpenCode's copy of the caller session up to
// the caller's message (POST /session/{id}/fork), and returns it with the id of its newest
// message (GET /session/{id}/message?limit=1), the baseline of the task's first run.
func (m *Manager) forkChild(ctx context.Context, in LaunchInput) (*opencode.Session, string, error) {
	m.awaitStream(ctx)
	sess, err := m.client.ForkSession(ctx, in.Caller.SessionID, in.Caller.MessageID)
	if err != nil {
		return nil, "", fmt.Errorf("asyncagents: fork the caller session: %w", err)
	}
	last, err := m.client.Messages(ctx, sess.ID, 1)
	if err != nil {
		return nil, "", fmt.Errorf("asyncagents: read the forked session: %w", err)
	}
	baseline := ""
	if len(last) > 0 {
		baseline = last[0].Info.ID
	}
	return sess, baseline, nil
}
