package opencodetest

import (
	"math"
	"slices"
	"strings"
	"time"

	"github.com/asyncagents/asyncagents/opencode"
)

// checkRun: a PromptAsync run whose model calls the bash tool once (RUN:echo) and then
// answers. Its events come in OpenCode's order and shapes up to the first session.idle, and
// they carry the reply whole; the session is then absent from SessionStatus; its messages
// are the user message, a tool-calls step and a stop step, read back in full and with a
// limit.
func checkRun(k *checker) {
	events := k.subscribe()
	s := k.session(opencode.CreateSessionRequest{Title: "conformance run"})
	if s == nil || events == nil {
		return
	}
	if !k.ok(k.c.PromptAsync(k.ctx, s.ID, opencode.PromptRequest{Parts: text("RUN:echo conformance-run")}), "PromptAsync") {
		return
	}
	evs := events.idles(s.ID, 1)
	if len(evs) == 0 {
		return
	}
	checkRunEvents(k, evs)
	if st, err := k.c.SessionStatus(k.ctx, k.h.Directory); k.ok(err, "SessionStatus") {
		if _, busy := st[s.ID]; busy {
			k.errorf("status of an idle session = %v, want it absent", st[s.ID])
		}
	}

	msgs := k.messages(s.ID, 0)
	if len(msgs) != 3 {
		k.errorf("messages = %d, want user, assistant (tool-calls), assistant (stop)", len(msgs))
		return
	}
	checkRunMessages(k, msgs)
	checkRunReplyInEvents(k, evs, msgs[2])
	checkRunMessageLimit(k, s.ID, msgs[1], msgs[2])
	checkRunUsage(k, s.ID, msgs[1:])
}

// checkRunUsage: each completed step reports its tokens and a cost (the test project prices
// the model), and the session's totals (GET /session/{id}) come to their sum once the last
// step is counted, a moment after the idle.
func checkRunUsage(k *checker, sessionID string, steps []opencode.Message) {
	var want opencode.Tokens
	var cost float64
	for _, m := range steps {
		t := m.Info.Tokens
		if t == nil || t.Input <= 0 || t.Output <= 0 || m.Info.Cost <= 0 {
			k.errorf("step %s: tokens %+v, cost %v: want both", m.Info.ID, t, m.Info.Cost)
			return
		}
		want.Input, want.Output, want.Reasoning = want.Input+t.Input, want.Output+t.Output, want.Reasoning+t.Reasoning
		want.Cache.Read, want.Cache.Write = want.Cache.Read+t.Cache.Read, want.Cache.Write+t.Cache.Write
		cost += m.Info.Cost
	}
	var got *opencode.Session
	for range 40 {
		s, err := k.c.GetSession(k.ctx, sessionID)
		if !k.ok(err, "GetSession") {
			return
		}
		if got = s; s.Tokens != nil && *s.Tokens == want && math.Abs(s.Cost-cost) < 1e-9 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	k.errorf("session totals = %+v, cost %v; want the sum of its steps %+v, cost %v", got.Tokens, got.Cost, want, cost)
}

// checkRunEvents checks the order of a run's events up to its first session.idle: the user
// message, session.status busy, an assistant message; the tool part pending, running,
// completed; a step finished with tool-calls, then one with stop; session.status idle right
// before session.idle, and no session.error.
func checkRunEvents(k *checker, evs []sessionEv) {
	user := indexOf(evs, 0, isRole(opencode.RoleUser))
	busy := indexOf(evs, 0, isStatus("busy"))
	asst := indexOf(evs, 0, isRole(opencode.RoleAssistant))
	if user < 0 || busy < user || asst < busy {
		k.errorf("events %s: want the user message, then session.status busy, then an assistant message", types(evs))
	}
	checkRunToolStates(k, evs)
	toolCalls := indexOf(evs, 0, isFinish("tool-calls"))
	stop := indexOf(evs, 0, isFinish("stop"))
	if toolCalls < 0 || stop < toolCalls {
		k.errorf("events %s: want an assistant message with finish tool-calls, then one with stop", types(evs))
	}
	if n := len(evs); n < 2 || !isStatus("idle")(evs[n-2]) || indexOf(evs, 0, isType(opencode.EventSessionError)) >= 0 {
		k.errorf("events %s: want session.status idle right before session.idle, and no session.error", types(evs))
	}
}

// checkRunToolStates checks the states the tool part's updates go through, and the output
// of the completed ones.
func checkRunToolStates(k *checker, evs []sessionEv) {
	var states []string
	for _, e := range evs {
		if e.Type != opencode.EventMessagePartUpdate || e.p.Part == nil || e.p.Part.Type != opencode.PartTool {
			continue
		}
		if st := e.p.Part.State.Status; len(states) == 0 || states[len(states)-1] != st {
			states = append(states, st)
		}
		if e.p.Part.State.Status == opencode.ToolCompleted && e.p.Part.State.Output != "conformance-run\n" {
			k.errorf("completed tool part event output %q", e.p.Part.State.Output)
		}
	}
	if !slices.Equal(states, []string{opencode.ToolPending, opencode.ToolRunning, opencode.ToolCompleted}) {
		k.errorf("tool part states %v, want pending, running, completed", states)
	}
}

// checkRunMessages checks the three messages of the run: the user's prompt, two completed
// assistant messages answering it, ids in creation order, the tool step, the text step.
func checkRunMessages(k *checker, msgs []opencode.Message) {
	u, a1, a2 := msgs[0], msgs[1], msgs[2]
	if u.Info.Role != opencode.RoleUser || len(u.Parts) != 1 || u.Parts[0].Text != "RUN:echo conformance-run" {
		k.errorf("user message = %+v", u)
	}
	for i, m := range msgs[1:] {
		if in := m.Info; !isRunAnswer(in, u.Info.ID) {
			k.errorf("assistant message %d info = %+v", i+1, in)
		}
	}
	for i := 1; i < len(msgs); i++ {
		if !(msgs[i-1].Info.ID < msgs[i].Info.ID) {
			k.errorf("message ids %s, %s: want them in creation order", msgs[i-1].Info.ID, msgs[i].Info.ID)
		}
	}
	checkRunToolStep(k, a1)
	checkRunTextStep(k, a2)
}

// isRunAnswer reports whether in is a completed assistant message of the build agent that
// answers the user message parentID, with a model, times and no error.
func isRunAnswer(in opencode.MessageInfo, parentID string) bool {
	return in.Role == opencode.RoleAssistant && in.ParentID == parentID && in.Agent == "build" && in.Mode == "build" &&
		in.ModelID != "" && in.Provider != "" && in.Time.Created > 0 && in.Time.Completed >= in.Time.Created && in.Error == nil
}

// checkRunToolStep checks the first step: finish tool-calls, and its bash part completed
// with the command's output and exit code 0.
func checkRunToolStep(k *checker, a1 opencode.Message) {
	if got := partTypes(a1); a1.Info.Finish != "tool-calls" || !slices.Equal(got, []string{"step-start", "tool", "step-finish"}) {
		k.errorf("first step: finish %q, parts %v; want tool-calls, [step-start tool step-finish]", a1.Info.Finish, got)
	} else if p := a1.Parts[1]; p.Tool != "bash" || p.CallID == "" || p.State.Status != opencode.ToolCompleted ||
		p.State.Output != "conformance-run\n" || p.State.Title != "echo conformance-run" && p.State.Title != "scripted step" {
		// The title is the command; before OpenCode 1.17 it was the call's description.
		k.errorf("tool part = %+v, state %+v", p, p.State)
	} else if code, ok := p.State.ExitCode(); !ok || code != 0 {
		k.errorf("tool exit code = %v, %v; want 0", code, ok)
	}
}

// checkRunTextStep checks the last step: finish stop and the model's reply as its text.
func checkRunTextStep(k *checker, a2 opencode.Message) {
	if got := partTypes(a2); a2.Info.Finish != "stop" || !slices.Equal(got, []string{"step-start", "text", "step-finish"}) {
		k.errorf("last step: finish %q, parts %v; want stop, [step-start text step-finish]", a2.Info.Finish, got)
	} else if t := a2.Parts[1].Text; t != "Ran 1 command(s); last output: conformance-run" {
		k.errorf("reply text %q", t)
	}
}

// checkRunReplyInEvents: the events up to the first idle carry the reply whole: its text
// part with an end time and the final text, and its info completed with finish stop.
func checkRunReplyInEvents(k *checker, evs []sessionEv, a2 opencode.Message) {
	streamed, completed := streamedReply(evs, a2.Info.ID)
	if len(a2.Parts) > 1 && (streamed != a2.Parts[1].Text || !completed) {
		k.errorf("events before the idle: final text %q, completed %v; want %q, true", streamed, completed, a2.Parts[1].Text)
	}
}

// streamedReply returns what the events tell of message id: the text of its last text part
// update with an end time, and whether an update showed it completed with finish stop.
func streamedReply(evs []sessionEv, id string) (text string, completed bool) {
	for _, e := range evs {
		if p := e.p.Part; e.Type == opencode.EventMessagePartUpdate && p != nil && p.MessageID == id &&
			p.Type == opencode.PartText && strings.Contains(string(p.Raw), `"end":`) {
			text = p.Text
		}
		if i, ok := e.info(); ok && i.ID == id && i.Finish == "stop" && i.Time.Completed != 0 {
			completed = true
		}
	}
	return text, completed
}

// checkRunMessageLimit: Messages with a limit returns the last messages, oldest first, and
// a limit above the count returns them all.
func checkRunMessageLimit(k *checker, sessionID string, a1, a2 opencode.Message) {
	if last2 := k.messages(sessionID, 2); len(last2) != 2 || last2[0].Info.ID != a1.Info.ID || last2[1].Info.ID != a2.Info.ID {
		k.errorf("Messages(limit 2) = %d messages, want the last two, oldest first", len(last2))
	}
	if all := k.messages(sessionID, 100); len(all) != 3 {
		k.errorf("Messages(limit 100) = %d messages, want all 3", len(all))
	}
}

func partTypes(m opencode.Message) []string {
	var t []string
	for _, p := range m.Parts {
		t = append(t, p.Type)
	}
	return t
}

// checkBlockingPrompt: Prompt returns the last assistant message of the finished run, which
// is the last of the session's three messages.
func checkBlockingPrompt(k *checker) {
	s := k.session(opencode.CreateSessionRequest{Title: "conformance blocking"})
	if s == nil {
		return
	}
	m, err := k.c.Prompt(k.ctx, s.ID, opencode.PromptRequest{Parts: text("RUN:echo conformance-sync")})
	if !k.ok(err, "Prompt") {
		return
	}
	if m.Info.Role != opencode.RoleAssistant || m.Info.Finish != "stop" || m.Info.Time.Completed == 0 || len(m.Parts) < 2 ||
		m.Parts[len(m.Parts)-2].Text != "Ran 1 command(s); last output: conformance-sync" {
		k.errorf("Prompt returned %+v, want the last assistant message", m)
	}
	if msgs := k.messages(s.ID, 0); len(msgs) != 3 || msgs[2].Info.ID != m.Info.ID {
		k.errorf("messages after Prompt = %d, want 3 ending with the returned one", len(msgs))
	}
}
