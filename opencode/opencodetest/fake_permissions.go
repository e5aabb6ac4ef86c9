package opencodetest

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/asyncagents/asyncagents/opencode"
)

// Permissions lists the pending permission requests of a directory's sessions (the fake's
// directory for ""), oldest first, as GET /permission does.
func (f *FakeClient) Permissions(ctx context.Context, directory string) ([]opencode.Permission, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter(ctx, "Permissions", http.MethodGet, "/permission"); err != nil {
		return nil, err
	}
	out := []opencode.Permission{}
	for _, p := range f.permissions {
		if f.dirOf(p.SessionID) == cmp.Or(directory, f.cfg.dir) {
			out = append(out, p.permission())
		}
	}
	return out, nil
}

// ReplyPermission answers a pending permission request, as POST /permission/{id}/reply does,
// and emits permission.replied: "once" or "always" runs the tool call ("always" also allows
// the request's patterns for the rest of the session), "reject" ends it with status "error"
// and, without a Message, stops the run. A request that is not pending, or a directory other
// than its session's (the fake's directory for ""), fails with an error matching
// [opencode.ErrNotFound]; a reply other than once, always or reject fails with HTTP 400.
func (f *FakeClient) ReplyPermission(ctx context.Context, directory, requestID string, reply opencode.PermissionReply) error {
	path := "/permission/" + url.PathEscape(requestID) + "/reply"
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter(ctx, "ReplyPermission", http.MethodPost, path); err != nil {
		return err
	}
	switch reply.Reply {
	case opencode.ReplyOnce, opencode.ReplyAlways, opencode.ReplyReject:
	default:
		return badRequest(http.MethodPost, path, fmt.Sprintf("Expected \"once\" | \"always\" | \"reject\", got %q\n  at [\"reply\"]", reply.Reply))
	}
	i := slices.IndexFunc(f.permissions, func(p *fakePermission) bool { return p.ID == requestID })
	if i < 0 || f.dirOf(f.permissions[i].SessionID) != cmp.Or(directory, f.cfg.dir) {
		return apiError(http.MethodPost, path, http.StatusNotFound, map[string]any{
			"_tag": "PermissionNotFoundError", "requestID": requestID,
			"message": "Permission request not found: " + requestID})
	}
	p := f.permissions[i]
	f.permissions = slices.Delete(f.permissions, i, i+1)
	f.emit(opencode.EventPermissionReplied, map[string]any{"sessionID": p.SessionID, "requestID": p.ID, "reply": reply.Reply})
	if r := p.run; r != nil && !r.aborted && r.perm == p {
		r.permReply = &reply
		r.notify()
	}
	return nil
}

// permit decides a call that needs res.Permission by the session's rules: a denied call
// gets the rule's error as its result; an asked one waits for the reply, and "always" adds
// the call's patterns to the session's rules, a rejection with feedback makes the feedback
// its error, a rejection without ends the part with an error and halts the loop. It returns
// the result to go on with and turnDone, or turnHalted, or turnStopped when the run was
// stopped while it waited.
func (f *FakeClient) permit(r *fakeRun, p *partJSON, call ToolCall, res ToolResult) (ToolResult, turnEnd) {
	s := r.s
	switch f.evaluate(s, res.Permission, res.Patterns) {
	case "deny":
		return ToolResult{Error: "The user has specified a rule which prevents you from using this specific tool call. " +
			"Here are some of the relevant rules " + f.relevantRules(s, res.Permission)}, turnDone
	case "ask":
		reply, ok := f.ask(r, p, call, res)
		if !ok {
			return res, turnStopped
		}
		switch {
		case reply.Reply == opencode.ReplyAlways:
			for _, pat := range res.Patterns {
				s.always = append(s.always, opencode.PermissionRule{Permission: res.Permission, Pattern: pat, Action: "allow"})
			}
		case reply.Reply == opencode.ReplyReject && reply.Message != "":
			return ToolResult{Error: "The user rejected permission to use this specific tool call with the following feedback: " + reply.Message}, turnDone
		case reply.Reply == opencode.ReplyReject:
			f.toolError(r, p, "The user rejected permission to use this specific tool call.")
			return res, turnHalted
		}
	}
	return res, turnDone
}

// ask emits permission.asked for the call and waits for the reply.
func (f *FakeClient) ask(r *fakeRun, p *partJSON, call ToolCall, res ToolResult) (opencode.PermissionReply, bool) {
	meta := map[string]any{}
	if res.Permission == "external_directory" {
		var in struct {
			Command string `json:"command"`
		}
		_ = json.Unmarshal(p.State.Input, &in)
		dirs := make([]string, len(res.Patterns))
		for i, pat := range res.Patterns {
			dirs[i] = strings.TrimSuffix(strings.TrimSuffix(pat, "*"), "/")
			if dirs[i] == "" {
				dirs[i] = "/"
			}
		}
		meta = map[string]any{"command": in.Command, "directories": dirs, "patterns": res.Patterns}
	}
	perm := &fakePermission{ID: f.ids.next("per", false, f.now()), SessionID: r.s.info.ID, Permission: res.Permission,
		Patterns: slices.Clone(res.Patterns), Metadata: meta, Tool: opencode.PermissionTool{MessageID: r.asst.info.ID, CallID: call.ID}, run: r}
	f.permissions = append(f.permissions, perm)
	r.perm, r.permReply = perm, nil
	f.emit(opencode.EventPermissionAsked, perm.json())
	for r.permReply == nil {
		if !f.wait(r, r.wake, 0) {
			return opencode.PermissionReply{}, false
		}
	}
	reply := *r.permReply
	r.perm, r.permReply, perm.run = nil, nil, nil
	return reply, true
}

// agentRules are the rules of the default agents that the fake evaluates.
var agentRules = []opencode.PermissionRule{
	{Permission: "*", Pattern: "*", Action: "allow"},
	{Permission: "external_directory", Pattern: "*", Action: "ask"},
}

// evaluate decides a permission as OpenCode does: for each pattern the last matching rule of
// the agent's, then the session's rules wins; any "deny" denies, any "ask" asks.
func (f *FakeClient) evaluate(s *fakeSession, permission string, patterns []string) string {
	rules := slices.Concat(agentRules, s.info.Permission, s.always)
	verdict := "allow"
	for _, pat := range patterns {
		action := "ask"
		for _, rule := range slices.Backward(rules) {
			if wildcard(rule.Permission, permission) && wildcard(rule.Pattern, pat) {
				action = rule.Action
				break
			}
		}
		switch {
		case action == "deny":
			return "deny"
		case action == "ask":
			verdict = "ask"
		}
	}
	return verdict
}

func (f *FakeClient) relevantRules(s *fakeSession, permission string) string {
	var rel []opencode.PermissionRule
	for _, rule := range slices.Concat(agentRules, s.info.Permission) {
		if wildcard(rule.Permission, permission) {
			rel = append(rel, rule)
		}
	}
	b, _ := json.Marshal(rel)
	return string(b)
}

// wildcard matches s against pattern, where * matches any run of characters (slashes too)
// and ? one character, as OpenCode's Wildcard.match.
func wildcard(pattern, s string) bool {
	var b strings.Builder
	b.WriteString("^")
	for _, r := range pattern {
		switch r {
		case '*':
			b.WriteString(".*")
		case '?':
			b.WriteString(".")
		default:
			b.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	b.WriteString("$")
	ok, _ := regexp.MatchString(b.String(), s)
	return ok
}
