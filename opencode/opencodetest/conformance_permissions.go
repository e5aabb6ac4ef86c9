package opencodetest

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/asyncagents/asyncagents/opencode"
)

// permissionClient is the part of a client that lists and answers permission requests
// ([opencode.HTTPClient], [FakeClient]).
type permissionClient interface {
	Permissions(ctx context.Context, directory string) ([]opencode.Permission, error)
	ReplyPermission(ctx context.Context, directory, requestID string, reply opencode.PermissionReply) error
}

// checkPermission: a bash command that reads outside the project asks the
// external_directory permission and keeps the session busy, its tool part running. A client
// with permission methods lists the request, rejects it with a message (the tool part ends
// with the feedback, the model answers), and a second reply is not found; any other client
// aborts the session, which ends the tool part.
func checkPermission(k *checker) {
	events := k.subscribe()
	s := k.session(opencode.CreateSessionRequest{Title: "conformance permission"})
	if s == nil || events == nil {
		return
	}
	if !k.ok(k.c.PromptAsync(k.ctx, s.ID, opencode.PromptRequest{Parts: text("RUN:cat /no/such/conformance.txt")}), "PromptAsync") {
		return
	}
	asked, ok := checkPermissionAsked(k, events, s.ID)
	if !ok {
		return
	}
	checkPermissionPending(k, s.ID)
	pc, ok := k.c.(permissionClient)
	if !ok {
		checkPermissionAborted(k, events, s.ID)
		return
	}
	checkPermissionListed(k, pc, s.ID, asked)
	reject := opencode.PermissionReply{Reply: opencode.ReplyReject, Message: "conformance says no"}
	if !k.ok(pc.ReplyPermission(k.ctx, "", asked.ID, reject), "ReplyPermission") {
		return
	}
	checkRejectionEvents(k, events, s.ID)
	if !checkRejectionMessages(k, s.ID) {
		return
	}
	if err := pc.ReplyPermission(k.ctx, "", asked.ID, reject); !errors.Is(err, opencode.ErrNotFound) {
		k.errorf("second reply = %v, want ErrNotFound", err)
	}
}

// checkPermissionAsked waits for the session's permission.asked event and checks the
// request it carries. It reports false when the stream ended first.
func checkPermissionAsked(k *checker, events *eventReader, sessionID string) (opencode.Permission, bool) {
	evs := events.until(sessionID, "permission.asked", isType(opencode.EventPermissionAsked))
	if len(evs) == 0 || evs[len(evs)-1].Type != opencode.EventPermissionAsked {
		return opencode.Permission{}, false
	}
	var asked opencode.Permission
	if err := decodeJSON(evs[len(evs)-1].Properties, &asked); err != nil || !strings.HasPrefix(asked.ID, "per_") ||
		asked.Permission != "external_directory" || !slices.Equal(asked.Patterns, []string{"/no/such/*"}) ||
		asked.Tool == nil || asked.Tool.CallID == "" {
		k.errorf("permission.asked = %+v (%v), want external_directory for /no/such/*", asked, err)
	}
	return asked, true
}

// checkPermissionPending: while the request waits, the session is busy and its tool part
// running.
func checkPermissionPending(k *checker, sessionID string) {
	if st, err := k.c.SessionStatus(k.ctx, ""); k.ok(err, "SessionStatus") && st[sessionID].Type != "busy" {
		k.errorf("status while asking = %v, want busy", st[sessionID])
	}
	if msgs := k.messages(sessionID, 1); len(msgs) == 1 {
		if p := toolPart(msgs[0]); p == nil || p.State.Status != opencode.ToolRunning {
			k.errorf("tool part while asking = %+v, want running", p)
		}
	}
}

// checkPermissionAborted aborts the waiting session: its tool part ends with an error.
func checkPermissionAborted(k *checker, events *eventReader, sessionID string) {
	if !k.ok(k.c.Abort(k.ctx, sessionID), "Abort") {
		return
	}
	events.idles(sessionID, 2)
	if msgs := k.messages(sessionID, 1); len(msgs) == 1 {
		if p := toolPart(msgs[0]); p == nil || p.State.Status != opencode.ToolError || p.State.Error != "Tool execution aborted" {
			k.errorf("tool part after Abort = %+v, want error \"Tool execution aborted\"", p)
		}
	}
}

// checkPermissionListed: Permissions of the default and of the project directory list the
// pending request.
func checkPermissionListed(k *checker, pc permissionClient, sessionID string, asked opencode.Permission) {
	for _, dir := range []string{"", k.h.Directory} {
		list, err := pc.Permissions(k.ctx, dir)
		if k.ok(err, "Permissions") && !slices.ContainsFunc(list, func(p opencode.Permission) bool {
			return p.ID == asked.ID && p.SessionID == sessionID && slices.Equal(p.Patterns, asked.Patterns)
		}) {
			k.errorf("Permissions(%q) = %+v, want the pending request %s", dir, list, asked.ID)
		}
	}
}

// checkRejectionEvents: after the rejection, permission.replied comes before the tool
// part's update with status error.
func checkRejectionEvents(k *checker, events *eventReader, sessionID string) {
	evs := events.idles(sessionID, 1)
	replied := indexOf(evs, 0, isType(opencode.EventPermissionReplied))
	toolErr := indexOf(evs, 0, func(e sessionEv) bool {
		return e.Type == opencode.EventMessagePartUpdate && e.p.Part != nil && e.p.Part.State != nil && e.p.Part.State.Status == opencode.ToolError
	})
	if replied < 0 || toolErr < replied {
		k.errorf("events after the reply %s: want permission.replied, then the tool part with status error", types(evs))
	}
}

// checkRejectionMessages: after the rejection the session holds the user message, the tool
// step whose part ended with the feedback, and the model's reply quoting it. It reports
// false when the messages are not those three.
func checkRejectionMessages(k *checker, sessionID string) bool {
	msgs := k.messages(sessionID, 0)
	if len(msgs) != 3 {
		k.errorf("messages = %d, want user, tool step, reply", len(msgs))
		return false
	}
	rejected := "The user rejected permission to use this specific tool call with the following feedback: conformance says no"
	if p := toolPart(msgs[1]); p == nil || p.State.Status != opencode.ToolError || p.State.Error != rejected {
		k.errorf("rejected tool part = %+v, want status error %q", p, rejected)
	}
	if reply := msgs[2]; reply.Info.Finish != "stop" || len(reply.Parts) < 2 || !strings.Contains(reply.Parts[len(reply.Parts)-2].Text, rejected) {
		k.errorf("reply after the rejection = %+v", msgs[2])
	}
	return true
}

func toolPart(m opencode.Message) *opencode.Part {
	for i := range m.Parts {
		if m.Parts[i].Type == opencode.PartTool {
			return &m.Parts[i]
		}
	}
	return nil
}

// checkPermissionRule: a session rule that allows external_directory lets the command run
// without asking; its tool part completes with the command's error output and exit code 1.
func checkPermissionRule(k *checker) {
	s := k.session(opencode.CreateSessionRequest{Title: "conformance permission rule", Permission: []opencode.PermissionRule{
		{Permission: "external_directory", Pattern: "*", Action: "allow"}}})
	if s == nil {
		return
	}
	m, err := k.c.Prompt(k.ctx, s.ID, opencode.PromptRequest{Parts: text("RUN:cat /no/such/conformance.txt")})
	if !k.ok(err, "Prompt") {
		return
	}
	want := "cat: /no/such/conformance.txt: No such file or directory\n"
	if m.Info.Finish != "stop" || len(m.Parts) < 2 || m.Parts[len(m.Parts)-2].Text != "Ran 1 command(s); last output: "+strings.TrimSpace(want) {
		k.errorf("reply = %+v, want the command's error output", m)
	}
	if msgs := k.messages(s.ID, 0); len(msgs) == 3 {
		p := toolPart(msgs[1])
		if p == nil {
			k.errorf("no tool part in %+v", msgs[1])
		} else if code, _ := p.State.ExitCode(); p.State.Status != opencode.ToolCompleted || p.State.Output != want || code != 1 {
			k.errorf("tool part = %+v, want completed with %q, exit 1", p, want)
		}
	} else {
		k.errorf("messages = %d, want 3", len(msgs))
	}
}
