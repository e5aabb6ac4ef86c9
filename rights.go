package asyncagents

import (
	"fmt"
	"strings"

	"github.com/asyncagents/asyncagents/opencode"
)

// A task never has more rights than its caller. OpenCode evaluates a tool call against the
// rules of the session's agent, then the session's own rules: the last rule that matches the
// permission (a tool or permission name) and the pattern (what the call touches) wins. So a
// task session is created with the caller's restrictions as session rules, which come after
// its agent's and win over them:
//
//   - every deny rule of the caller's agent that a later rule of that agent does not undo for
//     the same permission and pattern (plan mode's edit ban, its task denies);
//   - every deny rule of the caller's session, and its external_directory rules (what
//     OpenCode's own task tool passes to its subagents);
//   - at the deepest nesting level, a deny of the launch tools of every asyncagents bridge
//     ("*_task", whatever its prefix, and all of this Manager's "<prefix>_*") and of
//     OpenCode's own task tool, so that no session under it starts more sessions (a native
//     fork is still shown them, its caller's tools, and its calls are refused).
//
// A launch is allowed as OpenCode's task tool allows one: the task permission, with the
// agent's name as the pattern, evaluated against the caller's agent's rules and then the
// caller's session's, must not be deny or ask. A primary agent (build, plan) is not a
// subagent: a task may run one only when it is the caller's own agent.

// Rule actions.
const (
	ruleAllow = "allow"
	ruleDeny  = "deny"
	ruleAsk   = "ask"
)

// evaluate returns the action of the last rule of rulesets, in order, that matches permission
// perm and pattern pat (OpenCode's Permission.evaluate), or "" when none matches.
func evaluate(perm, pat string, rulesets ...[]opencode.PermissionRule) string {
	action := ""
	for _, rules := range rulesets {
		for _, r := range rules {
			if wildcard(perm, r.Permission) && wildcard(pat, r.Pattern) {
				action = r.Action
			}
		}
	}
	return action
}

// wildcard reports whether s matches OpenCode's wildcard pattern p: "*" matches any run of
// characters ("/" and "_" included), "?" any one, the whole of s must match, and a trailing
// " *" may match nothing.
func wildcard(s, p string) bool {
	if rest, ok := strings.CutSuffix(p, " *"); ok && glob(s, rest) {
		return true
	}
	return glob(s, p)
}

// glob matches s against p with "*" and "?", by runes.
func glob(s, p string) bool {
	sr, pr := []rune(s), []rune(p)
	i, j, star, mark := 0, 0, -1, 0
	for i < len(sr) {
		switch {
		case j < len(pr) && (pr[j] == '?' || pr[j] == sr[i]):
			i++
			j++
		case j < len(pr) && pr[j] == '*':
			star, mark = j, i
			j++
		case star >= 0:
			mark++
			i, j = mark, star+1
		default:
			return false
		}
	}
	for j < len(pr) && pr[j] == '*' {
		j++
	}
	return j == len(pr)
}

// checkTaskAgent returns an error matching ErrPermissionDenied when a caller running agent
// callerAgent (nil when the caller did not say, or the server does not know it) in a session
// with rules sessionRules may not launch a task that runs agent.
func checkTaskAgent(callerAgent *opencode.Agent, sessionRules []opencode.PermissionRule, agent opencode.Agent) error {
	var agentRules []opencode.PermissionRule
	caller := ""
	if callerAgent != nil {
		agentRules, caller = callerAgent.Permission, callerAgent.Name
	}
	if agent.Mode == "primary" && agent.Name != caller {
		return fmt.Errorf("%w: %s is a primary agent, not a subagent; a task may run a subagent (such as general or explore) or the caller's own agent", ErrPermissionDenied, echo(agent.Name))
	}
	switch evaluate("task", agent.Name, agentRules, sessionRules) {
	case ruleDeny, ruleAsk:
		return fmt.Errorf("%w: the caller's permission rules do not allow the task tool for agent %s", ErrPermissionDenied, echo(agent.Name))
	}
	return nil
}

// inheritedRules returns the rules a task session gets from its caller: the deny rules of
// the caller's agent (agentRules) that a later rule of it does not undo for the same
// permission and pattern, then the deny and external_directory rules of the caller's session
// (sessionRules).
func inheritedRules(agentRules, sessionRules []opencode.PermissionRule) []opencode.PermissionRule {
	var out []opencode.PermissionRule
	for i, r := range agentRules {
		if r.Action != ruleDeny {
			continue
		}
		undone := false
		for _, later := range agentRules[i+1:] {
			undone = undone || later.Permission == r.Permission && later.Pattern == r.Pattern && later.Action != ruleDeny
		}
		if !undone {
			out = append(out, r)
		}
	}
	for _, r := range sessionRules {
		if r.Action == ruleDeny || r.Permission == "external_directory" {
			out = append(out, r)
		}
	}
	return out
}

// deepestRules deny, at the deepest nesting level, the launch tools of every bridge and
// OpenCode's own task tool; prefix is this Manager's tool prefix. With hide, the model is not
// shown the tools (OpenCode hides a tool whose last rule by name is a deny of pattern "*");
// without, it is shown them and its calls are refused ("?*" matches every call), which keeps
// the tool list of a native fork its caller's, and so the prompt cache.
func deepestRules(prefix string, hide bool) []opencode.PermissionRule {
	pat := "*"
	if !hide {
		pat = "?*"
	}
	return []opencode.PermissionRule{
		{Permission: prefix + "_*", Pattern: pat, Action: ruleDeny},
		{Permission: "*_task", Pattern: pat, Action: ruleDeny},
		{Permission: "task", Pattern: pat, Action: ruleDeny},
	}
}
