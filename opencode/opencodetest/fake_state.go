package opencodetest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/asyncagents/asyncagents/opencode"
)

// The fake keeps sessions, messages and parts in the shapes the real server sends (the
// *JSON types below, with their field names and optional fields) and converts them to the
// opencode types by encoding and decoding, so a Part's Raw holds what the server would have sent.

// fakeVersion is the OpenCode version whose behaviour the fake copies.
const fakeVersion = "1.18.33"

const defaultAgent = "build"

// fakeAgents is GET /agent of the real server's default configuration (name, description,
// mode, hidden), in its order.
var fakeAgents = []opencode.Agent{
	{Name: "build", Description: "The default agent. Executes tools based on configured permissions.", Mode: "primary"},
	{Name: "compaction", Mode: "primary", Hidden: true},
	{Name: "explore", Description: "Fast agent specialized for exploring codebases. Use this when you need to quickly find files by patterns (eg. \"src/components/**/*.tsx\"), search code for keywords (eg. \"API endpoints\"), or answer questions about the codebase (eg. \"how do API endpoints work?\"). When calling this agent, specify the desired thoroughness level: \"quick\" for basic searches, \"medium\" for moderate exploration, or \"very thorough\" for comprehensive analysis across multiple locations and naming conventions.", Mode: "subagent"},
	{Name: "general", Description: "General-purpose agent for researching complex questions and executing multi-step tasks. Use this agent to execute multiple units of work in parallel.", Mode: "subagent"},
	{Name: "plan", Description: "Plan mode. Disallows all edit tools.", Mode: "primary"},
	{Name: "summary", Mode: "primary", Hidden: true},
	{Name: "title", Mode: "primary", Hidden: true},
}

func knownAgent(name string) bool {
	return slices.ContainsFunc(fakeAgents, func(a opencode.Agent) bool { return a.Name == name })
}

// visibleAgents are the names OpenCode lists in "Agent not found" errors.
func visibleAgents() []string {
	var names []string
	for _, a := range fakeAgents {
		if !a.Hidden {
			names = append(names, a.Name)
		}
	}
	return names
}

var (
	slugAdjectives = []string{"brave", "misty", "playful", "hidden", "neon", "clever", "proud", "eager", "swift", "lucky", "tidy", "gentle", "kind", "calm"}
	slugNouns      = []string{"eagle", "planet", "canyon", "engine", "pixel", "wolf", "panda", "orchid", "meadow", "circuit", "rocket", "cactus", "island", "harbor"}
)

type tokensJSON struct {
	Total     int       `json:"total,omitempty"`
	Input     int       `json:"input"`
	Output    int       `json:"output"`
	Reasoning int       `json:"reasoning"`
	Cache     cacheJSON `json:"cache"`
}

type cacheJSON struct {
	Read  int `json:"read"`
	Write int `json:"write"`
}

// stepTokens is the usage the fake reports for every model step.
func stepTokens() *tokensJSON { return &tokensJSON{Total: 120, Input: 100, Output: 20} }

// cost is what t costs at [ModelPrice], in USD, as OpenCode computes a step's cost.
func (t *tokensJSON) cost() float64 {
	p := ModelPrice
	return (float64(t.Input)*p.Input + float64(t.Output+t.Reasoning)*p.Output +
		float64(t.Cache.Read)*p.CacheRead + float64(t.Cache.Write)*p.CacheWrite) / 1e6
}

// add counts a step's tokens and cost in the session's totals.
func (s *sessionJSON) add(t *tokensJSON, cost float64) {
	if s.Tokens == nil {
		s.Tokens = &tokensJSON{}
	}
	s.Tokens.Input += t.Input
	s.Tokens.Output += t.Output
	s.Tokens.Reasoning += t.Reasoning
	s.Tokens.Cache.Read += t.Cache.Read
	s.Tokens.Cache.Write += t.Cache.Write
	s.Cost += cost
}

type sessionTimeJSON struct {
	Created int64 `json:"created"`
	Updated int64 `json:"updated"`
}

type sessionModelJSON struct {
	ID         string `json:"id"`
	ProviderID string `json:"providerID"`
	Variant    string `json:"variant"`
}

type sessionSummaryJSON struct {
	Additions int `json:"additions"`
	Deletions int `json:"deletions"`
	Files     int `json:"files"`
}

type sessionJSON struct {
	ID         string                    `json:"id"`
	Slug       string                    `json:"slug"`
	ProjectID  string                    `json:"projectID"`
	Directory  string                    `json:"directory"`
	Path       string                    `json:"path"`
	ParentID   string                    `json:"parentID,omitempty"`
	Title      string                    `json:"title"`
	Agent      string                    `json:"agent,omitempty"`
	Model      *sessionModelJSON         `json:"model,omitempty"`
	Version    string                    `json:"version"`
	Summary    *sessionSummaryJSON       `json:"summary,omitempty"`
	Cost       float64                   `json:"cost"`
	Tokens     *tokensJSON               `json:"tokens"`
	Permission []opencode.PermissionRule `json:"permission,omitempty"`
	Time       sessionTimeJSON           `json:"time"`
}

type messageTimeJSON struct {
	Created   int64 `json:"created"`
	Completed int64 `json:"completed,omitempty"`
}

type pathJSON struct {
	Cwd  string `json:"cwd"`
	Root string `json:"root"`
}

type infoJSON struct {
	ID         string          `json:"id"`
	SessionID  string          `json:"sessionID"`
	Role       string          `json:"role"`
	Time       messageTimeJSON `json:"time"`
	Summary    json.RawMessage `json:"summary,omitempty"`
	Error      *opencode.Error `json:"error,omitempty"`
	ParentID   string          `json:"parentID,omitempty"`
	ModelID    string          `json:"modelID,omitempty"`
	ProviderID string          `json:"providerID,omitempty"`
	Mode       string          `json:"mode,omitempty"`
	Agent      string          `json:"agent,omitempty"`
	Path       *pathJSON       `json:"path,omitempty"`
	Cost       *float64        `json:"cost,omitempty"`
	Tokens     *tokensJSON     `json:"tokens,omitempty"`
	Model      *opencode.Model `json:"model,omitempty"`
	System     string          `json:"system,omitempty"`
	Finish     string          `json:"finish,omitempty"`
}

type partTimeJSON struct {
	Start int64 `json:"start,omitempty"`
	End   int64 `json:"end,omitempty"`
}

type stateJSON struct {
	Status   string          `json:"status"`
	Input    json.RawMessage `json:"input"`
	Raw      *string         `json:"raw,omitempty"`
	Output   *string         `json:"output,omitempty"`
	Error    string          `json:"error,omitempty"`
	Title    string          `json:"title,omitempty"`
	Metadata map[string]any  `json:"metadata,omitempty"`
	Time     *partTimeJSON   `json:"time,omitempty"`
}

type partJSON struct {
	ID        string        `json:"id"`
	SessionID string        `json:"sessionID"`
	MessageID string        `json:"messageID"`
	Type      string        `json:"type"`
	Text      *string       `json:"text,omitempty"`
	Synthetic bool          `json:"synthetic,omitempty"`
	Time      *partTimeJSON `json:"time,omitempty"`
	CallID    string        `json:"callID,omitempty"`
	Tool      string        `json:"tool,omitempty"`
	State     *stateJSON    `json:"state,omitempty"`
	Reason    string        `json:"reason,omitempty"`
	Tokens    *tokensJSON   `json:"tokens,omitempty"`
	Cost      *float64      `json:"cost,omitempty"`
}

func ptr[T any](v T) *T { return &v }

// decodeAs converts one of the fake's JSON shapes to an opencode type.
func decodeAs[T any](v any) T {
	var out T
	b, err := json.Marshal(v)
	if err == nil {
		err = json.Unmarshal(b, &out)
	}
	if err != nil {
		panic(fmt.Sprintf("opencodetest: convert %T: %v", v, err)) // the fake's own types
	}
	return out
}

type fakeSession struct {
	info     sessionJSON
	untitled bool // titled by a title request on the first prompt
	msgs     []*fakeMessage
	run      *fakeRun // non-nil while busy
	permits  [][]Reply
	always   []opencode.PermissionRule // patterns allowed by "always" replies
	waiters  []chan promptResult       // blocking Prompt calls waiting for idle
}

func (s *fakeSession) session() *opencode.Session {
	v := decodeAs[opencode.Session](s.info)
	return &v
}

// resolve answers the blocking Prompt calls: with the last assistant message when err is nil.
func (s *fakeSession) resolve(last *fakeMessage, err error) {
	var r promptResult
	switch {
	case err != nil:
		r.err = err
	case last != nil:
		m := last.message()
		r.msg = &m
	}
	for _, w := range s.waiters {
		w <- r
	}
	s.waiters = nil
}

func (s *fakeSession) lastAssistant() *fakeMessage {
	for i := len(s.msgs) - 1; i >= 0; i-- {
		if s.msgs[i].info.Role == opencode.RoleAssistant {
			return s.msgs[i]
		}
	}
	return nil
}

func (s *fakeSession) lastUser() *fakeMessage {
	for i := len(s.msgs) - 1; i >= 0; i-- {
		if s.msgs[i].info.Role == opencode.RoleUser {
			return s.msgs[i]
		}
	}
	return nil
}

type promptResult struct {
	msg *opencode.Message
	err error
}

type fakeMessage struct {
	info  infoJSON
	parts []*partJSON
}

func (m *fakeMessage) message() opencode.Message {
	out := opencode.Message{Info: decodeAs[opencode.MessageInfo](m.info), Parts: make([]opencode.Part, len(m.parts))}
	for i, p := range m.parts {
		out.Parts[i] = decodeAs[opencode.Part](p)
	}
	return out
}

// fakePermission is a pending permission request.
type fakePermission struct {
	ID         string
	SessionID  string
	Permission string
	Patterns   []string
	Metadata   map[string]any
	Tool       opencode.PermissionTool
	run        *fakeRun // the run waiting for it; nil once it stopped waiting
}

func (p *fakePermission) json() map[string]any {
	return map[string]any{"id": p.ID, "sessionID": p.SessionID, "permission": p.Permission,
		"patterns": p.Patterns, "metadata": p.Metadata, "always": p.Patterns, "tool": p.Tool}
}

func (p *fakePermission) permission() opencode.Permission {
	return decodeAs[opencode.Permission](p.json())
}

// fakeRun is a session's agent loop while it is busy. Its goroutine changes it only with
// f.mu held; Abort and Close set aborted, after which the goroutine stops without a trace.
type fakeRun struct {
	s      *fakeSession
	ctx    context.Context
	cancel context.CancelFunc
	wake   chan struct{} // one pending wake-up: a Release or a permission reply
	status opencode.SessionStatus

	user     *fakeMessage // the user message being answered
	agent    string
	model    opencode.Model
	replies  []Reply // from Release, answering the next steps
	released bool    // the run passed its hold (WithHeldRuns)

	asst      *fakeMessage // the current step's assistant message
	text      *partJSON    // the text part being streamed
	tool      *partJSON    // the tool part running or waiting for a permission
	perm      *fakePermission
	permReply *opencode.PermissionReply
	aborted   bool
}

func (r *fakeRun) notify() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Event properties.
type sessionEvent struct {
	SessionID string      `json:"sessionID"`
	Info      sessionJSON `json:"info"`
}

type messageEvent struct {
	SessionID string   `json:"sessionID"`
	Info      infoJSON `json:"info"`
}

type partEvent struct {
	SessionID string   `json:"sessionID"`
	Part      partJSON `json:"part"`
	Time      int64    `json:"time"`
}

type deltaEvent struct {
	SessionID string `json:"sessionID"`
	MessageID string `json:"messageID"`
	PartID    string `json:"partID"`
	Field     string `json:"field"`
	Delta     string `json:"delta"`
}

type statusEvent struct {
	SessionID string                 `json:"sessionID"`
	Status    opencode.SessionStatus `json:"status"`
}

type sessionIDEvent struct {
	SessionID string `json:"sessionID"`
}

type errorEvent struct {
	SessionID string          `json:"sessionID"`
	Error     *opencode.Error `json:"error"`
}

type diffEvent struct {
	SessionID string `json:"sessionID"`
	Diff      []any  `json:"diff"`
}

func namedError(name string, data any) *opencode.Error {
	b, _ := json.Marshal(data)
	return &opencode.Error{Name: name, Data: b}
}

func unknownErr(message string) *opencode.Error {
	return namedError("UnknownError", map[string]any{"message": message})
}

func abortedErr() *opencode.Error {
	return namedError("MessageAbortedError", map[string]any{"message": "Aborted"})
}

// modelAPIErr is the APIError OpenCode records when the model answered HTTP status.
func modelAPIErr(status int) *opencode.Error {
	body, _ := json.Marshal(failureBody(status))
	return namedError("APIError", map[string]any{
		"message":      failureMessage(status),
		"statusCode":   status,
		"isRetryable":  status >= 500,
		"responseBody": string(body),
	})
}
