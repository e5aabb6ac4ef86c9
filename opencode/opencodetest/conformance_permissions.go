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

func checkPermission(k *checker) {
	events := k.subscribe()
	s := k.session(opencode.CreateSessionRequest{Title: "conformance permission"})
	if s == nil || events == nil {
		return
	}
	if !k.ok(k.c.PromptAsync(k.ctx, s.ID, opencode.PromptRequest{Parts: text("RUN:cat /no/such/conformance.txt")}), "PromptAsync") {
		return
	}
	evs := events.until(s.ID, "permission.asked", isType(opencode.EventPermissionAsked))
	if len(evs) == 0 || evs[len(evs)-1].Type != opencode.EventPermissionAsked {
		return
	}
	var asked opencode.Permission
	if err := decodeJSON(evs[len(evs)-1].Properties, &asked); err != nil || !strings.HasPrefix(asked.ID, "per_") ||
		asked.Permission != "external_directory" || !slices.Equal(asked.Patterns, []string{"/no/such/*"}) ||
		asked.Tool == nil || asked.Tool.CallID == "" {
		k.errorf("permission.asked = %+v (%v), want external_directory for /no/such/*", asked, err)
	}
	if st, err := k.c.SessionStatus(k.ctx, ""); k.ok(err, "SessionStatus") && st[s.ID].Type != "busy" {
		k.errorf("status while asking = %v, want busy", st[s.ID])
	}
	if msgs := k.messages(s.ID, 1); len(msgs) == 1 {
		if p := toolPart(msgs[0]); p == nil || p.State.Status != opencode.ToolRunning {
			k.errorf("tool part while asking = %+v, want running", p)
		}
	}
	pc, ok := k.c.(permissionClient)
	if !ok {
		if k.ok(k.c.Abort(k.ctx, s.ID), "Abort") {
			events.idles(s.ID, 2)
			if msgs := k.messages(s.ID, 1); len(msgs) == 1 {
				if p := toolPart(msgs[0]); p == nil || p.State.Status != opencode.ToolError || p.State.Error != "Tool execution aborted" {
					k.errorf("tool part after Abort = %+v, want error \"Tool execution aborted\"", p)
				}
			}
		}
		return
	}
	for _, dir := range []string{"", k.h.Directory} {
		list, err := pc.Permissions(k.ctx, dir)
		if k.ok(err, "Permissions") && !slices.ContainsFunc(list, func(p opencode.Permission) bool {
			return p.ID == asked.ID && p.SessionID == s.ID && slices.Equal(p.Patterns, asked.Patterns)
		}) {
			k.errorf("Permissions(%q) = %+v, want the pending request %s", dir, list, asked.ID)
		}
	}
	reject := opencode.PermissionReply{Reply: opencode.ReplyReject, Message: "conformance says no"}
	if !k.ok(pc.ReplyPermission(k.ctx, "", asked.ID, reject), "ReplyPermission") {
		return
	}
	evs = events.idles(s.ID, 1)
	replied := indexOf(evs, 0, isType(opencode.EventPermissionReplied))
	toolErr := indexOf(evs, 0, func(e sessionEv) bool {
		return e.Type == opencode.EventMessagePartUpdate && e.p.Part != nil && e.p.Part.State != nil && e.p.Part.State.Status == opencode.ToolError
	})
	if replied < 0 || toolErr < replied {
		k.errorf("events after the reply %s: want permission.replied, then the tool part with status error", types(evs))
	}
	msgs := k.messages(s.ID, 0)
	if len(msgs) != 3 {
		k.errorf("messages = %d, want user, tool step, reply", len(msgs))
		return
	}
	rejected := "The user rejected permission to use this specific tool call with the following feedback: conformance says no"
	if p := toolPart(msgs[1]); p == nil || p.State.Status != opencode.ToolError || p.State.Error != rejected {
		k.errorf("rejected tool part = %+v, want status error %q", p, rejected)
	}
	if reply := msgs[2]; reply.Info.Finish != "stop" || len(reply.Parts) < 2 || !strings.Contains(reply.Parts[len(reply.Parts)-2].Text, rejected) {
		k.errorf("reply after the rejection = %+v", msgs[2])
	}
	if err := pc.ReplyPermission(k.ctx, "", asked.ID, reject); !errors.Is(err, opencode.ErrNotFound) {
		k.errorf("second reply = %v, want ErrNotFound", err)
	}
}

func toolPart(m opencode.Message) *opencode.Part {
	for i := range m.Parts {
		if m.Parts[i].Type == opencode.PartTool {
			return &m.Parts[i]
		}
	}
	return nil
}

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
		code, _ := p.State.ExitCode()
		if p == nil || p.State.Status != opencode.ToolCompleted || p.State.Output != want || code != 1 {
			k.errorf("tool part = %+v, want completed with %q, exit 1", p, want)
		}
	} else {
		k.errorf("messages = %d, want 3", len(msgs))
	}
}
