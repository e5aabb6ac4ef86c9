package opencodetest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/asyncagents/asyncagents/opencode"
)

// This file is the fake's agent loop. Event order and shapes follow what opencode 1.18.33
// sent for the same prompts (research doc §3.2, and captures of RUN:, SLEEP:, FAIL:, abort
// and permission runs against the scripted model).

// streamStep is the pace of a Reply with a Delay: one "." per step, as the Model streams it.
const streamStep = 250 * time.Millisecond

// addUserMessage stores a prompt's user message and emits its events. f.mu must be held.
func (f *FakeClient) addUserMessage(s *fakeSession, req opencode.PromptRequest, agent string, model opencode.Model) *fakeMessage {
	now := f.ms()
	first := s.info.Agent == ""
	s.info.Agent = agent
	s.info.Model = &sessionModelJSON{ID: model.ModelID, ProviderID: model.ProviderID, Variant: "default"}
	if first {
		s.info.Time.Updated = now
		f.emit(opencode.EventSessionUpdated, sessionEvent{SessionID: s.info.ID, Info: s.info})
	}
	id := req.MessageID
	if id == "" {
		id = f.ids.next("msg", false, f.now())
	}
	m := &fakeMessage{info: infoJSON{
		ID: id, SessionID: s.info.ID, Role: opencode.RoleUser,
		Time: messageTimeJSON{Created: now}, Agent: agent, Model: &model, System: req.System,
	}}
	s.msgs = append(s.msgs, m)
	f.emit(opencode.EventMessageUpdated, messageEvent{SessionID: s.info.ID, Info: m.info})
	f.addParts(s, m, req.Parts)
	return m
}

// addParts adds text parts to a user message; a part with the id of one it has replaces it,
// and the parts with ids of their own are kept in id order, as OpenCode does.
func (f *FakeClient) addParts(s *fakeSession, m *fakeMessage, parts []opencode.TextPartInput) {
	for _, in := range parts {
		id := in.ID
		if id == "" {
			id = f.ids.next("prt", false, f.now())
		}
		p := &partJSON{ID: id, SessionID: s.info.ID, MessageID: m.info.ID,
			Type: opencode.PartText, Text: ptr(in.Text), Synthetic: in.Synthetic}
		if i := slices.IndexFunc(m.parts, func(q *partJSON) bool { return q.ID == id }); i >= 0 {
			m.parts[i] = p
		} else {
			m.parts = append(m.parts, p)
		}
		f.emitPart(s, p)
	}
	slices.SortStableFunc(m.parts, func(a, b *partJSON) int { return strings.Compare(a.ID, b.ID) })
	s.info.Time.Updated = f.ms()
	f.emit(opencode.EventSessionUpdated, sessionEvent{SessionID: s.info.ID, Info: s.info})
}

func (f *FakeClient) emitPart(s *fakeSession, p *partJSON) {
	f.emit(opencode.EventMessagePartUpdate, partEvent{SessionID: s.info.ID, Part: *p, Time: f.ms()})
}

func (f *FakeClient) emitMessage(s *fakeSession, m *fakeMessage) {
	f.emit(opencode.EventMessageUpdated, messageEvent{SessionID: s.info.ID, Info: m.info})
}

func (f *FakeClient) emitStatus(sessionID string, st opencode.SessionStatus) {
	f.emit(opencode.EventSessionStatus, statusEvent{SessionID: sessionID, Status: st})
}

// emitIdle sends session.status idle and session.idle.
func (f *FakeClient) emitIdle(sessionID string) {
	f.emitStatus(sessionID, opencode.SessionStatus{Type: "idle"})
	f.emit(opencode.EventSessionIdle, sessionIDEvent{SessionID: sessionID})
}

// startRun makes the session busy and starts its loop on user. f.mu must be held.
func (f *FakeClient) startRun(s *fakeSession, user *fakeMessage) {
	ctx, cancel := context.WithCancel(f.ctx)
	r := &fakeRun{s: s, ctx: ctx, cancel: cancel, wake: make(chan struct{}, 1),
		status: opencode.SessionStatus{Type: "busy"}, user: user, agent: user.info.Agent, model: *user.info.Model}
	s.run = r
	f.emitStatus(s.info.ID, r.status)
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		defer cancel()
		f.mu.Lock()
		defer f.mu.Unlock()
		f.loop(r)
	}()
}

// wait releases f.mu until ch fires, d passes (d > 0) or the run is stopped. It reports
// whether the run goes on. f.mu must be held.
func (f *FakeClient) wait(r *fakeRun, ch <-chan struct{}, d time.Duration) bool {
	var timer <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timer = t.C
	}
	f.mu.Unlock()
	select {
	case <-ch:
	case <-timer:
	case <-r.ctx.Done():
	}
	f.mu.Lock()
	return !r.aborted
}

// loop answers the session's user messages until none is left, then makes it idle. f.mu is
// held except while a step waits or a script or tool function runs.
func (f *FakeClient) loop(r *fakeRun) {
	s := r.s
	for {
		if r.aborted {
			return
		}
		// Like OpenCode's loop, a turn answers the latest user message: prompts stored before
		// it starts are answered together.
		last := s.lastUser()
		r.user, r.agent, r.model = last, last.info.Agent, *last.info.Model
		if r.model.ProviderID != ProviderID || r.model.ModelID != ModelID {
			f.failUnknownModel(r)
			return
		}
		switch f.turn(r) {
		case turnStopped:
			return
		case turnHalted:
			f.finishRun(r, false)
			return
		}
		if s.lastUser() != r.user {
			continue
		}
		f.finishRun(r, true)
		return
	}
}

// finishRun makes the session idle after a turn and answers blocking prompts.
func (f *FakeClient) finishRun(r *fakeRun, busyFirst bool) {
	s := r.s
	if busyFirst {
		f.emitStatus(s.info.ID, opencode.SessionStatus{Type: "busy"})
	}
	s.run = nil
	f.emitIdle(s.info.ID)
	s.info.Time.Updated = f.ms()
	f.emit(opencode.EventSessionUpdated, sessionEvent{SessionID: s.info.ID, Info: s.info})
	f.emit("session.diff", diffEvent{SessionID: s.info.ID, Diff: []any{}})
	f.emitMessage(s, r.user)
	s.resolve(s.lastAssistant(), nil)
}

// failUnknownModel ends a run whose model the fake does not serve: no assistant message.
func (f *FakeClient) failUnknownModel(r *fakeRun) {
	s := r.s
	name := r.model.ProviderID + "/" + r.model.ModelID
	f.emit(opencode.EventSessionError, errorEvent{SessionID: s.info.ID, Error: unknownErr("Model not found: " + name + ".")})
	s.run = nil
	f.emitIdle(s.info.ID)
	f.emit(opencode.EventSessionError, errorEvent{SessionID: s.info.ID, Error: unknownErr(
		"ProviderModelNotFoundError: Model not found: " + name + ".\n    at SessionPrompt.getModel (opencodetest fake)")})
	s.resolve(nil, unknownError("POST", sessionPath(s.info.ID, "/message")))
}

type turnEnd int

const (
	turnDone    turnEnd = iota // the last step answered with text
	turnHalted                 // a rejected permission without a message stopped the loop
	turnStopped                // aborted, closed or failed: the run is over and reported
)

// turn runs the model steps that answer r.user.
func (f *FakeClient) turn(r *fakeRun) turnEnd {
	for step := 0; ; step++ {
		if !f.beginStep(r, step) {
			return turnStopped
		}
		reply, seq, ok := f.nextReply(r)
		if !ok {
			return turnStopped
		}
		if reply.Status >= 400 {
			f.failStep(r, reply.Status)
			return turnStopped
		}
		f.addPart(r, &partJSON{Type: opencode.PartStepStart})
		if reply.Reasoning != "" {
			f.addReasoning(r, reply.Reasoning)
		}
		if len(reply.ToolCalls) > 0 {
			if end := f.runToolCalls(r, reply.ToolCalls, seq); end != turnDone {
				return end
			}
			continue
		}
		if !f.streamText(r, reply) {
			return turnStopped
		}
		f.finishStep(r, "stop")
		return turnDone
	}
}

// beginStep starts a model step: a new assistant message and the session and user message
// updates that come with it, the title request on the session's first step, session.status
// busy, and the wait of a held run. It reports false when the run was stopped meanwhile.
func (f *FakeClient) beginStep(r *fakeRun, step int) bool {
	s := r.s
	if step > 0 {
		f.emitStatus(s.info.ID, opencode.SessionStatus{Type: "busy"})
	}
	r.asst = &fakeMessage{info: infoJSON{
		ID: f.ids.next("msg", false, f.now()), SessionID: s.info.ID, Role: opencode.RoleAssistant,
		Time: messageTimeJSON{Created: f.ms()}, ParentID: r.user.info.ID,
		ModelID: r.model.ModelID, ProviderID: r.model.ProviderID, Mode: r.agent, Agent: r.agent,
		Path: &pathJSON{Cwd: s.info.Directory, Root: "/"}, Cost: ptr(0.0), Tokens: &tokensJSON{},
	}}
	r.text, r.tool = nil, nil
	s.msgs = append(s.msgs, r.asst)
	f.emitMessage(s, r.asst)
	s.info.Summary = &sessionSummaryJSON{}
	s.info.Time.Updated = f.ms()
	f.emit(opencode.EventSessionUpdated, sessionEvent{SessionID: s.info.ID, Info: s.info})
	f.emit("session.diff", diffEvent{SessionID: s.info.ID, Diff: []any{}})
	r.user.info.Summary = json.RawMessage(`{"diffs":[]}`)
	f.emitMessage(s, r.user)
	if s.untitled {
		s.untitled = false
		if !f.generateTitle(r) {
			return false
		}
	}
	f.emitStatus(s.info.ID, opencode.SessionStatus{Type: "busy"})
	if f.cfg.hold && !r.released {
		if !f.hold(r) {
			return false
		}
		r.released = true
	}
	return true
}

// addReasoning adds a reasoning part with text to the current assistant message, streamed
// as one delta.
func (f *FakeClient) addReasoning(r *fakeRun, text string) {
	p := f.addPart(r, &partJSON{Type: opencode.PartReasoning, Text: ptr(""), Time: &partTimeJSON{Start: f.ms()}})
	f.emit(opencode.EventMessagePartDelta, deltaEvent{SessionID: r.s.info.ID, MessageID: r.asst.info.ID, PartID: p.ID, Field: "text", Delta: text})
	p.Text, p.Time.End = ptr(text), f.ms()
	f.emitPart(r.s, p)
}

// runToolCalls runs the tool calls of a step, in order, and finishes the step with
// tool-calls. It returns turnDone when the loop goes on with the next step, turnHalted when
// a rejected permission stopped it, turnStopped when the run was stopped.
func (f *FakeClient) runToolCalls(r *fakeRun, calls []ToolCall, seq int) turnEnd {
	halted := false
	for i, call := range calls {
		if call.ID == "" {
			call.ID = fmt.Sprintf("call_chatcmpl-%d_%d", seq, i)
		}
		end, ok := f.runTool(r, call)
		if !ok {
			return turnStopped
		}
		if halted = end == turnHalted; halted {
			break
		}
	}
	f.finishStep(r, "tool-calls")
	if halted {
		return turnHalted
	}
	return turnDone
}

// addPart appends a part to the current assistant message and emits it.
func (f *FakeClient) addPart(r *fakeRun, p *partJSON) *partJSON {
	p.ID, p.SessionID, p.MessageID = f.ids.next("prt", false, f.now()), r.s.info.ID, r.asst.info.ID
	r.asst.parts = append(r.asst.parts, p)
	f.emitPart(r.s, p)
	return p
}

// finishStep closes the current assistant message with finish.
func (f *FakeClient) finishStep(r *fakeRun, finish string) {
	tok := stepTokens()
	cost := tok.cost()
	f.addPart(r, &partJSON{Type: opencode.PartStepFinish, Reason: finish, Tokens: tok, Cost: ptr(cost)})
	r.asst.info.Finish, r.asst.info.Tokens, r.asst.info.Cost, r.asst.info.Time.Completed = finish, tok, ptr(cost), f.ms()
	r.s.info.add(tok, cost) // in the next session.updated, as OpenCode does
	f.emitMessage(r.s, r.asst)
	f.emitMessage(r.s, r.asst)
	r.text, r.tool = nil, nil
}

// hold waits for a Release of the session and takes its replies.
func (f *FakeClient) hold(r *fakeRun) bool {
	s := r.s
	for len(s.permits) == 0 {
		if !f.wait(r, r.wake, 0) {
			return false
		}
	}
	r.replies = append(r.replies, s.permits[0]...)
	s.permits = s.permits[1:]
	return true
}

// failStep ends the run with the model's HTTP error on the current assistant message.
func (f *FakeClient) failStep(r *fakeRun, status int) {
	s := r.s
	e := modelAPIErr(status)
	f.emit(opencode.EventSessionError, errorEvent{SessionID: s.info.ID, Error: e})
	s.run = nil
	f.emitIdle(s.info.ID)
	r.asst.info.Error, r.asst.info.Time.Completed = e, f.ms()
	f.emitMessage(s, r.asst)
	f.emitIdle(s.info.ID)
	s.resolve(r.asst, nil)
}

// abortRun stops a busy session's run now: everything Abort reports is done before it
// returns, and the run's goroutine stops without a trace. f.mu must be held.
func (f *FakeClient) abortRun(r *fakeRun) {
	s := r.s
	r.aborted = true
	r.cancel()
	s.run = nil
	f.emit(opencode.EventSessionError, errorEvent{SessionID: s.info.ID, Error: abortedErr()})
	f.emitIdle(s.info.ID)
	end := f.ms()
	switch {
	case r.perm != nil:
		r.perm.run = nil // the request stays pending, as on the real server
		st := r.tool.State
		st.Status, st.Error, st.Metadata, st.Time.End = opencode.ToolError, "Tool execution aborted", map[string]any{"interrupted": true}, end
		f.emitPart(s, r.tool)
	case r.tool != nil:
		out := "(no output)\n\n<shell_metadata>\nUser aborted the command\n</shell_metadata>"
		st := r.tool.State
		st.Status, st.Output, st.Title, st.Time.End = opencode.ToolCompleted, ptr(out), toolTitle(r.tool), end
		st.Metadata = map[string]any{"output": out, "exit": nil, "truncated": false}
		f.emitPart(s, r.tool)
	}
	if r.text != nil {
		r.text.Time.End = end
		f.emitPart(s, r.text)
	}
	if r.asst != nil && r.asst.info.Time.Completed == 0 {
		r.asst.info.Error, r.asst.info.Time.Completed = abortedErr(), end
		f.emitMessage(s, r.asst)
	}
	f.emitIdle(s.info.ID)
	s.resolve(s.lastAssistant(), nil)
}

// streamText writes a text reply: a part with empty text, the deltas, then the full text.
// A Delay streams "working ", a "." every 250 ms, then " " and the text, as the Model does.
func (f *FakeClient) streamText(r *fakeRun, reply Reply) bool {
	s := r.s
	r.text = f.addPart(r, &partJSON{Type: opencode.PartText, Text: ptr(""), Time: &partTimeJSON{Start: f.ms()}})
	delta := func(d string) {
		r.text.Text = ptr(*r.text.Text + d)
		f.emit(opencode.EventMessagePartDelta, deltaEvent{SessionID: s.info.ID, MessageID: r.asst.info.ID, PartID: r.text.ID, Field: "text", Delta: d})
	}
	if reply.Delay > 0 {
		delta("working ")
		for range int(reply.Delay / streamStep) {
			if !f.wait(r, nil, streamStep) {
				return false
			}
			delta(".")
		}
		delta(" " + reply.Text)
	} else {
		delta(reply.Text)
	}
	r.text.Time.End = f.ms()
	f.emitPart(s, r.text)
	r.text = nil
	return true
}
