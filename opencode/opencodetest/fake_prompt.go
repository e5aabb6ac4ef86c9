package opencodetest

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/asyncagents/asyncagents/opencode"
)

// Prompt sends a prompt and waits, as POST /session/{id}/message does: with NoReply it stores
// the user message and returns it; otherwise it returns the last assistant message once the
// session is idle (with Info.Error set when the model failed or the run was aborted). An
// unknown agent or model fails with an HTTP 500 [*opencode.APIError]. If ctx ends first it
// returns ctx's error and the run goes on.
func (f *FakeClient) Prompt(ctx context.Context, sessionID string, req opencode.PromptRequest) (*opencode.Message, error) {
	path := sessionPath(sessionID, "/message")
	f.mu.Lock()
	if err := f.enter(ctx, "Prompt", http.MethodPost, path); err != nil {
		f.mu.Unlock()
		return nil, err
	}
	s, user, err := f.prompt(path, sessionID, req, true)
	if err != nil {
		f.mu.Unlock()
		return nil, err
	}
	if req.NoReply {
		m := user.message() // under f.mu: a running loop may take it as its step's user message and change it
		f.mu.Unlock()
		return &m, nil
	}
	done := make(chan promptResult, 1)
	s.waiters = append(s.waiters, done)
	f.mu.Unlock()
	select {
	case r := <-done:
		return r.msg, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// PromptAsync starts the agent loop on a prompt and returns at once, as POST
// /session/{id}/prompt_async does; see [FakeClient] for what follows.
func (f *FakeClient) PromptAsync(ctx context.Context, sessionID string, req opencode.PromptRequest) error {
	path := sessionPath(sessionID, "/prompt_async")
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter(ctx, "PromptAsync", http.MethodPost, path); err != nil {
		return err
	}
	_, _, err := f.prompt(path, sessionID, req, false)
	return err
}

// prompt stores a prompt's user message and starts a run unless the session is busy or the
// prompt has NoReply. An unknown agent stores nothing: it emits session.error (twice for an
// async prompt) and, for a sync one, returns an HTTP 500 error. f.mu must be held.
func (f *FakeClient) prompt(path, sessionID string, req opencode.PromptRequest, sync bool) (*fakeSession, *fakeMessage, error) {
	s, err := f.session(http.MethodPost, path, sessionID)
	if err != nil {
		return nil, nil, err
	}
	if req.Parts == nil {
		return nil, nil, badRequest(http.MethodPost, path, "Missing key\n  at [\"parts\"]")
	}
	agent := req.Agent
	if agent == "" {
		agent = defaultAgent
	}
	if !knownAgent(agent) {
		f.emit(opencode.EventSessionError, errorEvent{SessionID: s.info.ID, Error: unknownErr(
			fmt.Sprintf("Agent not found: %q. Available agents: %s", agent, strings.Join(visibleAgents(), ", ")))})
		if sync {
			return nil, nil, unknownError(http.MethodPost, path)
		}
		f.emit(opencode.EventSessionError, errorEvent{SessionID: s.info.ID, Error: unknownErr(
			"UnknownError: UnknownError\n    at SessionPrompt.createUserMessage (opencodetest fake)")})
		return nil, nil, nil
	}
	model := opencode.Model{ProviderID: ProviderID, ModelID: ModelID}
	if req.Model != nil {
		model = *req.Model
	}
	if req.MessageID != "" && !strings.HasPrefix(req.MessageID, "msg") {
		return nil, nil, badRequest(http.MethodPost, path, "Invalid string: must start with \"msg\"\n  at [\"messageID\"]")
	}
	for _, m := range s.msgs {
		if req.MessageID != "" && m.info.ID == req.MessageID { // OpenCode adds the parts; no reply
			f.addParts(s, m, req.Parts)
			return s, m, nil
		}
	}
	user := f.addUserMessage(s, req, agent, model)
	if !req.NoReply && s.run == nil {
		f.startRun(s, user)
	}
	return s, user, nil
}

// Abort stops a session's run, as POST /session/{id}/abort does: the assistant message gets
// MessageAbortedError and time.completed, a running bash command ends with "User aborted the
// command", a tool waiting for a permission ends with status "error" (the request stays
// pending, as on the real server), and the events are session.error, session.status idle,
// session.idle, the final part and message updates, then idle again. An idle or unknown
// session gets session.status idle and session.idle; the call always succeeds.
func (f *FakeClient) Abort(ctx context.Context, sessionID string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter(ctx, "Abort", http.MethodPost, sessionPath(sessionID, "/abort")); err != nil {
		return err
	}
	if s := f.sessions[sessionID]; s != nil && s.run != nil {
		f.abortRun(s.run)
		return nil
	}
	f.emitIdle(sessionID)
	return nil
}
