package opencodetest

import "github.com/asyncagents/asyncagents/opencode"

// checkAbortBusy: a session is busy (in its events and in SessionStatus of the default and
// of the project directory) while its model streams; Abort then ends the run with
// MessageAbortedError on the assistant message, session.error before idle, and the session
// leaves SessionStatus.
func checkAbortBusy(k *checker) {
	events := k.subscribe()
	s := k.session(opencode.CreateSessionRequest{Title: "conformance abort"})
	if s == nil || events == nil {
		return
	}
	if !k.ok(k.c.PromptAsync(k.ctx, s.ID, opencode.PromptRequest{Parts: text("SLEEP:30")}), "PromptAsync") {
		return
	}
	// Abort while the model streams its text: the run's state is then the same on every
	// server (earlier, OpenCode may still be writing the step's first updates).
	checkStreamingBusy(k, events, s.ID)
	if !k.ok(k.c.Abort(k.ctx, s.ID), "Abort") {
		return
	}
	checkAborted(k, events, s.ID)
}

// checkStreamingBusy waits until the session's model streams its text and checks that the
// session is busy: session.status busy came first, and SessionStatus says so.
func checkStreamingBusy(k *checker, events *eventReader, sessionID string) {
	started := events.streaming(sessionID)
	if indexOf(started, 0, isStatus("busy")) < 0 {
		k.errorf("events %s: want session.status busy before the text part", types(started))
	}
	for _, dir := range []string{"", k.h.Directory} {
		if st, err := k.c.SessionStatus(k.ctx, dir); k.ok(err, "SessionStatus") && st[sessionID].Type != "busy" {
			k.errorf("SessionStatus(%q) of a running session = %v, want busy", dir, st)
		}
	}
}

// checkAborted checks a session after Abort ended its run: the events up to the second
// idle, the aborted assistant message, and its absence from SessionStatus.
func checkAborted(k *checker, events *eventReader, sessionID string) {
	evs := events.idles(sessionID, 2)
	errAt := indexOf(evs, 0, isType(opencode.EventSessionError))
	if errAt < 0 || evs[errAt].p.Error.Name != "MessageAbortedError" || indexOf(evs, 0, isType(opencode.EventSessionIdle)) < errAt {
		k.errorf("events after Abort %s: want session.error MessageAbortedError, then idle", types(evs))
	}
	if msgs := k.messages(sessionID, 1); len(msgs) == 1 {
		checkAbortedMessage(k, msgs[0].Info)
	}
	if st, err := k.c.SessionStatus(k.ctx, ""); k.ok(err, "SessionStatus") {
		if _, busy := st[sessionID]; busy {
			k.errorf("status after Abort = %v, want absent", st[sessionID])
		}
	}
}

// checkAbortedMessage: the aborted assistant message is completed without a finish and
// carries MessageAbortedError "Aborted".
func checkAbortedMessage(k *checker, in opencode.MessageInfo) {
	if in.Role != opencode.RoleAssistant || in.Error == nil || in.Error.Name != "MessageAbortedError" ||
		in.Error.Message() != "Aborted" || in.Time.Completed == 0 || in.Finish != "" {
		k.errorf("aborted message info = %+v, error %+v", in, in.Error)
	}
}

// checkAbortIdle: Abort of an idle and of an unknown session succeeds and emits
// session.status idle, then session.idle.
func checkAbortIdle(k *checker) {
	s := k.session(opencode.CreateSessionRequest{Title: "conformance idle abort"})
	events := k.subscribe()
	if s == nil || events == nil {
		return
	}
	for _, id := range []string{s.ID, unknownSession} {
		if !k.ok(k.c.Abort(k.ctx, id), "Abort(idle or unknown)") {
			continue
		}
		evs := events.idles(id, 1)
		if len(evs) != 2 || !isStatus("idle")(evs[0]) {
			k.errorf("events after Abort(%s) %s: want session.status idle, session.idle", id, types(evs))
		}
	}
}
