package opencodetest

import (
	"slices"
	"strings"

	"github.com/asyncagents/asyncagents/opencode"
)

// checkDirectory: a child session created in another directory than its parent's belongs
// to that directory's instance, whatever the client's default: its Directory, the agents of
// that directory, its status (busy there only), the Directory of its events, and the
// working directory its model is told.
func checkDirectory(k *checker) {
	other := k.h.OtherDirectory
	if other == "" {
		return
	}
	events := k.subscribe()
	parent := k.session(opencode.CreateSessionRequest{Title: "conformance directory parent"})
	if parent == nil || events == nil {
		return
	}
	s := k.session(opencode.CreateSessionRequest{Directory: other, ParentID: parent.ID, Title: "conformance directory"})
	if s == nil {
		return
	}
	checkSessionInOther(k, s, parent)
	seen := 0
	if k.h.Requests != nil {
		seen = len(k.h.Requests())
	}
	if !k.ok(k.c.PromptAsync(k.ctx, s.ID, opencode.PromptRequest{Parts: text("SLEEP:30 directory")}), "PromptAsync") {
		return
	}
	evs := events.streaming(s.ID)
	checkStatusByDirectory(k, s.ID)
	k.ok(k.c.Abort(k.ctx, s.ID), "Abort")
	evs = append(evs, events.idles(s.ID, 2)...)
	checkEventDirectories(k, evs)
	checkModelToldDirectory(k, seen)
}

// checkSessionInOther checks session s, created in [Harness.OtherDirectory] as a child of
// parent: its fields, GetSession's Directory, and the agents of that directory.
func checkSessionInOther(k *checker, s, parent *opencode.Session) {
	other := k.h.OtherDirectory
	if s.Directory != other || s.ParentID != parent.ID || parent.Directory != k.h.Directory {
		k.errorf("session created in %s = %+v (parent %+v)", other, s, parent)
	}
	if got, err := k.c.GetSession(k.ctx, s.ID); k.ok(err, "GetSession") && got.Directory != other {
		k.errorf("GetSession(%s).Directory = %q, want %q", s.ID, got.Directory, other)
	}
	if agents, err := k.c.Agents(k.ctx, other); k.ok(err, "Agents") &&
		!slices.ContainsFunc(agents, func(a opencode.Agent) bool { return a.Name == "build" }) {
		k.errorf("Agents(%s) = %v, want build among them", other, agents)
	}
}

// checkStatusByDirectory: a running session of [Harness.OtherDirectory] is busy in that
// directory's SessionStatus only.
func checkStatusByDirectory(k *checker, sessionID string) {
	for dir, busy := range map[string]bool{k.h.OtherDirectory: true, "": false, k.h.Directory: false} {
		if st, err := k.c.SessionStatus(k.ctx, dir); k.ok(err, "SessionStatus") && (st[sessionID].Type == "busy") != busy {
			k.errorf("SessionStatus(%q)[%s] = %+v, want busy %v", dir, sessionID, st[sessionID], busy)
		}
	}
}

// checkEventDirectories: every event of the session carries [Harness.OtherDirectory].
func checkEventDirectories(k *checker, evs []sessionEv) {
	other := k.h.OtherDirectory
	for _, e := range evs {
		if e.Directory != other {
			k.errorf("event %s of the session has directory %q, want %q", e.Type, e.Directory, other)
			break
		}
	}
}

// checkModelToldDirectory: the model request of the session's prompt, among the requests
// after the first seen, tells the model its working directory (when the harness shows the
// requests).
func checkModelToldDirectory(k *checker, seen int) {
	if k.h.Requests == nil {
		return
	}
	other := k.h.OtherDirectory
	var sys string
	for _, r := range k.h.Requests()[seen:] {
		if _, u := r.LastUser(); r.Kind == KindChat && strings.Contains(u, "SLEEP:30 directory") {
			sys = r.System()
		}
	}
	if want := "Working directory: " + other + "\n"; !strings.Contains(sys+"\n", want) {
		k.errorf("the model of a session in %s was not told %q; system prompt:\n%s", other, strings.TrimSpace(want), head(sys, 2000))
	}
}

// head returns the first n bytes of s, for messages.
func head(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
