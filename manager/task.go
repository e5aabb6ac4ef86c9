package manager

import (
	"time"

	"github.com/asyncagents/asyncagents/fork"
	"github.com/asyncagents/asyncagents/opencode"
)

// Status is a task's state (SPEC T-2).
type Status string

// Task states. Completed, Error and Cancelled are terminal.
const (
	StatusRunning   Status = "running"
	StatusCompleted Status = "completed"
	StatusError     Status = "error"
	StatusCancelled Status = "cancelled"
	StatusResumed   Status = "resumed" // a follow-up prompt is being processed
)

// Terminal reports whether s is completed, error or cancelled.
func (s Status) Terminal() bool {
	return s == StatusCompleted || s == StatusError || s == StatusCancelled
}

// Active reports whether s is running or resumed.
func (s Status) Active() bool { return s == StatusRunning || s == StatusResumed }

func (s Status) valid() bool { return s.Terminal() || s.Active() }

// Caller identifies on whose behalf an operation is made: the parent session, the message
// that made the call, and the agent that runs there.
type Caller struct {
	SessionID string `json:"sessionID"`
	MessageID string `json:"messageID,omitempty"`
	Agent     string `json:"agent,omitempty"`
}

// Progress counts a task's tool calls from message.part.updated events (SPEC T-8).
type Progress struct {
	ToolCalls int            `json:"toolCalls"`
	Tools     map[string]int `json:"tools,omitempty"`     // calls per tool name
	LastTools []string       `json:"lastTools,omitempty"` // the last 3 tool names, oldest first
	Updated   time.Time      `json:"updated,omitzero"`
}

// PendingPermission is a permission request a task's session is waiting on (SPEC T-16).
type PendingPermission struct {
	ID         string   `json:"id"`
	Permission string   `json:"permission"`
	Patterns   []string `json:"patterns,omitempty"`
}

// Task is a snapshot of one background task (SPEC T-3). Its ID is the child session id.
// Manager methods return copies; changing one changes nothing in the Manager.
type Task struct {
	ID              string             `json:"id"`
	ParentSessionID string             `json:"parentSessionID"`
	ParentMessageID string             `json:"parentMessageID,omitempty"`
	ParentAgent     string             `json:"parentAgent,omitempty"`
	Directory       string             `json:"directory,omitempty"` // the child session's instance
	Description     string             `json:"description"`
	Prompt          string             `json:"prompt"`
	Agent           string             `json:"agent"`
	Model           *opencode.Model    `json:"model,omitempty"`
	Status          Status             `json:"status"`
	Started         time.Time          `json:"started"`              // of the current run (the resume, for a resume)
	Completed       time.Time          `json:"completed,omitzero"`   // when the current run ended
	Result          string             `json:"result,omitempty"`     // text of the final reply, when completed
	Error           string             `json:"error,omitempty"`      // when error or cancelled
	Retrieved       time.Time          `json:"retrieved,omitzero"`   // when Output first returned the result
	BatchID         string             `json:"batchID"`              // SPEC T-5
	ResumeCount     int                `json:"resumeCount"`          // follow-ups sent (SPEC T-18)
	Forked          bool               `json:"forked"`               // launched with the parent's context
	Progress        Progress           `json:"progress"`             // SPEC T-8
	ForkStats       *fork.Stats        `json:"forkStats,omitempty"`  // for forked tasks (SPEC F-15)
	Permission      *PendingPermission `json:"permission,omitempty"` // SPEC T-16

	// DisplayID is the shortest unique prefix of ID (at least 8 characters after "ses_")
	// among the parent's tasks (SPEC T-1). It is set on the copies the Manager returns.
	DisplayID string `json:"-"`
}

// Duration returns how long the current run took, or has taken by now.
func (t *Task) Duration(now time.Time) time.Duration {
	end := t.Completed
	if end.IsZero() {
		end = now
	}
	return max(end.Sub(t.Started), 0)
}

func (t *Task) clone() Task {
	c := *t
	if t.Progress.Tools != nil {
		c.Progress.Tools = make(map[string]int, len(t.Progress.Tools))
		for k, v := range t.Progress.Tools {
			c.Progress.Tools[k] = v
		}
	}
	c.Progress.LastTools = append([]string(nil), t.Progress.LastTools...)
	if t.ForkStats != nil {
		s := *t.ForkStats
		c.ForkStats = &s
	}
	if t.Model != nil {
		m := *t.Model
		c.Model = &m
	}
	if t.Permission != nil {
		p := *t.Permission
		p.Patterns = append([]string(nil), p.Patterns...)
		c.Permission = &p
	}
	return c
}
