package asyncagents

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/asyncagents/asyncagents/opencode"
)

// OpenCode's wildcards: "*" matches any run (with "/" and "_"), "?" one character, the whole
// string must match, and a trailing " *" may match nothing.
func TestWildcard(t *testing.T) {
	for _, c := range []struct {
		s, p string
		want bool
	}{
		{"asyncagents_task", "asyncagents_*", true},
		{"ha_task", "*_task", true},
		{"task", "*_task", false},
		{"/etc/hosts", "/etc/*", true},
		{"git status", "git status *", true},
		{"git statusx", "git status *", false},
		{"general", "?*", true},
		{"*", "?*", true},
		{"", "?*", false},
		{"é", "?", true},
		{"edit", "edit", true},
		{"editor", "edit", false},
	} {
		if got := wildcard(c.s, c.p); got != c.want {
			t.Errorf("wildcard(%q, %q) = %v", c.s, c.p, got)
		}
	}
}

// The last matching rule wins, across rulesets in order; no match is "".
func TestEvaluate(t *testing.T) {
	agent := []opencode.PermissionRule{{Permission: "*", Pattern: "*", Action: "allow"}, {Permission: "task", Pattern: "general", Action: "deny"}}
	session := []opencode.PermissionRule{{Permission: "task", Pattern: "explore", Action: "ask"}}
	for pat, want := range map[string]string{"general": "deny", "explore": "ask", "build": "allow"} {
		if got := evaluate("task", pat, agent, session); got != want {
			t.Errorf("task %s = %q, want %q", pat, got, want)
		}
	}
	if got := evaluate("task", "x"); got != "" {
		t.Errorf("no rules: %q", got)
	}
}

var planAgent = opencode.Agent{Name: "plan", Mode: "primary", Permission: []opencode.PermissionRule{
	{Permission: "*", Pattern: "*", Action: "allow"},
	{Permission: "question", Pattern: "*", Action: "deny"},
	{Permission: "question", Pattern: "*", Action: "allow"},
	{Permission: "task", Pattern: "general", Action: "deny"},
	{Permission: "edit", Pattern: "*", Action: "deny"},
	{Permission: "edit", Pattern: ".opencode/plans/*.md", Action: "allow"},
}}

// A caller may launch a subagent its rules allow the task tool for, or its own primary agent;
// nothing else.
func TestCheckTaskAgent(t *testing.T) {
	build := opencode.Agent{Name: "build", Mode: "primary"}
	general := opencode.Agent{Name: "general", Mode: "subagent"}
	explore := opencode.Agent{Name: "explore", Mode: "subagent"}
	denyExplore := []opencode.PermissionRule{{Permission: "task", Pattern: "explore", Action: "deny"}}
	for _, c := range []struct {
		caller  *opencode.Agent
		session []opencode.PermissionRule
		agent   opencode.Agent
		ok      bool
	}{
		{&planAgent, nil, build, false},
		{&planAgent, nil, general, false},
		{&planAgent, nil, explore, true},
		{&planAgent, denyExplore, explore, false},
		{&build, nil, build, true},
		{nil, nil, build, false},
		{nil, nil, general, true},
		{&planAgent, nil, planAgent, true},
	} {
		err := checkTaskAgent(c.caller, c.session, c.agent)
		if ok := err == nil; ok != c.ok || !ok && !errors.Is(err, ErrPermissionDenied) {
			name := ""
			if c.caller != nil {
				name = c.caller.Name
			}
			t.Errorf("%s launching %s (session %v): %v", name, c.agent.Name, c.session, err)
		}
	}
}

// A task inherits the caller's agent's denies that the agent does not undo, and the caller's
// session's denies and external_directory rules; never an allow of the agent.
func TestInheritedRules(t *testing.T) {
	session := []opencode.PermissionRule{
		{Permission: "bash", Pattern: "*", Action: "deny"},
		{Permission: "webfetch", Pattern: "*", Action: "allow"},
		{Permission: "external_directory", Pattern: "/ext/*", Action: "allow"},
	}
	want := []opencode.PermissionRule{
		{Permission: "task", Pattern: "general", Action: "deny"},
		{Permission: "edit", Pattern: "*", Action: "deny"},
		{Permission: "bash", Pattern: "*", Action: "deny"},
		{Permission: "external_directory", Pattern: "/ext/*", Action: "allow"},
	}
	if diff := cmp.Diff(want, inheritedRules(planAgent.Permission, session)); diff != "" {
		t.Errorf("inherited rules (-want +got):\n%s", diff)
	}
}
