package asyncagents

import (
	"context"
	"errors"
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
	// launched the task (Caller.MessageID; without it, up to a step of the caller still
	// running, or all of them), in the caller's directory, then the prompt as the next user
	// message. With the caller's agent and model, the child's first model request
	// repeats the caller's last request as a prefix, which a provider's prompt cache reads at
	// a fraction of the input price. When the history does not fit the fork pipeline's
	// budget (the pipeline would drop its oldest messages, or clip the one left), the task
	// falls back to ForkDigest (Task.ForkMode says which was used). OpenCode does not
	// make the copy a child of the caller: it has no parentID, its title is the caller's with
	// " (fork #n)", it takes no permission rules (the Manager still refuses launches from a
	// task at the deepest nesting level), and deleting the caller does not delete it (the
	// Manager drops its task, aborting it, as for any task of a deleted parent). The task's
	// prompt comes after a synthetic part telling it that the messages above are a copy of a
	// conversation that goes on without it. Only with the caller's agent and model is the
	// prefix the caller's: another agent has another system prompt and tools.
	ForkNative ForkMode = "native"
)

// valid reports whether m is a mode, or "" (the Manager's).
func (m ForkMode) valid() bool { return m == "" || m == ForkDigest || m == ForkNative }

// native reports whether a fork's pipeline result lets the child start from OpenCode's copy
// of the caller: the pipeline kept every message, the budget did not clip it. (Tool results
// the tiers cut are no reason: the copy keeps them whole, and the cache reads them.)
func native(s fork.Stats) bool { return s.RemovedMessages == 0 && !s.BudgetClipped }

// nativeFraming is what a native fork is told before its prompt, as a synthetic part: the
// messages above are a copy of the caller's conversation, whose work goes on without it.
const nativeFraming = "You are a background task started from a copy of the conversation above. " +
	"The conversation goes on elsewhere without you: do only the task below, do not take up " +
	"the conversation's own work, and end with the task's result."

// forkChild creates a native fork's session in the caller's directory dir: OpenCode's copy of
// the caller session (POST /session/{id}/fork?directory=) cut before the caller's message, and
// returns it with the id of its newest message (GET /session/{id}/message?limit=1), the
// baseline of the task's first run. Without a caller message the server knows (read with
// GET /session/{id}/message/{messageID}), the cut is before the caller's newest message when
// that is a step still running (the one calling the tool), so the copy holds no step cut
// short; otherwise the copy is whole. OpenCode's fork copies none of the caller's permission
// rules and takes none: rules are added to the copy (PATCH /session/{id}) before anything
// runs in it; when that fails, the copy is deleted.
func (m *Manager) forkChild(ctx context.Context, in LaunchInput, dir string, rules []opencode.PermissionRule) (*opencode.Session, string, error) {
	cut := in.Caller.MessageID
	if cut != "" {
		if _, err := m.client.Message(ctx, in.Caller.SessionID, cut); errors.Is(err, opencode.ErrNotFound) {
			cut = ""
		} else if err != nil {
			return nil, "", fmt.Errorf("asyncagents: read the caller's message: %w", err)
		}
	}
	if cut == "" {
		newest, err := m.client.Messages(ctx, in.Caller.SessionID, 1)
		if err != nil {
			return nil, "", callerErr(in.Caller.SessionID, err)
		}
		if len(newest) == 1 && newest[0].Info.Role == opencode.RoleAssistant && newest[0].Info.Time.Completed == 0 {
			cut = newest[0].Info.ID
		}
	}
	m.mirrors.awaitStream(ctx, m.bg.quickTimeout(), m.bg.stopc)
	sess, err := m.client.ForkSession(ctx, in.Caller.SessionID, opencode.ForkSessionRequest{MessageID: cut, Directory: dir})
	if err != nil {
		return nil, "", fmt.Errorf("asyncagents: fork the caller session: %w", err)
	}
	if len(rules) > 0 {
		if _, err := m.client.UpdateSession(ctx, sess.ID, opencode.UpdateSessionRequest{Permission: rules, Directory: dir}); err != nil {
			m.bg.deleteSession(m.client, sess.ID)
			return nil, "", fmt.Errorf("asyncagents: set the fork's permission rules: %w", err)
		}
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
