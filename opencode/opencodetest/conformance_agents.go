package opencodetest

import "github.com/asyncagents/asyncagents/opencode"

// checkAgents: the agent list holds the default agents with their modes, the hidden ones
// hidden, the others described.
func checkAgents(k *checker) {
	agents, err := k.c.Agents(k.ctx, "")
	if !k.ok(err, "Agents") {
		return
	}
	want := map[string]opencode.Agent{
		"build": {Mode: "primary"}, "plan": {Mode: "primary"}, "general": {Mode: "subagent"}, "explore": {Mode: "subagent"},
		"compaction": {Mode: "primary", Hidden: true}, "summary": {Mode: "primary", Hidden: true}, "title": {Mode: "primary", Hidden: true},
	}
	for _, a := range agents {
		if w, ok := want[a.Name]; ok {
			if a.Mode != w.Mode || a.Hidden != w.Hidden || (!a.Hidden && a.Description == "") {
				k.errorf("agent %s = %+v, want mode %s, hidden %v", a.Name, a, w.Mode, w.Hidden)
			}
			delete(want, a.Name)
		}
	}
	for name := range want {
		k.errorf("agent %s missing", name)
	}
}

// checkUnknownAgent: a PromptAsync naming an unknown agent stores nothing and sends just two
// session.error events, the first naming the available agents; a Prompt naming it is HTTP 500.
func checkUnknownAgent(k *checker) {
	s := k.session(opencode.CreateSessionRequest{Title: "conformance unknown agent"})
	events := k.subscribe()
	if s == nil || events == nil {
		return
	}
	if !k.ok(k.c.PromptAsync(k.ctx, s.ID, opencode.PromptRequest{Agent: "no-such-agent", Parts: text("hi")}), "PromptAsync(unknown agent)") {
		return
	}
	n := 0
	evs := events.until(s.ID, "two session.error events", func(e sessionEv) bool {
		if e.Type == opencode.EventSessionError {
			n++
		}
		return n == 2
	})
	if len(evs) != 2 || evs[0].p.Error.Name != "UnknownError" ||
		evs[0].p.Error.Message() != `Agent not found: "no-such-agent". Available agents: build, explore, general, plan` {
		k.errorf("events %s: want just two session.error events, the first naming the agent", types(evs))
	}
	if msgs := k.messages(s.ID, 0); len(msgs) != 0 {
		k.errorf("messages = %d, want none", len(msgs))
	}
	if st, err := k.c.SessionStatus(k.ctx, ""); k.ok(err, "SessionStatus") {
		if _, busy := st[s.ID]; busy {
			k.errorf("status = %v, want absent", st[s.ID])
		}
	}
	if _, err := k.c.Prompt(k.ctx, s.ID, opencode.PromptRequest{Agent: "no-such-agent", Parts: text("hi")}); !isAPIError(err, 500) {
		k.errorf("Prompt(unknown agent) = %v, want HTTP 500", err)
	}
}

// checkUnknownModel: a prompt naming an unknown model of the scripted provider stores the
// user message only and sends busy, session.error "Model not found", idle.
func checkUnknownModel(k *checker) {
	events := k.subscribe()
	s := k.session(opencode.CreateSessionRequest{Title: "conformance unknown model"})
	if s == nil || events == nil {
		return
	}
	model := &opencode.Model{ProviderID: ProviderID, ModelID: "no-such-model"}
	if !k.ok(k.c.PromptAsync(k.ctx, s.ID, opencode.PromptRequest{Model: model, Parts: text("hi")}), "PromptAsync(unknown model)") {
		return
	}
	evs := events.idles(s.ID, 1)
	busy, errAt := indexOf(evs, 0, isStatus("busy")), indexOf(evs, 0, isType(opencode.EventSessionError))
	if busy < 0 || errAt < busy || evs[errAt].p.Error.Message() != "Model not found: "+ProviderID+"/no-such-model." {
		k.errorf("events %s: want busy, session.error \"Model not found\", idle", types(evs))
	}
	if msgs := k.messages(s.ID, 0); len(msgs) != 1 || msgs[0].Info.Role != opencode.RoleUser {
		k.errorf("messages = %d, want only the user message", len(msgs))
	}
}

// checkModelFailure: a model answering HTTP 400 fails the run with session.error APIError,
// and the failed assistant message carries the status, no finish and no parts.
func checkModelFailure(k *checker) {
	events := k.subscribe()
	s := k.session(opencode.CreateSessionRequest{Title: "conformance model failure"})
	if s == nil || events == nil {
		return
	}
	if !k.ok(k.c.PromptAsync(k.ctx, s.ID, opencode.PromptRequest{Parts: text("FAIL:400")}), "PromptAsync") {
		return
	}
	evs := events.idles(s.ID, 2)
	errAt := indexOf(evs, 0, isType(opencode.EventSessionError))
	if errAt < 0 || evs[errAt].p.Error.Name != "APIError" {
		k.errorf("events %s: want session.error APIError", types(evs))
	}
	msgs := k.messages(s.ID, 0)
	if len(msgs) != 2 {
		k.errorf("messages = %d, want the user message and the failed assistant message", len(msgs))
		return
	}
	in := msgs[1].Info
	var data struct {
		StatusCode  int  `json:"statusCode"`
		IsRetryable bool `json:"isRetryable"`
	}
	if in.Error == nil || in.Error.Name != "APIError" || decodeJSON(in.Error.Data, &data) != nil || data.StatusCode != 400 || data.IsRetryable ||
		in.Finish != "" || in.Time.Completed == 0 || len(msgs[1].Parts) != 0 {
		k.errorf("failed message info = %+v, error %+v, parts %d", in, in.Error, len(msgs[1].Parts))
	}
}
