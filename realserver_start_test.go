package asyncagents_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/asyncagentstest"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// Issue 34, item 1: "Launch (and the task tool) returns the task as soon as it is recorded;
// reading the parent, the pipeline, OpenCode's fork, the injected context and the prompt are
// done by the Manager after it. [...] A failure in that work ends the task in error with its
// reason and exactly one notification; Output of a task still starting says so."
//
// On the real server, behind a proxy: a native fork whose POST /session/{id}/fork is held for
// seconds is answered by Launch (and by the task tool) at once, shown starting by the output
// tool, and completes once the fork is let through; a parent's launches start in launch
// order; a fork the server refuses ends its task in error, with its reason, and one
// notification.
func TestRealServerLaunchAnswersBeforeItsStart(t *testing.T) {
	srv := shared.Get(t)
	proxy, c := proxied(t, srv)
	ctx := ctxT(t, 90*time.Second)
	m := asyncagentstest.NewManager(t, c, asyncagents.WithPollInterval(200*time.Millisecond),
		asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply))
	ps, _ := parentWithWork(t, c)
	parent := asyncagents.Caller{SessionID: ps.ID, Agent: "build"}
	tools := map[string]asyncagents.Tool{}
	for _, tool := range asyncagents.Tools(m) {
		tools[tool.Name] = tool
	}

	const hold = 4 * time.Second
	held := proxy.Inject(opencodetest.Fault{Pattern: "POST /session/{id}/fork", Delay: hold, Times: 1})
	start := time.Now()
	reply, err := tools["asyncagents_task"].Handler(ctx, parent, []byte(
		`{"description":"native","agent":"build","prompt":"RUN:echo forked-ok","fork":true,"fork_mode":"native"}`))
	answered := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if answered > hold/2 {
		t.Errorf("the task tool answered after %v, with the fork held %v", answered, hold)
	}
	id := taskIDs.FindString(reply)
	if !strings.Contains(reply, "Background task launched") || id == "" {
		t.Fatalf("task tool reply %q", reply)
	}
	// A plain launch of the same parent starts after the fork: launch order.
	plain, err := m.Launch(ctx, asyncagents.LaunchInput{Caller: parent, Description: "plain", Agent: "general", Prompt: "RUN:echo plain-ok"})
	if err != nil {
		t.Fatal(err)
	}
	out, err := tools["asyncagents_output"].Handler(ctx, parent, []byte(`{"task_id":"`+id+`"}`))
	if err != nil || !strings.Contains(out, "Starting") {
		t.Errorf("output of a task still starting = %q, %v; want it to say Starting", out, err)
	}
	if tk, _ := m.Get(plain.ID); !tk.Starting {
		t.Errorf("the plain task launched after the held fork started before it: %+v", tk)
	}
	forked := asyncagentstest.Await(t, m, parent, id)
	if forked.Status != asyncagents.StatusCompleted || forked.ForkMode != asyncagents.ForkNative || held.Hits() != 1 {
		t.Fatalf("the native fork: %s mode %q %q (fork held %d times)", forked.Status, forked.ForkMode, forked.Error, held.Hits())
	}
	if got := asyncagentstest.Await(t, m, parent, plain.ID); got.Status != asyncagents.StatusCompleted {
		t.Errorf("the plain task: %s %q", got.Status, got.Error)
	}

	// A fork the server refuses: the task ends in error, its parent is told once.
	proxy.Inject(opencodetest.Fault{Pattern: "POST /session/{id}/fork", Status: http.StatusInternalServerError, Times: 1})
	refused, err := m.Launch(ctx, asyncagents.LaunchInput{Caller: parent, Description: "refused", Agent: "build",
		Prompt: "RUN:echo never", Fork: true, ForkMode: asyncagents.ForkNative})
	if err != nil {
		t.Fatalf("Launch answered %v; a failure of the start is the task's", err)
	}
	got := asyncagentstest.Await(t, m, parent, refused.ID)
	if got.Status != asyncagents.StatusError || !strings.Contains(got.Error, "fork") || got.SessionID != "" {
		t.Errorf("the task whose fork was refused: %s %q, session %q", got.Status, got.Error, got.SessionID)
	}
	asyncagentstest.AwaitTask(t, m, refused.ID, asyncagentstest.Delivered)
	settle(t, m, c, "", map[string]int{parent.SessionID: 3})
	notes := asyncagentstest.Notifications(t, c, parent.SessionID)
	if n := len(slices.DeleteFunc(slices.Clone(notes), func(s string) bool { return !strings.Contains(s, "refused") })); n != 1 {
		t.Errorf("notifications of the refused task: %d, want 1: %q", n, notes)
	}
}
