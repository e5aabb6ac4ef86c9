package opencodetest

import (
	"strings"
	"time"

	"github.com/asyncagents/asyncagents/opencode"
)

// This file holds what the fake asks the scripted model: the chat request of each step, the
// title request, and the retries of failed calls.

// maxRetries is how often OpenCode retries a model call that failed with a 5xx.
const maxRetries = 5

// nextReply asks the script for the next step, retrying 5xx answers as OpenCode does. It
// reports false when the run was stopped meanwhile.
func (f *FakeClient) nextReply(r *fakeRun) (Reply, int, bool) {
	s := r.s
	for attempt := 1; ; attempt++ {
		var reply Reply
		var seq int
		if len(r.replies) > 0 {
			reply, r.replies = r.replies[0], r.replies[1:]
		} else {
			req := f.chatRequest(r)
			f.mu.Unlock()
			reply, seq = f.script.decide(req)
			f.mu.Lock()
			if r.aborted {
				return Reply{}, 0, false
			}
		}
		if reply.Status >= 500 && attempt <= maxRetries {
			r.status = opencode.SessionStatus{Type: "retry", Attempt: attempt, Message: failureMessage(reply.Status),
				Next: f.now().Add(time.Duration(1<<(attempt-1)) * 2 * time.Second).UnixMilli()}
			f.emitStatus(s.info.ID, r.status)
			continue
		}
		if attempt > 1 && reply.Status < 400 {
			r.status = opencode.SessionStatus{Type: "busy"}
			f.emitStatus(s.info.ID, r.status)
		}
		return reply, seq, true
	}
}

// generateTitle asks the model for a title, as OpenCode does for an untitled session's first
// prompt, and renames the session. A failed request leaves the title.
func (f *FakeClient) generateTitle(r *fakeRun) bool {
	s := r.s
	req := &Request{Kind: KindTitle, Time: f.now(), Model: r.model.ModelID, Messages: []ChatMessage{
		{Role: "system", Content: "You are a title generator. You output ONLY a thread title. Nothing else."},
		{Role: "user", Content: userText(r.user)},
	}}
	f.mu.Unlock()
	reply, _ := f.script.decide(req)
	f.mu.Lock()
	if r.aborted {
		return false
	}
	if reply.Status < 400 && reply.Text != "" {
		s.info.Title = reply.Text
		f.emit(opencode.EventSessionUpdated, sessionEvent{SessionID: s.info.ID, Info: s.info})
	}
	return true
}

// fakeTools are the tools the fake offers the model.
var fakeTools = []string{"bash", "edit", "glob", "grep", "read", "task", "todowrite", "webfetch", "write"}

// chatRequest renders the session as OpenCode sends it to the model: a system message, then
// each message's text, tool calls and tool results.
func (f *FakeClient) chatRequest(r *fakeRun) *Request {
	sys := "You are opencode, an interactive CLI agent (opencodetest.FakeClient, agent " + r.agent + ").\n" +
		"<env>\n  Working directory: " + r.s.info.Directory + "\n</env>"
	if r.user.info.System != "" {
		sys += "\n" + r.user.info.System
	}
	req := &Request{Kind: KindChat, Time: f.now(), Model: r.model.ModelID, Tools: fakeTools,
		Messages: []ChatMessage{{Role: "system", Content: sys}}}
	for _, m := range r.s.msgs {
		if m == r.asst {
			continue
		}
		if m.info.Role == opencode.RoleUser {
			req.Messages = append(req.Messages, ChatMessage{Role: "user", Content: userText(m)})
			continue
		}
		am := ChatMessage{Role: "assistant"}
		var results []ChatMessage
		for _, p := range m.parts {
			switch {
			case p.Type == opencode.PartText && p.Text != nil:
				am.Content += *p.Text
			case p.Type == opencode.PartTool && p.State != nil:
				am.ToolCalls = append(am.ToolCalls, ToolCall{ID: p.CallID, Name: p.Tool, Arguments: string(p.State.Input)})
				results = append(results, ChatMessage{Role: "tool", ToolCallID: p.CallID, Content: toolResultText(p)})
			}
		}
		if am.Content == "" && len(am.ToolCalls) == 0 {
			continue
		}
		req.Messages = append(req.Messages, am)
		req.Messages = append(req.Messages, results...)
	}
	return req
}

func userText(m *fakeMessage) string {
	var texts []string
	for _, p := range m.parts {
		if p.Type == opencode.PartText && p.Text != nil {
			texts = append(texts, *p.Text)
		}
	}
	return strings.Join(texts, "\n")
}

// toolResultText is what the model sees of a tool part.
func toolResultText(p *partJSON) string {
	switch {
	case p.State.Status == opencode.ToolError:
		return p.State.Error
	case p.State.Output != nil:
		return *p.State.Output
	}
	return ""
}
