package opencode

import (
	"bytes"
	"encoding/json"
)

// Session is an OpenCode session as returned by POST /session and GET /session/{id}.
// Times are epoch milliseconds.
type Session struct {
	ID         string           `json:"id"`
	Slug       string           `json:"slug,omitempty"`
	ProjectID  string           `json:"projectID,omitempty"`
	Directory  string           `json:"directory,omitempty"`
	ParentID   string           `json:"parentID,omitempty"`
	Title      string           `json:"title,omitempty"`
	Version    string           `json:"version,omitempty"`
	Time       SessionTime      `json:"time"`
	Permission []PermissionRule `json:"permission,omitempty"`
	// Tokens and Cost are what the session's model steps used so far, summed by OpenCode
	// (its assistant messages' own, see [MessageInfo]); session.updated events carry them
	// too, the last step's a few milliseconds after the session goes idle.
	Tokens *Tokens `json:"tokens,omitempty"`
	Cost   float64 `json:"cost,omitempty"` // USD
}

// Tokens is what model steps used, as OpenCode counts them from the provider's usage: Input
// excludes the cached tokens read (Cache.Read) and written (Cache.Write); Total is set on
// assistant messages and step-finish parts only.
type Tokens struct {
	Total     int64       `json:"total,omitempty"`
	Input     int64       `json:"input"`
	Output    int64       `json:"output"`
	Reasoning int64       `json:"reasoning"`
	Cache     CacheTokens `json:"cache"`
}

// CacheTokens are the prompt-cache tokens of [Tokens].
type CacheTokens struct {
	Read  int64 `json:"read"`
	Write int64 `json:"write"`
}

// SessionTime holds a session's timestamps in epoch milliseconds.
type SessionTime struct {
	Created int64 `json:"created"`
	Updated int64 `json:"updated,omitempty"`
}

// PermissionRule is one entry of an OpenCode permission ruleset: Permission is a tool or
// permission name (wildcards allowed, e.g. "asyncagents_*"), Pattern what it applies to, and
// Action one of "allow", "deny" or "ask".
type PermissionRule struct {
	Permission string `json:"permission"`
	Pattern    string `json:"pattern"`
	Action     string `json:"action"`
}

// Model names a provider's model, as in a prompt's "model" field.
type Model struct {
	ProviderID string `json:"providerID"`
	ModelID    string `json:"modelID"`
}

// Message is one entry of GET /session/{id}/message: the message info and its parts, in order.
type Message struct {
	Info  MessageInfo `json:"info"`
	Parts []Part      `json:"parts"`
}

// Roles of MessageInfo.Role.
const (
	RoleUser      = "user"
	RoleAssistant = "assistant"
)

// MessageInfo is the "info" of a message. User and assistant messages share this struct;
// fields that belong to one role only are empty on the other.
type MessageInfo struct {
	ID        string      `json:"id"`
	SessionID string      `json:"sessionID"`
	Role      string      `json:"role"`
	Time      MessageTime `json:"time"`
	ParentID  string      `json:"parentID,omitempty"` // assistant: the user message it answers
	Agent     string      `json:"agent,omitempty"`
	Mode      string      `json:"mode,omitempty"`
	ModelID   string      `json:"modelID,omitempty"`    // assistant
	Provider  string      `json:"providerID,omitempty"` // assistant
	Finish    string      `json:"finish,omitempty"`     // assistant: "stop", "tool-calls", …; empty while running or on error
	Error     *Error      `json:"error,omitempty"`      // assistant: set when the step failed or was aborted
	// Tokens and Cost (USD, from the model's price in OpenCode's config; 0 without one) are
	// what the step used (assistant); zero until it completes.
	Tokens *Tokens `json:"tokens,omitempty"`
	Cost   float64 `json:"cost,omitempty"`
	// Summary is an object on user messages and the boolean true on a compaction summary
	// (assistant). Use IsSummary.
	Summary json.RawMessage `json:"summary,omitempty"`
}

// IsSummary reports whether the message is a compaction summary (assistant "summary": true).
func (i *MessageInfo) IsSummary() bool {
	return i.Role == RoleAssistant && bytes.Equal(bytes.TrimSpace(i.Summary), []byte("true"))
}

// MessageTime holds a message's timestamps in epoch milliseconds. Completed is 0 while an
// assistant step runs and always 0 on user messages.
type MessageTime struct {
	Created   int64 `json:"created"`
	Completed int64 `json:"completed,omitempty"`
}

// Error is OpenCode's error union, {name, data}: APIError, UnknownError, MessageAbortedError,
// ProviderAuthError, MessageOutputLengthError, ContextOverflowError, … Data is kept as received.
type Error struct {
	Name string          `json:"name"`
	Data json.RawMessage `json:"data,omitempty"`
}

// Message returns data.message, or the error name when there is none.
func (e *Error) Message() string {
	if e == nil {
		return ""
	}
	var d struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(e.Data, &d) == nil && d.Message != "" {
		return d.Message
	}
	return e.Name
}

// Part types seen on OpenCode 1.18.33. Other types are kept (Part.Raw) and ignored where
// they have no meaning.
const (
	PartText       = "text"
	PartFile       = "file"
	PartReasoning  = "reasoning"
	PartTool       = "tool"
	PartStepStart  = "step-start"
	PartStepFinish = "step-finish"
	PartPatch      = "patch"
	PartCompaction = "compaction"
	PartSubtask    = "subtask"
	PartSnapshot   = "snapshot"
	PartAgent      = "agent"
	PartRetry      = "retry"
)

// Part is one part of a message, a union on Type. The fields of every known type are decoded
// into this one struct; Raw keeps the part's JSON exactly as received, so unknown types and
// fields survive a round trip (MarshalJSON writes Raw when it is set).
type Part struct {
	ID        string `json:"id,omitempty"`
	SessionID string `json:"sessionID,omitempty"`
	MessageID string `json:"messageID,omitempty"`
	Type      string `json:"type"`

	// text, reasoning
	Text      string `json:"text,omitempty"`
	Synthetic bool   `json:"synthetic,omitempty"`
	Ignored   bool   `json:"ignored,omitempty"`

	// file
	Mime     string `json:"mime,omitempty"`
	Filename string `json:"filename,omitempty"`
	URL      string `json:"url,omitempty"`

	// tool
	CallID string     `json:"callID,omitempty"`
	Tool   string     `json:"tool,omitempty"`
	State  *ToolState `json:"state,omitempty"`

	// subtask
	Prompt      string `json:"prompt,omitempty"`
	Description string `json:"description,omitempty"`
	Agent       string `json:"agent,omitempty"`

	// compaction
	Auto        bool   `json:"auto,omitempty"`
	Overflow    bool   `json:"overflow,omitempty"`
	TailStartID string `json:"tail_start_id,omitempty"`

	// Raw is the part as received; empty for parts built in Go.
	Raw json.RawMessage `json:"-"`
}

// UnmarshalJSON decodes the known fields and keeps the whole part in Raw.
func (p *Part) UnmarshalJSON(data []byte) error {
	type plain Part
	var v plain
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	*p = Part(v)
	p.Raw = append(json.RawMessage(nil), data...)
	return nil
}

// MarshalJSON writes Raw when the part was decoded, and the known fields otherwise.
func (p Part) MarshalJSON() ([]byte, error) {
	if len(p.Raw) > 0 {
		return p.Raw, nil
	}
	type plain Part
	return json.Marshal(plain(p))
}

// Tool part states (ToolState.Status).
const (
	ToolPending   = "pending"
	ToolRunning   = "running"
	ToolCompleted = "completed"
	ToolError     = "error"
)

// ToolState is the state of a tool part. Output is set when completed (it is what the model
// saw; a failing shell command is completed with a non-zero metadata.exit), Error when the
// status is "error" (a rejected permission).
type ToolState struct {
	Status   string          `json:"status"`
	Input    json.RawMessage `json:"input,omitempty"`
	Output   string          `json:"output,omitempty"`
	Error    string          `json:"error,omitempty"`
	Title    string          `json:"title,omitempty"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
	Time     ToolTime        `json:"time"`
}

// ToolTime holds a tool run's timestamps in epoch milliseconds. Compacted is set when
// OpenCode pruned the output (config compaction.prune); the model is then shown
// "[Old tool result content cleared]" instead of Output.
type ToolTime struct {
	Start     int64 `json:"start,omitempty"`
	End       int64 `json:"end,omitempty"`
	Compacted int64 `json:"compacted,omitempty"`
}

// ExitCode returns metadata.exit when it is a number (shell tools set it; null after an abort).
func (s *ToolState) ExitCode() (code float64, ok bool) {
	if s == nil || len(s.Metadata) == 0 {
		return 0, false
	}
	var m struct {
		Exit *float64 `json:"exit"`
	}
	if json.Unmarshal(s.Metadata, &m) != nil || m.Exit == nil {
		return 0, false
	}
	return *m.Exit, true
}

// Agent is an entry of GET /agent. Mode is "primary", "subagent" or "all".
type Agent struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	Mode        string `json:"mode,omitempty"` // "primary", "subagent" or "all"
	Hidden      bool   `json:"hidden,omitempty"`
	// Permission is the agent's ruleset: OpenCode evaluates a tool call against it, then the
	// session's rules; the last matching rule wins.
	Permission []PermissionRule `json:"permission,omitempty"`
}

// SessionStatus is a value of GET /session/status: Type is "busy" or "retry" (idle sessions
// are absent from that map) and "idle" in session.status events.
type SessionStatus struct {
	Type    string `json:"type"`
	Attempt int    `json:"attempt,omitempty"`
	Message string `json:"message,omitempty"`
	Next    int64  `json:"next,omitempty"`
}

// Permission is a pending permission request (GET /permission, the properties of a
// permission.asked event). Permission names what is asked, e.g. "external_directory" for a
// tool touching a path outside the project; Patterns are what it applies to
// (e.g. ["/etc/*"]); Always are the patterns a reply "always" would allow from then on.
type Permission struct {
	ID         string          `json:"id"` // "per_…"
	SessionID  string          `json:"sessionID"`
	Permission string          `json:"permission"`
	Patterns   []string        `json:"patterns,omitempty"`
	Metadata   json.RawMessage `json:"metadata,omitempty"` // e.g. {"command", "directories", "patterns"}
	Always     []string        `json:"always,omitempty"`
	Tool       *PermissionTool `json:"tool,omitempty"`
}

// PermissionTool names the tool call a permission request holds up.
type PermissionTool struct {
	MessageID string `json:"messageID"`
	CallID    string `json:"callID"`
}

// Replies to a permission request (PermissionReply.Reply).
const (
	ReplyOnce   = "once"   // run this tool call
	ReplyAlways = "always" // run it and allow the request's Always patterns from now on
	ReplyReject = "reject" // the tool part ends with status "error"
)

// PermissionReply is the body of POST /permission/{id}/reply. A reject with a Message passes
// the message to the model and the agent loop continues; a reject without one stops the loop
// (the last assistant message keeps finish "tool-calls").
type PermissionReply struct {
	Reply   string `json:"reply"`
	Message string `json:"message,omitempty"`
}

// TextPartInput is a text part of a prompt. Synthetic parts are shown to the model but
// marked as injected rather than typed by a user.
type TextPartInput struct {
	// ID, when set, is the part's id ("prt…"; [PartID] makes one). OpenCode 1.18.33 stores a
	// part under an id its message already has in place of that part, so a prompt posted
	// again with the same message id and part ids leaves one message with its parts once.
	ID        string `json:"id,omitempty"`
	Type      string `json:"type"` // always "text"; set by NewText
	Text      string `json:"text"`
	Synthetic bool   `json:"synthetic,omitempty"`
}

// NewText returns a text part input.
func NewText(text string) TextPartInput { return TextPartInput{Type: PartText, Text: text} }

// NewSyntheticText returns a text part input with synthetic: true.
func NewSyntheticText(text string) TextPartInput {
	return TextPartInput{Type: PartText, Text: text, Synthetic: true}
}

// PromptRequest is the body of POST /session/{id}/message and /prompt_async.
// Parts is required; Agent and Model default to the session's or the server's.
type PromptRequest struct {
	Parts   []TextPartInput `json:"parts"`
	Agent   string          `json:"agent,omitempty"`
	Model   *Model          `json:"model,omitempty"`
	System  string          `json:"system,omitempty"`
	NoReply bool            `json:"noReply,omitempty"`
	// MessageID, when set, is the id of the user message the prompt creates ("msg_…";
	// anything else is HTTP 400). OpenCode 1.18.33 orders a session's messages by the time
	// the server created them, then by id, so the id places the message only among those
	// created in the same millisecond: choose it newer than the session's last message
	// ([NewMessageID]). An id the session already has adds the parts to that message (a part
	// whose [TextPartInput.ID] it has replaces that part), keeps the message's place, and
	// starts no reply.
	MessageID string `json:"messageID,omitempty"`
}

// CreateSessionRequest is the body of POST /session.
type CreateSessionRequest struct {
	// Directory is the project directory the session runs in: its instance, its tools'
	// working directory and the one its model's system prompt names. Empty: the client's
	// default. It is sent as ?directory=, not in the body.
	Directory  string           `json:"-"`
	ParentID   string           `json:"parentID,omitempty"`
	Title      string           `json:"title,omitempty"`
	Permission []PermissionRule `json:"permission,omitempty"`
}
