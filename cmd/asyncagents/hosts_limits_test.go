//go:build unix

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
	"github.com/asyncagents/asyncagents/pgstore/pgstoretest"
)

// Tests of issue 35's cases 10 to 12 with serves as processes of their own, on PostgreSQL
// and the real OpenCode server: what the serves' tools answer a parent's model, and what
// the database holds, when one serve is paused past its lease, cut from the database or
// killed, and when several serves launch for one parent at once.

// Issue 35, case 10: "Slots are not fenced. Within 10 ms of SIGCONT, a serve paused longer
// than its lease re-inserts and grants a row in asyncagents_slots for a queued task that the
// serve which claimed it had already run and finished. Nothing ever deletes that row, so
// -max-running shrinks by one for every serve, for good; its slot deletes are unfenced too."
// Deliver 10: "Every write to the shared store is fenced, slots included (a paused host
// changes nothing once its lease is gone)".
//
// Two serves with -max-running 2. Through h0 a parent launches four tasks: two run (held),
// two wait queued. h0 is paused with SIGSTOP past its lease; h1 claims the four, and once one
// run ends it runs and finishes the two queued ones. h0 is resumed with SIGCONT while the
// other held run goes on, held by h1. From then to the end, asyncagents_slots never has a row
// for a task that ended, and no more than 2 task sessions are ever busy at once (a slot of
// h1's running task deleted by h0 would let a third run). Four tasks launched through both
// serves then run 2 at once as soon as that run ends: the limit is not shrunk. Every task
// ends once, completed, and the parent holds one notification per task.
func TestPausedServeChangesNoSlotAfterItsLease(t *testing.T) {
	// Not parallel: three serves, PostgreSQL and OpenCode run before TestHostsShareTasksAndSurviveKill, not beside it.
	pg := pgstoretest.Start(t)
	db := pg.NewDatabase(t)
	states, plugins := hostStates(t, "h0", "h1")
	srv := opencodetest.Start(t, plugins)
	held := scriptHosts(t, srv)
	opts := []string{"-lease", "3s", "-notify", "none", "-max-running", "2"}
	paused := startHost(t, srv, states["h0"], db, "h0", opts...)
	t.Cleanup(func() { syscall.Kill(-paused.cmd.Process.Pid, syscall.SIGCONT) }) // before its SIGTERM
	startHost(t, srv, states["h1"], db, "h1", opts...)
	c := srv.Client()
	parent := newParent(t, c, "parent")
	most := sampleBusy(t, c, map[string]string{parent: parent})

	// Through h0, two at once: "long" and "short" run, then "queued 2" and "queued 3" wait.
	first := []string{`"long","prompt":"[[hold:long]] long"`, `"short","prompt":"[[hold:short]] short"`,
		`"queued 2","prompt":"queued 2"`, `"queued 3","prompt":"queued 3"`}
	launchEach(t, c, []string{parent}, len(first), []string{"h0", "h0"}, func(_, i int) string {
		return `{"agent":"general","description":` + first[i] + "}"
	})
	if !testmain.Eventually(10*time.Second, func() bool {
		st := statuses(t, db)
		return st["long"] == asyncagents.StatusRunning && st["short"] == asyncagents.StatusRunning &&
			st["queued 2"] == asyncagents.StatusQueued && st["queued 3"] == asyncagents.StatusQueued
	}) {
		t.Fatalf("after launching 4 tasks under a limit of 2: %v; want long and short running, queued 2 and 3 queued", statuses(t, db))
	}
	pid := paused.cmd.Process.Pid
	if err := syscall.Kill(-pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	if !testmain.Eventually(30*time.Second, func() bool { return heldActive(t, db, pid) == 0 }) {
		t.Fatalf("h1 did not claim the paused serve's tasks within %v", time.Since(stopped))
	}
	t.Logf("h1 claimed the paused serve's tasks %v after SIGSTOP", time.Since(stopped).Round(time.Millisecond))
	held.release("short")
	if !testmain.Eventually(30*time.Second, func() bool {
		done := 0
		for _, task := range storedTasks(t, db) {
			if task.Description != "long" && task.Status == asyncagents.StatusCompleted && len(task.Notifications) == 1 &&
				task.Notifications[0].State == asyncagents.NotificationDelivered {
				done++
			}
		}
		return done == 3
	}) {
		t.Fatalf("h1 did not finish short, queued 2 and queued 3 while h0 was paused: %v", statuses(t, db))
	}

	stale := sampleStaleSlots(t, db)
	if err := syscall.Kill(-pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	t.Logf("h0 resumed %v after SIGSTOP", time.Since(stopped).Round(time.Millisecond))
	// h0 and h1 launch four more; with "long" still running only one of them may run.
	launchEach(t, c, []string{parent}, 4, []string{"h0", "h1"}, func(_, i int) string {
		return fmt.Sprintf(`{"description":"after %d","agent":"general","prompt":"[[hold:after]] after %d"}`, i, i)
	})
	running := func() int { return countStatus(statuses(t, db), "after ", asyncagents.StatusRunning) }
	if !testmain.Eventually(10*time.Second, func() bool { return running() == 1 }) {
		t.Fatalf("%d of the tasks launched after the resume run while long runs; want 1 (limit 2): %v; rows of ended tasks seen in asyncagents_slots: %v",
			running(), statuses(t, db), stale())
	}
	held.release("long")
	if !testmain.Eventually(30*time.Second, func() bool { return running() == 2 }) {
		t.Fatalf("once long ended, %d of the tasks launched after the resume ran at once; want 2, the limit: %v; rows of ended tasks seen in asyncagents_slots: %v",
			running(), statuses(t, db), stale())
	}
	held.release("after")
	all := waitEnded(t, db, 8, 60*time.Second)
	checkNotifiedOnce(t, c, []string{parent}, all, 8)
	if rows := stale(); len(rows) > 0 {
		t.Errorf("after SIGCONT, asyncagents_slots held rows of tasks that had ended: %v", rows)
	}
	if n := slotRows(t, db); n != 0 {
		t.Errorf("asyncagents_slots holds %d rows once every task ended, want none", n)
	}
	if n := most(); n > 2 {
		t.Errorf("%d task sessions were busy at once, limit 2", n)
	}
	if t.Failed() {
		t.Logf("h0:\n%s", paused.out)
	}
}

// Issue 35, case 11: "A launch acknowledged during a database cut can be lost. A serve cut
// from PostgreSQL still answers a launch in 0.1–0.5 s ("launched… queued") … When the serve
// dies before the database comes back, the task is never stored or run, and the parent whose
// model was told it launched never hears of it again." Deliver 10: "a launch is acknowledged
// only once its task is stored — a host cut from its database refuses it with a text the
// model reads".
//
// h0 reaches PostgreSQL through a proxy, h1 directly. A parent's model launches a held task
// through h0. The proxy is cut: in one step, the model's launch through h0 is answered with
// an error text saying the task was not started, while its launch through h1 goes through.
// The database comes back and h0 launches again; it is cut a second time, refuses again, and
// is killed with SIGKILL before the database comes back. In the end the database holds
// exactly the tasks the model was told were launched, each completed (h0's by h1) with one
// notification; the parent's child sessions are exactly those tasks, none busy: a refused
// launch left no session behind.
func TestLaunchRefusedWhileServeIsCutFromTheDatabase(t *testing.T) {
	// Not parallel: see TestPausedServeChangesNoSlotAfterItsLease.
	_, db, proxy, srv, held, cut := cutHosts(t)
	c := srv.Client()
	parent := newParent(t, c, "parent")
	task := func(host, description string) opencodetest.ToolCall {
		return opencodetest.ToolCall{Name: host + "_task",
			Arguments: fmt.Sprintf(`{"description":%q,"agent":"general","prompt":"[[hold:run]] %s"}`, description, description)}
	}
	var told []string // the descriptions of the tasks the model was told were launched
	launched := func(part opencode.Part) bool {
		return part.State.Status == opencode.ToolCompleted && strings.Contains(part.State.Output, "Background task launched")
	}
	// refused has the model launch through h0 and h1 in one step, and checks that h0 refused.
	refused := func(round int) {
		t.Helper()
		children := childIDs(t, c, parent)
		parts := stepTools(t, c, parent, task("h0", fmt.Sprintf("cut %d", round)), task("h1", fmt.Sprintf("beside cut %d", round)))
		h0, h1 := parts[0], parts[1]
		text := h0.State.Output + h0.State.Error
		if launched(h0) || !strings.Contains(text, "not started") {
			t.Fatalf("cut %d: h0_task answered %s %q; want an error saying the task was not started", round, h0.State.Status, text)
		}
		if u, _ := url.Parse(db); strings.Contains(text, proxy.Addr()) || strings.Contains(text, u.Path[1:]) || strings.Contains(text, u.User.Username()) {
			t.Errorf("cut %d: h0_task's answer shows the model the database (%s at %s): %s", round, u.Redacted(), proxy.Addr(), text)
		}
		t.Logf("cut %d: h0_task answered the model (%s): %s", round, h0.State.Status, text)
		if !launched(h1) {
			t.Fatalf("cut %d: h1_task answered %s %q %q; want launched", round, h1.State.Status, h1.State.Output, h1.State.Error)
		}
		told = append(told, fmt.Sprintf("beside cut %d", round))
		if got := childIDs(t, c, parent); len(got) != len(children)+1 {
			t.Fatalf("cut %d: the parent has %d child sessions after the step, %d before; want one more (h1's task)", round, len(got), len(children))
		}
	}

	launchEach(t, c, []string{parent}, 1, []string{"h0"}, func(int, int) string {
		return `{"description":"before","agent":"general","prompt":"[[hold:run]] before"}`
	})
	told = append(told, "before")
	proxy.Cut()
	refused(1)
	proxy.Restore()
	back := time.Now()
	if !testmain.Eventually(30*time.Second, func() bool { // the first tries may still find the pool's connections cut
		part := stepTools(t, c, parent, task("h0", "restored"))[0]
		return launched(part)
	}) {
		t.Fatalf("h0 launched nothing within %v of the database's return", time.Since(back))
	}
	told = append(told, "restored")
	proxy.Cut()
	refused(2)
	dead := cut.cmd.Process.Pid
	cut.kill()
	proxy.Restore()
	killed := time.Now()
	if !testmain.Eventually(30*time.Second, func() bool { return heldActive(t, db, dead) == 0 }) {
		t.Fatalf("h1 did not claim the killed serve's tasks within %v", time.Since(killed))
	}
	held.release("run")
	all := waitEnded(t, db, len(told), 60*time.Second)
	var stored []string
	ids := map[string]bool{}
	for _, task := range all {
		stored = append(stored, task.Description)
		ids[task.SessionID] = true
	}
	slices.Sort(stored)
	slices.Sort(told)
	if !slices.Equal(stored, told) {
		t.Errorf("stored tasks %q; want exactly those the model was told were launched, %q", stored, told)
	}
	checkNotifiedOnce(t, c, []string{parent}, all, len(told))
	children := childIDs(t, c, parent)
	busy, err := c.SessionStatus(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range children {
		if !ids[id] {
			t.Errorf("the parent has a child session %s that is no stored task", id)
		}
		if _, ok := busy[id]; ok {
			t.Errorf("child session %s is still busy", id)
		}
	}
	if len(children) != len(ids) {
		t.Errorf("the parent has %d child sessions, want %d (its stored tasks)", len(children), len(ids))
	}
}

// Issue 35, case 12: "Task ids collide across serves. Each serve makes the ids it shows
// unique among its own tasks only, so one parent launching 18 tasks through three serves got
// ses_de44c24f for two different tasks; ha_output returned one, hc_output the other,
// hb_output 'not found'. _cancel resolves ids the same way: a model can cancel the wrong
// task." Deliver 10: "task ids are unique per parent across every host of a store, and every
// id lookup resolves the same task on every host."
//
// One parent's model launches 18 tasks through three serves, one through each at once in
// every step; once launched, most runs are short, three are held. The ids the task tools
// answered are all different. Given to every serve's output tool, each names the task it was
// answered for, the same on every serve; only an id shown while a task launched in the same
// step was not stored yet may start that task's id too, and then every serve says it is
// ambiguous and names both, never another task (T-1: "An ambiguous prefix is an error that
// names the candidates"). A held task cancelled through a serve that does not hold it is
// cancelled, and no other task. Every task ends once, with one notification.
func TestTaskIDsNameOneTaskOnEveryServe(t *testing.T) {
	// Not parallel: see TestPausedServeChangesNoSlotAfterItsLease.
	pg := pgstoretest.Start(t)
	db := pg.NewDatabase(t)
	prefixes := []string{"ha", "hb", "hc"}
	states, plugins := hostStates(t, prefixes...)
	srv := opencodetest.Start(t, plugins)
	held := scriptHosts(t, srv)
	pids := map[int]string{} // serve process → its prefix
	for _, prefix := range prefixes {
		h := startHost(t, srv, states[prefix], db, prefix, "-lease", "3s", "-notify", "none")
		pids[h.cmd.Process.Pid] = prefix
	}
	c := srv.Client()
	parent := newParent(t, c, "parent")
	const n = 18
	launchEach(t, c, []string{parent}, n, prefixes, func(_, i int) string {
		hold := "launch" // released once every task is launched
		if i%6 == 5 {    // tasks 5, 11 and 17: released at the end
			hold = "ids"
		}
		return fmt.Sprintf(`{"description":"task %d","agent":"general","prompt":"[[hold:%s]] task %d"}`, i, hold, i)
	})

	// The ids the model was answered, from its task tool calls.
	answered := map[string]string{} // display id → description
	var shown []string
	msgs, err := c.Messages(t.Context(), parent, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		for _, p := range m.Parts {
			if p.Type != opencode.PartTool || p.State == nil || !strings.HasSuffix(p.Tool, "_task") {
				continue
			}
			match := launchedRe.FindStringSubmatch(p.State.Output)
			if match == nil {
				t.Fatalf("%s answered %q", p.Tool, p.State.Output)
			}
			shown = append(shown, match[1])
			answered[match[1]] = match[2]
		}
	}
	if len(shown) != n || len(answered) != n {
		slices.Sort(shown)
		t.Fatalf("the task tools answered %d ids, %d different, for %d launches: %v", len(shown), len(answered), n, shown)
	}
	// The short runs end and are notified before the model's next steps.
	held.release("launch")
	if !testmain.Eventually(60*time.Second, func() bool {
		done := 0
		for _, task := range storedTasks(t, db) {
			if task.Status == asyncagents.StatusCompleted && len(task.Notifications) == 1 &&
				task.Notifications[0].State == asyncagents.NotificationDelivered {
				done++
			}
		}
		return done == n-3
	}) {
		t.Fatalf("the short runs did not all end and get notified: %v", statuses(t, db))
	}

	// Every serve's output tool gives, for each id, the same answer: the task it was answered
	// for, or, when it starts another task's id too, the same ambiguity naming both.
	full := map[string]string{} // description → task id
	for _, task := range storedTasks(t, db) {
		full[task.Description] = task.ID
	}
	ambiguous := map[string]bool{} // display ids
	for _, prefix := range prefixes {
		var calls []opencodetest.ToolCall
		for _, id := range shown {
			calls = append(calls, opencodetest.ToolCall{Name: prefix + "_output", Arguments: fmt.Sprintf(`{"task_id":%q}`, id)})
		}
		for i, part := range stepTools(t, c, parent, calls...) {
			id, description := shown[i], answered[shown[i]]
			text := part.State.Output + part.State.Error
			var others []string // the other tasks whose id starts with id
			for d, f := range full {
				if d != description && strings.HasPrefix(f, id) {
					others = append(others, f)
				}
			}
			m := descriptionRe.FindStringSubmatch(part.State.Output)
			switch {
			case part.State.Status == opencode.ToolCompleted && m != nil && m[1] == description && len(others) == 0:
			case part.State.Status == opencode.ToolError && strings.Contains(text, "ambiguous task id") && len(others) > 0 &&
				strings.Contains(text, full[description]) && strings.Contains(text, others[0]):
				ambiguous[id] = true
			default:
				t.Errorf("%s_output(%s), answered for %q (%s; other tasks starting with it: %v): %s %q",
					prefix, id, description, full[description], others, part.State.Status, text)
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	if len(ambiguous) > 0 {
		t.Logf("ids shown while a task launched at the same time was not stored yet, ambiguous on every serve: %v", slices.Collect(maps.Keys(ambiguous)))
	}

	// A held task cancelled, by its display id, through a serve that does not hold it.
	var target, description string
	for _, i := range []int{5, 11, 17} {
		for id, d := range answered {
			if d == fmt.Sprint("task ", i) && target == "" && !ambiguous[id] {
				target, description = id, d
			}
		}
	}
	if target == "" {
		t.Fatal("every held task's id is ambiguous")
	}
	holder := holderOf(t, db, description, pids)
	canceller := prefixes[(slices.Index(prefixes, holder)+1)%len(prefixes)]
	part := stepTools(t, c, parent, opencodetest.ToolCall{Name: canceller + "_cancel", Arguments: fmt.Sprintf(`{"task_id":%q}`, target)})[0]
	if part.State.Status != opencode.ToolCompleted || !strings.Contains(part.State.Output, "Cancelled task "+target+" ("+description+")") {
		t.Fatalf("%s_cancel(%s) of %s, which %s holds: %s %q %q", canceller, target, description, holder, part.State.Status, part.State.Output, part.State.Error)
	}
	// The record may be stored a moment after the answer, by the run end the abort brought.
	if !testmain.Eventually(10*time.Second, func() bool { return statuses(t, db)[description] == asyncagents.StatusCancelled }) {
		t.Fatalf("%s is stored %s after its cancel", description, statuses(t, db)[description])
	}
	for d, status := range statuses(t, db) {
		if d != description && status == asyncagents.StatusCancelled {
			t.Errorf("%s is cancelled; only %s was", d, description)
		}
	}
	held.release("ids")
	var all []asyncagents.Task
	if !testmain.Eventually(60*time.Second, func() bool {
		all = storedTasks(t, db)
		for _, task := range all {
			want := asyncagents.StatusCompleted
			if task.Description == description {
				want = asyncagents.StatusCancelled
			}
			if task.Status != want || len(task.Notifications) != 1 || task.Notifications[0].State != asyncagents.NotificationDelivered {
				return false
			}
		}
		return len(all) == n
	}) {
		t.Fatalf("tasks not all ended and notified (%s cancelled, the others completed): %v", description, statuses(t, db))
	}
	checkNotifiedOnce(t, c, []string{parent}, all, n)
}

var (
	// launchedRe reads the id and description a task tool answered a launch with.
	launchedRe = regexp.MustCompile(`Background task launched: (\S+)\nDescription: (.*)\n`)
	// descriptionRe reads the description the output tool shows.
	descriptionRe = regexp.MustCompile(`(?m)^Description: (.*)$`)
)

// newParent creates a parent session titled title on the server of c and returns its id.
func newParent(t *testing.T, c *opencode.HTTPClient, title string) string {
	t.Helper()
	s, err := c.CreateSession(t.Context(), opencode.CreateSessionRequest{Title: title})
	if err != nil {
		t.Fatal(err)
	}
	return s.ID
}

// stepTools has the model of parent make calls in one step (see scriptHosts) and returns the
// tool part of each call, in the order of calls, matched by tool and arguments among the
// parts of the assistant messages after the prompt (a notification posted meanwhile may come
// between them).
func stepTools(t *testing.T, c *opencode.HTTPClient, parent string, calls ...opencodetest.ToolCall) []opencode.Part {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	list, _ := json.Marshal(calls)
	prompt := callsPrefix + string(list)
	if _, err := c.Prompt(ctx, parent, opencode.PromptRequest{Parts: []opencode.TextPartInput{opencode.NewText(prompt)}}); err != nil {
		t.Fatal(err)
	}
	msgs, err := c.Messages(ctx, parent, 0)
	if err != nil {
		t.Fatal(err)
	}
	var parts []opencode.Part
	found := false
	for _, m := range slices.Backward(msgs) {
		if m.Info.Role == opencode.RoleUser && len(m.Parts) == 1 && m.Parts[0].Text == prompt {
			found = true
			break
		}
		for _, p := range m.Parts {
			if m.Info.Role == opencode.RoleAssistant && p.Type == opencode.PartTool && p.State != nil {
				parts = append(parts, p)
			}
		}
	}
	if !found {
		t.Fatalf("parent %s: no message holds the prompt %s", parent, prompt)
	}
	out := make([]opencode.Part, len(calls))
	for i, call := range calls {
		var want map[string]any
		json.Unmarshal([]byte(call.Arguments), &want)
		j := slices.IndexFunc(parts, func(p opencode.Part) bool {
			var got map[string]any // the arguments, and the plugin's _caller
			json.Unmarshal(p.State.Input, &got)
			for k, v := range want {
				if fmt.Sprint(got[k]) != fmt.Sprint(v) {
					return false
				}
			}
			return p.Tool == call.Name
		})
		if j < 0 {
			t.Fatalf("parent %s: no part of the call %s %s among %d", parent, call.Name, call.Arguments, len(parts))
		}
		out[i] = parts[j]
		parts = slices.Delete(parts, j, j+1)
	}
	return out
}

// statuses reads the status of every task in the database at url, by description.
func statuses(t *testing.T, url string) map[string]asyncagents.Status {
	t.Helper()
	out := map[string]asyncagents.Status{}
	for _, task := range storedTasks(t, url) {
		out[task.Description] = task.Status
	}
	return out
}

// countStatus counts the tasks of st whose description starts with prefix and that are in
// status.
func countStatus(st map[string]asyncagents.Status, prefix string, status asyncagents.Status) int {
	n := 0
	for description, s := range st {
		if strings.HasPrefix(description, prefix) && s == status {
			n++
		}
	}
	return n
}

// queryInt runs query, which returns one integer, on the database at url.
func queryInt(t *testing.T, url, query string, args ...any) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(ctx, query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// heldActive counts the tasks that have not ended held by the serve of process pid (whose
// store's holder name is host-pid-random).
func heldActive(t *testing.T, url string, pid int) int {
	t.Helper()
	return queryInt(t, url, `SELECT count(*) FROM asyncagents_tasks WHERE holder LIKE $1
		AND status NOT IN ('completed', 'error', 'cancelled')`, fmt.Sprintf("%%-%d-%%", pid))
}

// slotRows counts the rows of asyncagents_slots.
func slotRows(t *testing.T, url string) int {
	t.Helper()
	return queryInt(t, url, `SELECT count(*) FROM asyncagents_slots`)
}

// holderOf returns the prefix, in pids (serve process → prefix), of the serve holding the
// task with description.
func holderOf(t *testing.T, url, description string, pids map[int]string) string {
	t.Helper()
	for pid, prefix := range pids {
		if queryInt(t, url, `SELECT count(*) FROM asyncagents_tasks WHERE holder LIKE $1 AND task->>'description' = $2`,
			fmt.Sprintf("%%-%d-%%", pid), description) == 1 {
			return prefix
		}
	}
	t.Fatalf("no serve holds %q", description)
	return ""
}

// childIDs returns the ids of parent's child sessions.
func childIDs(t *testing.T, c *opencode.HTTPClient, parent string) []string {
	t.Helper()
	children, err := c.Children(t.Context(), parent)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range children {
		ids = append(ids, s.ID)
	}
	return ids
}

// sampleStaleSlots reads, every 20 ms until the test ends, the rows of asyncagents_slots in
// the database at url whose task ended or is gone, and returns a function giving those seen
// so far ("task status" each, once).
func sampleStaleSlots(t *testing.T, url string) func() []string {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		defer conn.Close(context.Background())
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			rows, err := conn.Query(ctx, `SELECT s.task || ' ' || coalesce(t.status, 'gone') FROM asyncagents_slots s
				LEFT JOIN asyncagents_tasks t ON t.id = s.task WHERE t.status IS NULL OR t.status IN ('completed', 'error', 'cancelled')`)
			if err == nil {
				stale, _ := pgx.CollectRows(rows, pgx.RowTo[string])
				mu.Lock()
				for _, row := range stale {
					seen[row] = true
				}
				mu.Unlock()
			}
			cancel()
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for row := range seen {
			out = append(out, row)
		}
		slices.Sort(out)
		return out
	}
}
