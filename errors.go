package asyncagents

import (
	"errors"
	"fmt"

	"github.com/asyncagents/asyncagents/truncate"
)

// Errors of [Manager] operations and of the tools' handlers. Each is wrapped with the details
// (the task id, the state, the known agents, …); match with [errors.Is]. An operation that
// returns one of them has changed no task, except where its doc says otherwise (a Launch or a
// Resume whose prompt the server refuses leaves the task in StatusError and returns it with
// the error).
var (
	// ErrTaskNotFound: no task of the caller has that id, or it was cleared.
	ErrTaskNotFound = errors.New("asyncagents: task not found")
	// ErrAmbiguousID: an id prefix names several of the caller's tasks; the message lists some.
	ErrAmbiguousID = errors.New("asyncagents: ambiguous task id")
	// ErrForkResumeConflict: fork and resume were both set.
	ErrForkResumeConflict = errors.New("asyncagents: fork and resume are mutually exclusive")
	// ErrInvalidInput: a required field is empty, a value is out of range or malformed, the
	// caller session does not exist, or a tool's arguments do not match its schema.
	ErrInvalidInput = errors.New("asyncagents: invalid input")
	// ErrUnknownAgent: the agent is not one of the server's (GET /agent); the message names
	// the known ones.
	ErrUnknownAgent = errors.New("asyncagents: unknown agent")
	// ErrNotRunning: only a queued, running or resumed task can be cancelled.
	ErrNotRunning = errors.New("asyncagents: task not running")
	// ErrTaskBusy: a follow-up was sent to a task that is running or resumed.
	ErrTaskBusy = errors.New("asyncagents: task busy")
	// ErrSessionExpired: the task's session no longer exists on the server; start a new task.
	ErrSessionExpired = errors.New("asyncagents: task session expired")
	// ErrNestingDepth: the caller is a task at the deepest level WithNestingDepth allows.
	ErrNestingDepth = errors.New("asyncagents: nesting too deep")
	// ErrTaskLimit: the caller session has as many active tasks as WithMaxActivePerParent
	// allows; one must end (or be cancelled) first.
	ErrTaskLimit = errors.New("asyncagents: too many active tasks")
	// ErrPermissionDenied: the caller's permission rules do not let it launch a task with
	// that agent (as they would not let OpenCode's own task tool), or the agent is a primary
	// agent other than the caller's own.
	ErrPermissionDenied = errors.New("asyncagents: permission denied")
	// ErrBudget: the caller session's tasks, with theirs, used what WithTreeBudget allows;
	// the message says how much.
	ErrBudget = errors.New("asyncagents: over budget")
	// ErrIsolation: the task cannot get a worktree of its own ([IsolationWorktree]): the
	// parent's directory is in no git working tree, git is missing or too old, HEAD has no
	// commit, the parent's checkout has unmerged paths or a merge, rebase or cherry-pick in
	// progress, or git failed (a full disk, a lock another git process holds); the message
	// says which. It wraps the worktree package's error.
	ErrIsolation = errors.New("asyncagents: cannot isolate the task")
	// ErrNotMergeable: the task has no branch to merge, or not now: it was not isolated, it
	// is still active, it was merged or discarded already, or the parent's checkout is in a
	// state a merge cannot go into (its own unmerged paths or operation in progress, an
	// ignored file where the task adds one, a lock of another git process). Nothing changed.
	ErrNotMergeable = errors.New("asyncagents: cannot merge the task")
	// ErrConflict: the task's changes conflict with the parent's working tree; the error is
	// a *[MergeConflictError] listing the files and hunks. Nothing changed.
	ErrConflict = errors.New("asyncagents: merge conflict")
	// ErrStoreLocked: another FileStore, in this process or another, has the file open.
	ErrStoreLocked = errors.New("asyncagents: store locked")
	// ErrLeaseLost: a [LeaseStore] no longer holds the task's lease (another host claimed
	// it, or this one could not renew it in time); the change was not stored.
	ErrLeaseLost = errors.New("asyncagents: task lease lost")
	// ErrStoreCorrupt: the file is not a FileStore's, or a line of it does not read; the
	// message names the path and the line. The file is left as it was.
	ErrStoreCorrupt = errors.New("asyncagents: store file corrupt")
	// ErrClosed: the Manager was closed.
	ErrClosed = errors.New("asyncagents: manager closed")
)

// maxEcho is how many characters of a caller's value an error message repeats.
const maxEcho = 64

// echo quotes a caller's value for an error message, cut to maxEcho characters.
func echo(s string) string {
	if p, cut := truncate.Prefix(s, maxEcho); cut {
		return fmt.Sprintf("%q…", p)
	}
	return fmt.Sprintf("%q", s)
}

// ErrLagged is what [Subscription.Err] returns after the Manager dropped a subscriber that
// fell a whole buffer behind. Read the tasks again and subscribe anew.
var ErrLagged = errors.New("asyncagents: subscriber fell behind")
