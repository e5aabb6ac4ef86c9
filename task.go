package asyncagents

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/asyncagents/asyncagents/fork"
)

// Status is a task's state.
type Status string

// Task states. Completed, Error and Cancelled are terminal; Running and Resumed are active
// (the server works on them); Queued is neither.
const (
	StatusRunning   Status = "running"   // the task's prompt is being worked on
	StatusCompleted Status = "completed" // the run finished; Task.Result holds the reply
	StatusError     Status = "error"     // the run failed; Task.Error says why
	StatusCancelled Status = "cancelled" // cancelled, or its session was deleted
	StatusResumed   Status = "resumed"   // a follow-up prompt is being worked on
	StatusQueued    Status = "queued"    // waiting for a slot of its concurrency limit
)

// Terminal reports whether s is [StatusCompleted], [StatusError] or [StatusCancelled].
func (s Status) Terminal() bool {
	return s == StatusCompleted || s == StatusError || s == StatusCancelled
}

// Active reports whether s is [StatusRunning] or [StatusResumed].
func (s Status) Active() bool { return s == StatusRunning || s == StatusResumed }

func (s Status) valid() bool { return s.Terminal() || s.Active() || s == StatusQueued }

// Caller says on whose behalf an operation is made: the parent session (an OpenCode session
// id, "ses_…"), the message that made the call and the agent that runs there. Tasks belong
// to the caller's session; the agent is the one the parent's notifications are sent with,
// and its permission rules bound what the caller may launch (see [Manager.Launch]): a host
// that launches for a model sets it to the model's agent.
type Caller struct {
	SessionID string `json:"sessionID"`
	MessageID string `json:"messageID,omitempty"`
	Agent     string `json:"agent,omitempty"`
	// CallID is the id of the tool call that makes the operation, when the host knows it
	// (OpenCode's callID): the task tool makes it the launch's idempotency key, so that a
	// retried call launches nothing more.
	CallID string `json:"callID,omitempty"`
}

// Progress counts a task's tool calls, from the message.part.updated events of its session.
type Progress struct {
	ToolCalls int            `json:"toolCalls"`
	Tools     map[string]int `json:"tools,omitempty"`     // calls per tool name
	LastTools []string       `json:"lastTools,omitempty"` // the last 3 tool names, oldest first
	Updated   time.Time      `json:"updated,omitzero"`    // when the last call was seen
}

// PendingPermission is a permission request the task's session waits on (event
// permission.asked): Permission is the permission or tool name ("bash",
// "external_directory", …) and Patterns what it asks for.
type PendingPermission struct {
	ID         string   `json:"id"`
	Permission string   `json:"permission"`
	Patterns   []string `json:"patterns,omitempty"`
}

// Task is a snapshot of one background task. [Manager] methods return copies: changing one
// changes nothing in the Manager. The JSON form is what a [Store] keeps.
type Task struct {
	// ID names the task in the Manager's methods, its tools and its store. Treat it as
	// opaque: it is not the session's id (that is SessionID), although a task recorded by an
	// earlier version has its session's id as its ID.
	ID string `json:"id"`
	// SessionID is the OpenCode session ("ses_…") the task runs in, a child of
	// ParentSessionID (a native fork's has no parent); empty while the task starts and has
	// none yet.
	SessionID string `json:"sessionID,omitempty"`
	// Starting is set from the launch until the task's prompt can be sent: its session is
	// being made (a native fork, an isolated task's worktree) or given the parent's context.
	// Launch returns before that work (see [Manager.Launch]).
	Starting        bool      `json:"starting,omitempty"`
	ParentSessionID string    `json:"parentSessionID"`
	ParentMessageID string    `json:"parentMessageID,omitempty"`
	ParentAgent     string    `json:"parentAgent,omitempty"`
	Directory       string    `json:"directory,omitempty"` // the child session's project directory
	Server          string    `json:"server,omitempty"`    // the OpenCode server it runs on, as its LeaseStore names it
	Description     string    `json:"description"`
	Prompt          string    `json:"prompt"`             // of the current run: the follow-up after a resume, the last message after a Steer
	PromptID        string    `json:"promptID,omitempty"` // the id of that prompt's message, chosen by the Manager
	Agent           string    `json:"agent"`
	Model           string    `json:"model,omitempty"` // "providerID/modelID"; empty for the agent's default
	Status          Status    `json:"status"`
	Started         time.Time `json:"started"`            // of the current run (of the follow-up after a resume)
	Completed       time.Time `json:"completed,omitzero"` // when the current run ended
	Result          string    `json:"result,omitempty"`   // the final reply's text, when completed
	Error           string    `json:"error,omitempty"`    // why, when error or cancelled
	Retrieved       time.Time `json:"retrieved,omitzero"` // when Output first returned the result
	BatchID         string    `json:"batchID"`            // tasks launched while a sibling runs share it
	ResumeCount     int       `json:"resumeCount"`        // follow-ups sent
	Steers          int       `json:"steers,omitempty"`   // messages sent to its current run (Steer)
	// Paused is set on a task cancelled at its budget under WithBudgetPause: Result holds what
	// its run did so far, and Resume goes on from there.
	Paused    bool     `json:"paused,omitempty"`
	FollowUps []string `json:"followUps,omitempty"` // follow-ups queued while active
	Forked    bool     `json:"forked"`              // launched with the parent's context
	LaunchKey string   `json:"launchKey,omitempty"` // the launch's idempotency key (LaunchInput.IdempotencyKey)
	Depth     int      `json:"depth,omitempty"`     // 1, or its parent task's depth + 1
	// AnchorSessionID is the session whose per-parent cap and tree budget the task counts
	// under when it is not its parent: a task launched by a session the Manager did not know
	// (OpenCode's own subagent, say) counts under the nearest task or parent with tasks above
	// that session. Empty: its parent.
	AnchorSessionID string             `json:"anchorSessionID,omitempty"`
	Deadline        time.Duration      `json:"deadline,omitempty"`   // how long a run may take; 0: no limit
	Progress        Progress           `json:"progress"`             //
	ForkMode        ForkMode           `json:"forkMode,omitempty"`   // how a forked task got the context
	ForkStats       *fork.Stats        `json:"forkStats,omitempty"`  // what a forked task inherited
	Permission      *PendingPermission `json:"permission,omitempty"` // a request the session waits on
	// Usage is what the task's model steps used, all runs together, and RunUsage what the
	// current or last run's did: while a run goes on, its steps count as the event stream
	// shows them complete; once it is decided, as its messages say (a run aborted before
	// it was decided keeps the running figure). FirstStep is the task's first step: its
	// prompt and, for a forked task, the inherited context read in full (the price of the
	// fork).
	Usage     Usage `json:"usage,omitzero"`
	RunUsage  Usage `json:"runUsage,omitzero"`
	FirstStep Usage `json:"firstStep,omitzero"`
	// Budget bounds what each run may use (WithTaskBudget); a run that reaches it is aborted.
	Budget Budget `json:"budget,omitzero"`
	// Worktree is the task's git worktree and what its runs changed there, when it was
	// launched with [IsolationWorktree]; nil otherwise.
	Worktree *Worktree `json:"worktree,omitempty"`
	// Notifications are the parent notifications of the task's run ends that are not
	// delivered yet, and the last one that was.
	Notifications []Notification `json:"notifications,omitempty"`

	// Seal authenticates the record when the Manager has a record key ([WithRecordKey]):
	// the hex HMAC-SHA256, with that key, of the record's JSON form with Seal empty. A record
	// read from the store without the key's seal is refused.
	Seal string `json:"seal,omitempty"`

	// QueuePosition is the task's place, from 1, among the tasks queued for the same limit
	// while it is [StatusQueued]; 0 otherwise. It is set on the copies the Manager returns.
	QueuePosition int `json:"-"`

	// DisplayID is the shortest prefix of ID that is unique among the parent's tasks and
	// shows at least 8 characters after "tsk_". It is set on the copies the Manager returns
	// and not stored.
	DisplayID string `json:"-"`
}

// upgrade completes a record of an earlier version, whose ID is its session's id.
func (t *Task) upgrade() {
	if t.SessionID == "" && strings.HasPrefix(t.ID, sessionPrefix) {
		t.SessionID = t.ID
	}
}

// anchor returns the session the task counts under: AnchorSessionID, or its parent.
func (t *Task) anchor() string { return cmp.Or(t.AnchorSessionID, t.ParentSessionID) }

// anchorOf returns the AnchorSessionID of a task of parent that counts under anchor: "" when
// they are the same.
func anchorOf(parent, anchor string) string {
	if anchor == parent {
		return ""
	}
	return anchor
}

// Duration returns how long the current run took, or has taken by now when it has not ended.
func (t *Task) Duration(now time.Time) time.Duration {
	end := t.Completed
	if end.IsZero() {
		end = now
	}
	return max(end.Sub(t.Started), 0)
}

// Markers returns what lists show after a task's id: " (forked)" for a forked task,
// " (resumed)" for one that was resumed, both in that order, or "".
func (t *Task) Markers() string {
	s := ""
	if t.Forked {
		s += " (forked)"
	}
	if t.ResumeCount > 0 {
		s += " (resumed)"
	}
	return s
}

// clone returns a deep copy.
func (t *Task) clone() Task {
	c := *t
	c.Progress.Tools = maps.Clone(t.Progress.Tools)
	c.Progress.LastTools = slices.Clone(t.Progress.LastTools)
	c.Notifications = slices.Clone(t.Notifications)
	c.FollowUps = slices.Clone(t.FollowUps)
	if t.ForkStats != nil {
		s := *t.ForkStats
		c.ForkStats = &s
	}
	c.Worktree = t.Worktree.clone()
	if t.Permission != nil {
		p := *t.Permission
		p.Patterns = slices.Clone(p.Patterns)
		c.Permission = &p
	}
	return c
}
