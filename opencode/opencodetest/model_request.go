package opencodetest

import (
	"encoding/json"
	"strings"
	"time"
)

// Kind tells what OpenCode asked the model for.
type Kind int

func (k Kind) String() string {
	switch k {
	case KindTitle:
		return "title"
	case KindCompaction:
		return "compaction"
	}
	return "chat"
}

// ChatMessage is one message of a chat-completions request, as OpenCode sent it. Content is
// the text of a string or text-array content.
type ChatMessage struct {
	Role       string     `json:"role"`
	Content    string     `json:"content"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

// ToolCall is a function call the model makes: Name and Arguments (a JSON object text).
type ToolCall struct {
	ID        string `json:"id,omitempty"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Request is one request the model received (from a real server, or made by a FakeClient).
type Request struct {
	Kind     Kind
	Time     time.Time
	Model    string
	Messages []ChatMessage
	Tools    []string // names of the tools offered
	Body     []byte   // the raw request body; empty for requests of a FakeClient
}

// System returns the text of the request's system messages.
func (r *Request) System() string {
	var b strings.Builder
	for _, m := range r.Messages {
		if m.Role == "system" {
			b.WriteString(m.Content)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// LastUser returns the index and text of the last user message (-1 when there is none).
func (r *Request) LastUser() (int, string) {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role == "user" {
			return i, r.Messages[i].Content
		}
	}
	return -1, ""
}

// ToolResultsSinceUser returns the tool results after the last user message, in order.
func (r *Request) ToolResultsSinceUser() []string {
	i, _ := r.LastUser()
	var out []string
	for _, m := range r.Messages[i+1:] {
		if m.Role == "tool" {
			out = append(out, m.Content)
		}
	}
	return out
}

// Rendered returns the request as a provider's prompt cache sees it: its tools, then its
// messages (the system prompt first), each as the server sent them (JSON). Two requests
// share a cached prefix as long as their Rendered strings do. It is "" for the requests of
// a FakeClient, which have no body.
func (r *Request) Rendered() string {
	var body struct {
		Tools    json.RawMessage   `json:"tools"`
		Messages []json.RawMessage `json:"messages"`
	}
	if json.Unmarshal(r.Body, &body) != nil {
		return ""
	}
	var b strings.Builder
	b.Write(body.Tools)
	for _, m := range body.Messages {
		b.Write(m)
	}
	return b.String()
}

// Contains reports whether any message of the request contains s.
func (r *Request) Contains(s string) bool {
	for _, m := range r.Messages {
		if strings.Contains(m.Content, s) {
			return true
		}
	}
	return false
}

type chatBody struct {
	Model    string `json:"model"`
	Messages []struct {
		Role       string          `json:"role"`
		Content    json.RawMessage `json:"content"`
		ToolCallID string          `json:"tool_call_id"`
		ToolCalls  []struct {
			ID       string `json:"id"`
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"messages"`
	Tools []struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
}

func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) == nil {
		var b strings.Builder
		for i, p := range parts {
			if p.Type == "text" {
				if i > 0 {
					b.WriteByte('\n')
				}
				b.WriteString(p.Text)
			}
		}
		return b.String()
	}
	return ""
}

func parseRequest(body []byte) (*Request, error) {
	var cb chatBody
	if err := json.Unmarshal(body, &cb); err != nil {
		return nil, err
	}
	r := &Request{Time: time.Now(), Model: cb.Model, Body: body}
	for _, t := range cb.Tools {
		r.Tools = append(r.Tools, t.Function.Name)
	}
	for _, cm := range cb.Messages {
		msg := ChatMessage{Role: cm.Role, Content: contentText(cm.Content), ToolCallID: cm.ToolCallID}
		for _, tc := range cm.ToolCalls {
			msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
		r.Messages = append(r.Messages, msg)
	}
	_, last := r.LastUser()
	switch sys := r.System(); {
	case strings.Contains(sys, "summarization agent") || strings.Contains(last, "<conversation>"),
		// Before 1.18 (checked on 1.14.41 and 1.17.19): "You are an anchored context
		// summarization assistant", the history as chat messages before the instruction.
		strings.Contains(sys, "summarization assistant"):
		r.Kind = KindCompaction
	case len(r.Tools) == 0 && strings.Contains(strings.ToLower(sys), "title"):
		r.Kind = KindTitle
	}
	return r, nil
}
