package asyncagents_test

import (
	"cmp"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/asyncagentstest"
	"github.com/asyncagents/asyncagents/opencode"
)

// A task never has more rights than its caller (issue 35, case 1), on the real server: a
// caller in plan mode may not launch a build task (a primary agent other than its own) nor a
// general one (plan's rules deny the task tool for general), and may launch explore; the
// tools' handler says so in a text the model reads.
func TestPlanModeCannotLaunchMoreThanItMay(t *testing.T) {
	srv := shared.Get(t)
	c := srv.Client()
	m := asyncagentstest.NewManager(t, c, asyncagents.WithNotifications(false))
	parent := asyncagentstest.NewParent(t, c)
	parent.Agent = "plan"
	ctx := ctxT(t, 60*time.Second)
	for _, agent := range []string{"build", "general"} {
		_, err := m.Launch(ctx, asyncagents.LaunchInput{Caller: parent, Description: "escape", Agent: agent, Prompt: "RUN:echo hi"})
		if !errors.Is(err, asyncagents.ErrPermissionDenied) {
			t.Errorf("plan launching %s: %v, want ErrPermissionDenied", agent, err)
		}
	}
	if list, _ := m.List(parent, ""); len(list) != 0 {
		t.Errorf("refused launches left %d tasks", len(list))
	}
	text, err := asyncagents.Tools(m)[0].Handler(ctx, parent, []byte(`{"description":"escape","agent":"build","prompt":"RUN:echo hi"}`))
	if !errors.Is(err, asyncagents.ErrPermissionDenied) || !strings.Contains(err.Error()+text, "primary agent") {
		t.Errorf("the task tool for build from plan: %q, %v", text, err)
	}
	task, err := m.Launch(ctx, asyncagents.LaunchInput{Caller: parent, Description: "look", Agent: "explore", Prompt: "RUN:echo looked"})
	if err != nil {
		t.Fatalf("plan launching explore: %v", err)
	}
	asyncagentstest.Await(t, m, parent, task.ID)
}

// A caller session's deny rules reach its tasks (issue 35, case 1), on the real server: a
// task of a session whose rules deny bash cannot run bash, and its session has the rule; so
// does a native fork of the session (OpenCode's copy, which gets the rules afterwards).
func TestSessionDenyRulesReachTasks(t *testing.T) {
	srv := shared.Get(t)
	c := srv.Client()
	m := asyncagentstest.NewManager(t, c, asyncagents.WithNotifications(false))
	for _, mode := range []asyncagents.ForkMode{"", asyncagents.ForkNative} {
		t.Run(cmp.Or(string(mode), "fresh"), func(t *testing.T) {
			ctx := ctxT(t, 90*time.Second)
			sess, err := c.CreateSession(ctx, opencode.CreateSessionRequest{Title: "no bash",
				Permission: []opencode.PermissionRule{{Permission: "bash", Pattern: "*", Action: "deny"}}})
			if err != nil {
				t.Fatal(err)
			}
			parent := asyncagents.Caller{SessionID: sess.ID, Agent: "build"}
			marker := "rights-marker-" + strings.TrimPrefix(sess.ID, "ses_")
			task, err := m.Launch(ctx, asyncagents.LaunchInput{Caller: parent, Description: "try bash", Agent: "general",
				Prompt: "RUN:touch " + marker, Fork: mode != "", ForkMode: mode})
			if err != nil {
				t.Fatal(err)
			}
			task = asyncagentstest.Started(t, m, task)
			if task.ForkMode != mode {
				t.Fatalf("launched with fork mode %q, want %q", task.ForkMode, mode)
			}
			done := asyncagentstest.Await(t, m, parent, task.ID)
			if _, err := os.Stat(filepath.Join(sess.Directory, marker)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the task ran bash its caller may not (%s: %v); it ended %s %q %q", marker, err, done.Status, done.Result, done.Error)
			}
			child, err := c.GetSession(ctx, task.SessionID)
			if err != nil || !denies(child.Permission, "bash") {
				t.Errorf("the task's session rules %+v (%v) do not deny bash", child.Permission, err)
			}
		})
	}
}

// denies reports whether rules hold a deny of permission with pattern "*".
func denies(rules []opencode.PermissionRule, permission string) bool {
	for _, r := range rules {
		if r.Permission == permission && r.Pattern == "*" && r.Action == "deny" {
			return true
		}
	}
	return false
}

// Depth, caps and budgets follow the real session tree (issue 35, case 2), on the real
// server: a session the Manager does not know, under a task at the deepest level (as OpenCode's
// own task tool makes under a native fork), may not launch; a native fork at the deepest level
// has OpenCode's task tool and the launch tools denied; a session under a parent that is at
// its per-parent cap, or over its tree budget, may not launch either.
func TestLimitsFollowTheSessionTree(t *testing.T) {
	srv := shared.Get(t)
	c := srv.Client()
	ctx := ctxT(t, 120*time.Second)
	m := asyncagentstest.NewManager(t, c, asyncagents.WithNotifications(false), asyncagents.WithMaxActivePerParent(1))
	parent := asyncagentstest.NewParent(t, c)
	fork, err := m.Launch(ctx, asyncagents.LaunchInput{Caller: parent, Description: "fork", Agent: "build", Prompt: "SLEEP:5",
		Fork: true, ForkMode: asyncagents.ForkNative})
	if err != nil {
		t.Fatal(err)
	}
	fork = asyncagentstest.Started(t, m, fork)
	if fork.ForkMode != asyncagents.ForkNative {
		t.Fatalf("fork mode %q, want native", fork.ForkMode)
	}
	forked, err := c.GetSession(ctx, fork.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"task", "asyncagents_*", "*_task"} {
		if !slicesContainsRule(forked.Permission, tool) {
			t.Errorf("the native fork's rules %+v do not deny %s", forked.Permission, tool)
		}
	}
	sub := childSession(t, c, fork.SessionID) // what OpenCode's task tool would make in the fork
	_, err = m.Launch(ctx, asyncagents.LaunchInput{Caller: asyncagents.Caller{SessionID: sub.ID, Agent: "general"},
		Description: "nested", Agent: "general", Prompt: "RUN:echo nested"})
	if !errors.Is(err, asyncagents.ErrNestingDepth) {
		t.Errorf("a session under a task at the deepest level launched: %v, want ErrNestingDepth", err)
	}
	sibling := childSession(t, c, parent.SessionID) // an OpenCode subagent of the parent
	_, err = m.Launch(ctx, asyncagents.LaunchInput{Caller: asyncagents.Caller{SessionID: sibling.ID, Agent: "general"},
		Description: "second", Agent: "general", Prompt: "RUN:echo second"})
	if !errors.Is(err, asyncagents.ErrTaskLimit) {
		t.Errorf("a session under a parent at its cap launched: %v, want ErrTaskLimit", err)
	}
}

// A session under a parent over its tree budget may not launch (issue 35, case 2).
func TestTreeBudgetHoldsUnderOpenCodesSubagents(t *testing.T) {
	srv := shared.Get(t)
	c := srv.Client()
	ctx := ctxT(t, 90*time.Second)
	m := asyncagentstest.NewManager(t, c, asyncagents.WithNotifications(false), asyncagents.WithTreeBudget(asyncagents.Budget{Tokens: 1}))
	parent := asyncagentstest.NewParent(t, c)
	asyncagentstest.Await(t, m, parent, asyncagentstest.Launch(t, m, parent, "RUN:echo spent").ID)
	if _, err := m.Launch(ctx, asyncagents.LaunchInput{Caller: parent, Description: "more", Agent: "general", Prompt: "x"}); !errors.Is(err, asyncagents.ErrBudget) {
		t.Fatalf("the parent over its budget launched: %v", err)
	}
	sub := childSession(t, c, parent.SessionID)
	_, err := m.Launch(ctx, asyncagents.LaunchInput{Caller: asyncagents.Caller{SessionID: sub.ID, Agent: "general"},
		Description: "around", Agent: "general", Prompt: "x"})
	if !errors.Is(err, asyncagents.ErrBudget) {
		t.Errorf("a session under a parent over its budget launched: %v, want ErrBudget", err)
	}
}

// childSession creates a session with parentID parent, as OpenCode's task tool does.
func childSession(t *testing.T, c opencode.Client, parent string) *opencode.Session {
	t.Helper()
	s, err := c.CreateSession(context.Background(), opencode.CreateSessionRequest{ParentID: parent, Title: "subagent"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// slicesContainsRule reports whether rules hold a deny of permission.
func slicesContainsRule(rules []opencode.PermissionRule, permission string) bool {
	for _, r := range rules {
		if r.Permission == permission && r.Action == "deny" {
			return true
		}
	}
	return false
}
