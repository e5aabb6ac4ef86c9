package asyncagents

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/worktree"
)

// OutputOptions select how [Manager.Output] waits and what it returns.
type OutputOptions struct {
	// Block waits until the task ends or Timeout passes.
	Block bool
	// Timeout bounds a blocking wait. Zero means [DefaultOutputTimeout]; more than
	// [MaxOutputTimeout] is clamped to it; negative is [ErrInvalidInput].
	Timeout time.Duration

	// FullSession also returns the task session's messages (Output.Messages): the last
	// MessageLimit of them, or with SinceMessageID the first MessageLimit after that message.
	// [FormatMessages] renders them; IncludeThinking and IncludeToolResults say what it shows.
	FullSession bool
	// SinceMessageID, with FullSession, returns only the messages after this one, which must
	// be a message of the task's session ([ErrInvalidInput] otherwise).
	SinceMessageID string
	// MessageLimit, with FullSession, bounds how many messages are returned: 1 to
	// [MaxMessageLimit]; 0 means [DefaultMessageLimit].
	MessageLimit int
	// IncludeThinking shows reasoning parts, and IncludeToolResults tool outputs and errors,
	// in [FormatMessages].
	IncludeThinking, IncludeToolResults bool

	// Diff, for an isolated task, also returns a page of its branch's diff (Output.Diff):
	// at most [DiffPageBytes] bytes from byte DiffOffset of git diff of its base and its
	// branch's tip. A negative offset is [ErrInvalidInput].
	Diff       bool
	DiffOffset int
}

// DiffPageBytes is the size of a page of an isolated task's diff (OutputOptions.Diff).
const DiffPageBytes = 16 << 10

// Bounds of OutputOptions.MessageLimit.
const (
	DefaultMessageLimit = 20
	MaxMessageLimit     = 100
)

// Output is what [Manager.Output] returns.
type Output struct {
	// Task is the task: with its Result when completed, its Error when failed or cancelled,
	// and its Progress while active.
	Task Task
	// TimedOut reports that a blocking wait ended by its timeout while the task was active.
	TimedOut bool
	// Messages are the session's messages asked for with FullSession, oldest first, and
	// MoreMessages reports that more come after them (with SinceMessageID) or before them.
	Messages     []opencode.Message
	MoreMessages bool
	// Diff is the page of an isolated task's diff asked for with OutputOptions.Diff: its
	// Next is the offset of the next page, when More.
	Diff *worktree.DiffPage
}

// Output returns the caller's task named by id (the full id, the id without "tsk_", or a
// unique prefix of at least 4 characters after "tsk_"), with its result, error or progress.
// A completed result is marked retrieved
// (Task.Retrieved). It reads no messages from the server, except with FullSession: then it
// reads the session's messages newest first in pages (GET /session/{id}/message?limit&before),
// only as far back as needed.
//
// With Block it first waits until the task ends, the timeout passes (not an error: TimedOut
// is set), ctx ends (returning ctx.Err(); nothing changes) or the Manager closes
// ([ErrClosed]). A task cleared while waited on gives [ErrTaskNotFound]; one handed over to
// another host meanwhile (a shared [HandoffStore]), [ErrLeaseLost]: ask again, and it is taken
// over from there. Other errors:
// [ErrInvalidInput] (an empty id or caller, a negative timeout, a message limit out of range,
// an unknown SinceMessageID: it is looked up first, GET /session/{id}/message/{messageID}),
// [ErrTaskNotFound], [ErrAmbiguousID], or the server's error reading the messages. The result
// is marked retrieved only once the messages asked for were read.
func (m *Manager) Output(ctx context.Context, caller Caller, id string, opts OutputOptions) (Output, error) {
	timeout, err := opts.check()
	if err != nil {
		return Output{}, err
	}
	e, err := m.lockTask(ctx, caller, id)
	if err != nil {
		return Output{}, err
	}
	tid, sid := e.task.ID, e.task.SessionID
	if opts.FullSession && opts.SinceMessageID != "" {
		m.mu.Unlock()
		if err := checkSince(ctx, m.client, tid, sid, opts.SinceMessageID); err != nil {
			return Output{}, err
		}
		m.mu.Lock()
	}
	done := e.done
	wait := opts.Block && !isClosed(done)
	if wait {
		e.waits.n++
	}
	m.mu.Unlock()

	timedOut := false
	if wait {
		t, ended, timeUp, err := m.waitEnd(ctx, e, done, timeout)
		if ended { // finish left the task as the run ended
			return m.output(ctx, Output{Task: t}, opts)
		}
		if err != nil {
			return Output{}, err
		}
		timedOut = timeUp
	}
	m.mu.Lock()
	if e.removed {
		m.mu.Unlock()
		if e.hold.lost {
			return Output{}, fmt.Errorf("%w: %s moved to another host while it was waited on; ask again", ErrLeaseLost, e.task.ID)
		}
		return Output{}, fmt.Errorf("%w: %s was cleared", ErrTaskNotFound, e.task.ID)
	}
	out := Output{Task: m.viewLocked(e), TimedOut: timedOut && !e.task.Status.Terminal()}
	m.mu.Unlock()
	out, err = m.output(ctx, out, opts) // before the result is marked retrieved: a failed read changes nothing
	if err != nil {
		return Output{}, err
	}
	m.markRetrieved(e, &out.Task)
	return out, nil
}

// check validates the options and returns how long a blocking Output waits.
func (opts *OutputOptions) check() (time.Duration, error) {
	if opts.Timeout < 0 {
		return 0, fmt.Errorf("%w: negative timeout %v", ErrInvalidInput, opts.Timeout)
	}
	if opts.DiffOffset < 0 {
		return 0, fmt.Errorf("%w: negative diff offset %d", ErrInvalidInput, opts.DiffOffset)
	}
	if opts.MessageLimit < 0 || opts.MessageLimit > MaxMessageLimit {
		return 0, fmt.Errorf("%w: message limit %d must be 1 to %d", ErrInvalidInput, opts.MessageLimit, MaxMessageLimit)
	}
	return min(cmp.Or(opts.Timeout, DefaultOutputTimeout), MaxOutputTimeout), nil
}

// waitEnd waits, counted in e.waiters, until the run whose done channel is done ends, the
// timeout passes (timedOut), ctx ends or the Manager closes (err). ended reports that finish
// left it t, the task as the run ended.
func (m *Manager) waitEnd(ctx context.Context, e *entry, done chan struct{}, timeout time.Duration) (t Task, ended, timedOut bool, err error) {
	select {
	case <-done:
	case <-m.bg.clock.After(timeout):
		timedOut = true
	case <-ctx.Done():
		err = ctx.Err()
	case <-m.bg.stopc:
		err = ErrClosed
	}
	counted := true // in e.waiters when the run ended
	if !isClosed(done) {
		m.mu.Lock()
		if !isClosed(done) {
			e.waits.n--
			counted = false
		}
		m.mu.Unlock()
	}
	if t, ok := takeEnd(e, done, counted); ok {
		return t, true, false, nil
	}
	return Task{}, false, timedOut, err
}

// markRetrieved marks the completed result that t, the copy an Output returns, shows as
// retrieved, when it was not yet and the task still holds it, and sets the time on t.
func (m *Manager) markRetrieved(e *entry, t *Task) {
	if t.Status != StatusCompleted {
		return
	}
	m.mu.Lock()
	if e.removed || e.task.Status != StatusCompleted || e.task.ResumeCount != t.ResumeCount {
		m.mu.Unlock()
		return
	}
	save := e.task.Retrieved.IsZero()
	if save {
		e.task.Retrieved = m.bg.now()
		m.changedLocked(e)
	}
	t.Retrieved = e.task.Retrieved
	m.mu.Unlock()
	if save {
		m.persist(e)
	}
}

// checkSince makes sure task id's session sid has the message since
// (GET /session/{sid}/message/{since}) before an Output waits or marks anything.
func checkSince(ctx context.Context, client opencode.Client, id, sid, since string) error {
	if sid == "" {
		return fmt.Errorf("%w: since_message_id %s: task %s has no session yet", ErrInvalidInput, echo(since), id)
	}
	_, err := client.Message(ctx, sid, since)
	if errors.Is(err, opencode.ErrNotFound) {
		return fmt.Errorf("%w: since_message_id %s is not a message of task %s", ErrInvalidInput, echo(since), id)
	}
	if err != nil {
		return fmt.Errorf("asyncagents: read message %s of %s: %w", echo(since), id, err)
	}
	return nil
}

// output adds the session's messages to out when opts ask for them, and for an ended
// isolated task its change and overlaps as they are now, and the page of its diff asked for.
func (m *Manager) output(ctx context.Context, out Output, opts OutputOptions) (Output, error) {
	if w := out.Task.Worktree; w != nil && out.Task.Status.Terminal() && w.Merged.IsZero() && w.Discarded.IsZero() {
		m.mu.Lock()
		siblings := map[string]string{}
		if e := m.tasks.byID[out.Task.ID]; e != nil {
			siblings = m.tasks.siblingWorktrees(e)
		}
		m.mu.Unlock()
		now := w.clone()
		if err := m.isolation.describe(ctx, now, siblings, false); err == nil {
			out.Task.Worktree = now
		} // else the record's, as the last run's end saw it
	}
	if opts.Diff && out.Task.Worktree != nil && out.Task.Worktree.Discarded.IsZero() {
		w := out.Task.Worktree
		r, err := m.isolation.repo(ctx, w.Repo, nil)
		if err != nil {
			return Output{}, isolationErr(err)
		}
		page, err := r.Diff(ctx, w.ID, opts.DiffOffset, DiffPageBytes)
		if err != nil {
			return Output{}, fmt.Errorf("asyncagents: read the diff of %s: %w", out.Task.ID, err)
		}
		out.Diff = &page
	}
	if opts.FullSession && out.Task.SessionID != "" { // none yet: a task still starting has no messages
		var err error
		out.Messages, out.MoreMessages, err = sessionMessages(ctx, m.client, out.Task.SessionID, opts.SinceMessageID, cmp.Or(opts.MessageLimit, DefaultMessageLimit))
		if err != nil {
			return Output{}, err
		}
	}
	return out, nil
}

// takeEnd returns, to a blocked Output whose wait on done ended, a copy of the task as the run
// ended, when finish left it one: the run ended while the Output was counted in e.waiters.
func takeEnd(e *entry, done chan struct{}, counted bool) (Task, bool) {
	if !counted {
		return Task{}, false
	}
	v := e.waits.ended.Load()
	if v == nil || v.done != done {
		return Task{}, false
	}
	t := v.task.clone()
	if v.left.Add(-1) == 0 {
		e.waits.ended.CompareAndSwap(v, nil)
	}
	return t, true
}

// sessionMessages returns the last limit messages of session id, or, after since, the first
// limit after it, reading pages newest first.
func sessionMessages(ctx context.Context, client opencode.Client, id, since string, limit int) ([]opencode.Message, bool, error) {
	if since == "" {
		msgs, next, err := client.MessagesBefore(ctx, id, limit, "")
		if err != nil {
			return nil, false, fmt.Errorf("asyncagents: read the messages of %s: %w", id, err)
		}
		return msgs, next != "", nil
	}
	// after holds the oldest messages (at most limit) newer than the pages read so far.
	var (
		after  []opencode.Message
		more   bool
		cursor string
	)
	for {
		page, next, err := client.MessagesBefore(ctx, id, messagePage, cursor)
		if err != nil {
			return nil, false, fmt.Errorf("asyncagents: read the messages of %s: %w", id, err)
		}
		i := slices.IndexFunc(page, func(msg opencode.Message) bool { return msg.Info.ID == since })
		if i < 0 && next == "" {
			return nil, false, fmt.Errorf("%w: since_message_id %s is not a message of task %s", ErrInvalidInput, echo(since), id)
		}
		after = append(page[i+1:], after...) // i = -1: the whole page
		if len(after) > limit {
			after, more = after[:limit], true
		}
		if i >= 0 {
			return after, more, nil
		}
		cursor = next
	}
}

// messagePage is how many messages sessionMessages asks for at a time when it looks for a
// message further back.
const messagePage = 100
