//go:build unix

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// tuiUser is a person's machine for the install-once tests: a HOME of its own with OpenCode's
// folders below it, the environment the TUIs (and so the daemon their plugin starts) get, and
// the scripted model that every project of it points at.
type tuiUser struct {
	t     *testing.T
	home  string
	env   []string
	model *opencodetest.Model
	bin   string // opencode
	state string // asyncagents' state folder
	start time.Time
}

// step logs what the test does next, with the time since it began (what a slow run spent
// its time on).
func (u *tuiUser) step(what string) {
	u.t.Helper()
	u.t.Logf("%6.1fs %s", time.Since(u.start).Seconds(), what)
}

// newTUIUser makes the user's folders. OpenCode's global config folder gets the pinned
// @opencode-ai/plugin (from the Makefile's install), listed as installed, so that OpenCode
// loads the asyncagents plugin without reaching npm.
func newTUIUser(t *testing.T) *tuiUser {
	t.Helper()
	bin := os.Getenv("OPENCODE_BIN")
	_, err := exec.LookPath("tmux")
	if bin == "" || err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the TUI tests need OPENCODE_BIN (%q) and tmux (%v): run make test", bin, err)
		}
		t.Skipf("the TUI tests need OPENCODE_BIN (%q) and tmux (%v): run make test", bin, err)
	}
	home := filepath.Join(t.TempDir(), "home")
	u := &tuiUser{t: t, home: home, bin: bin, model: opencodetest.NewModel(), state: filepath.Join(home, ".local", "state", "asyncagents"), start: time.Now()}
	t.Cleanup(u.model.Close)
	config := filepath.Join(home, ".config", "opencode")
	for _, d := range []string{config, filepath.Join(home, ".local", "share"), filepath.Join(home, ".cache"), filepath.Join(home, ".local", "state")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	deps := map[string]string{"@opencode-ai/plugin": "*"}
	for name, v := range map[string]any{
		"package.json":      map[string]any{"dependencies": deps},
		"package-lock.json": map[string]any{"name": "opencode", "lockfileVersion": 3, "requires": true, "packages": map[string]any{"": map[string]any{"dependencies": deps}}},
	} {
		b, _ := json.Marshal(v)
		if err := os.WriteFile(filepath.Join(config, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	modules := filepath.Join(filepath.Dir(filepath.Dir(bin)))
	if _, err := os.Stat(filepath.Join(modules, "@opencode-ai", "plugin", "package.json")); err != nil {
		t.Fatalf("the pinned @opencode-ai/plugin is not installed beside OpenCode (make opencode): %v", err)
	}
	if err := os.Symlink(modules, filepath.Join(config, "node_modules")); err != nil {
		t.Fatal(err)
	}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k != "HOME" && !strings.HasPrefix(k, "XDG_") && !strings.HasPrefix(k, "OPENCODE_") && k != "TMUX" && k != "TERM" {
			u.env = append(u.env, kv)
		}
	}
	u.env = append(u.env, "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
		"XDG_DATA_HOME="+filepath.Join(home, ".local", "share"), "XDG_CACHE_HOME="+filepath.Join(home, ".cache"),
		"XDG_STATE_HOME="+filepath.Join(home, ".local", "state"), "TERM=xterm-256color", "TMPDIR="+t.TempDir(),
		"OPENCODE_DISABLE_AUTOUPDATE=1", "OPENCODE_DISABLE_MODELS_FETCH=1", "OPENCODE_DISABLE_LSP_DOWNLOAD=1",
		"OPENCODE_DISABLE_SHARE=1", "OPENCODE_DISABLE_CLAUDE_CODE=1", "OPENCODE_DISABLE_EXTERNAL_SKILLS=1",
		"npm_config_offline=true", "npm_config_fetch_retries=0",
		"ASYNCAGENTS_TEST_MAIN=1") // the test binary is the command (TestMain)
	t.Cleanup(u.stopDaemon)
	// OpenCode's first start makes its database, and two first starts at once collide: it is
	// made here, before any TUI starts (opencode session list makes it and lists nothing).
	cmd := exec.Command(bin, "session", "list")
	cmd.Dir, cmd.Env = home, u.env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("opencode session list: %v\n%s", err, out)
	}
	return u
}

// asyncagents runs the command (the test binary) as the user and returns its output.
func (u *tuiUser) asyncagents(args ...string) string {
	u.t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = u.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		u.t.Fatalf("asyncagents %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// project makes a project folder whose opencode.json points at the scripted model, with the
// keys of extra.
func (u *tuiUser) project(name string, extra ...map[string]any) string {
	u.t.Helper()
	dir := filepath.Join(u.home, "src", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		u.t.Fatal(err)
	}
	cfg := map[string]any{
		"$schema": "https://opencode.ai/config.json",
		"provider": map[string]any{opencodetest.ProviderID: map[string]any{
			"npm": "@ai-sdk/openai-compatible", "name": "Scripted",
			"options": map[string]any{"baseURL": u.model.BaseURL(), "apiKey": "scripted"},
			"models":  map[string]any{opencodetest.ModelID: map[string]any{"name": "Scripted M1"}},
		}},
		"model": opencodetest.ProviderID + "/" + opencodetest.ModelID, "small_model": opencodetest.ProviderID + "/" + opencodetest.ModelID,
		"autoupdate": false, "share": "disabled",
	}
	for _, e := range extra {
		maps.Copy(cfg, e)
	}
	b, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "opencode.json"), b, 0o644); err != nil {
		u.t.Fatal(err)
	}
	return dir
}

// daemonPID returns the pid in the daemon's pid file, or 0.
func (u *tuiUser) daemonPID() int {
	b, _ := os.ReadFile(filepath.Join(u.state, "daemon.pid"))
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// stopDaemon stops the daemon the plugin started, by its pid: SIGTERM, then SIGKILL.
func (u *tuiUser) stopDaemon() {
	pid := u.daemonPID()
	if pid <= 0 {
		return
	}
	syscall.Kill(pid, syscall.SIGTERM)
	if !testmain.Eventually(15*time.Second, func() bool { return !processAlive(pid) }) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// tasks returns the tasks of the project at dir, as the daemon's store for it holds them.
func (u *tuiUser) tasks(dir string) []asyncagents.Task {
	tasks, err := asyncagents.ReadFileStore(context.Background(), projectStore(u.state, dir))
	if err != nil {
		return nil
	}
	return tasks
}

// tuiProc is an OpenCode TUI in a pseudo-terminal of its own: a tmux server on a socket in
// the test's folder, with one window running `opencode` in the project.
type tuiProc struct {
	t       *testing.T
	socket  string
	pid     int    // opencode's, the leader of the window's process group
	started func() // lets the next TUI start (tuiStarts); idempotent
}

// tuiStarts lets one TUI of this package start at a time: a start takes about 20 s of CPU,
// and several at once on a loaded machine take longer than a person would wait for one. A
// TUI holds it from its start until its screen first shows what a test waits for.
var tuiStarts = make(chan struct{}, 1)

// startTUI starts `opencode` with args in dir, as the user types it, with extra variables;
// ready waits for it.
func (u *tuiUser) startTUI(dir string, args []string, extra ...string) *tuiProc {
	u.t.Helper()
	x := &tuiProc{t: u.t, socket: filepath.Join(u.t.TempDir(), "tmux.sock")}
	tuiStarts <- struct{}{}
	x.started = sync.OnceFunc(func() { <-tuiStarts })
	u.t.Cleanup(x.started)
	tmux := []string{"-S", x.socket, "-f", "/dev/null", "new-session", "-d", "-x", "160", "-y", "48", "-c", dir, "env"}
	tmux = append(append(append(append(tmux, u.env...), extra...), u.bin), args...)
	cmd := exec.Command("tmux", tmux...)
	cmd.Env = u.env
	if out, err := cmd.CombinedOutput(); err != nil {
		u.t.Fatalf("tmux new-session: %v\n%s", err, out)
	}
	out, err := exec.Command("tmux", "-S", x.socket, "display", "-p", "#{pane_pid}").Output()
	if err != nil {
		u.t.Fatal(err)
	}
	x.pid, _ = strconv.Atoi(strings.TrimSpace(string(out)))
	u.t.Cleanup(x.kill)
	return x
}

// ready waits until the TUI shows its prompt.
func (x *tuiProc) ready() *tuiProc {
	x.t.Helper()
	x.waitScreen("Ask anything", 90*time.Second)
	return x
}

// quit quits the TUI as its user does (ctrl+c), and waits for its process to end.
func (x *tuiProc) quit() {
	x.t.Helper()
	for range 3 {
		exec.Command("tmux", "-S", x.socket, "send-keys", "C-c").Run()
		if testmain.Eventually(5*time.Second, func() bool { return !processAlive(x.pid) }) {
			return
		}
	}
	x.t.Fatalf("the TUI did not quit on ctrl+c:\n%s", x.screen())
}

// kill ends the TUI's process group and the tmux server, by their pids.
func (x *tuiProc) kill() {
	if x.pid > 0 {
		syscall.Kill(-x.pid, syscall.SIGKILL)
	}
	if out, err := exec.Command("tmux", "-S", x.socket, "display", "-p", "#{pid}").Output(); err == nil {
		if pid, _ := strconv.Atoi(strings.TrimSpace(string(out))); pid > 0 {
			syscall.Kill(pid, syscall.SIGTERM)
		}
	}
}

// screen returns what the TUI shows.
func (x *tuiProc) screen() string {
	out, _ := exec.Command("tmux", "-S", x.socket, "capture-pane", "-p").Output()
	return string(out)
}

// waitScreen waits until the screen shows s.
func (x *tuiProc) waitScreen(s string, timeout time.Duration) {
	x.t.Helper()
	if !testmain.Eventually(timeout, func() bool { return strings.Contains(x.screen(), s) }) {
		x.t.Fatalf("the TUI did not show %q within %v:\n%s", s, timeout, x.screen())
	}
	x.started()
}

// seen starts watching the screen for s, every 250 ms until it shows or the test ends: a toast
// shows for a few seconds only. The func it returns reports whether s showed.
func (x *tuiProc) seen(s string) func() bool {
	var found atomic.Bool
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			if strings.Contains(x.screen(), s) {
				found.Store(true)
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	x.t.Cleanup(func() { close(stop); <-done })
	return found.Load
}

// press sends one key (a tmux key name: Enter, Left, C-c) to the TUI.
func (x *tuiProc) press(key string) {
	x.t.Helper()
	if out, err := exec.Command("tmux", "-S", x.socket, "send-keys", key).CombinedOutput(); err != nil {
		x.t.Fatalf("tmux send-keys %s: %v\n%s", key, err, out)
	}
}

// send types text into the TUI's prompt and submits it.
func (x *tuiProc) send(text string) {
	x.t.Helper()
	if out, err := exec.Command("tmux", "-S", x.socket, "send-keys", "-l", text).CombinedOutput(); err != nil {
		x.t.Fatalf("tmux send-keys: %v\n%s", err, out)
	}
	time.Sleep(500 * time.Millisecond) // typed text arrives as a paste: Enter after it submits
	if out, err := exec.Command("tmux", "-S", x.socket, "send-keys", "Enter").CombinedOutput(); err != nil {
		x.t.Fatalf("tmux send-keys: %v\n%s", err, out)
	}
}

// launchLine is what a user types for the scripted model to call asyncagents_task with in.
// A RUN: directive in the arguments (the task's prompt) is written with an escaped colon, so
// that the parent's model takes TOOL: as its directive, and the task gets RUN:.
func launchLine(in map[string]any) string {
	b, _ := json.Marshal(in)
	return "TOOL:asyncagents_task " + strings.ReplaceAll(string(b), "RUN:", `RUN\u003a`)
}

// waitTasks waits until the project at dir has n tasks that ended, each with its one
// notification of the end delivered, and returns them.
func (u *tuiUser) waitTasks(dir string, n int, timeout time.Duration) []asyncagents.Task {
	u.t.Helper()
	var tasks []asyncagents.Task
	ok := testmain.Eventually(timeout, func() bool {
		tasks = u.tasks(dir)
		ended := 0
		for _, tk := range tasks {
			if !tk.Status.Active() && !tk.Starting && delivered(tk) == 1 {
				ended++
			}
		}
		return len(tasks) == n && ended == n
	})
	if !ok {
		b, _ := json.MarshalIndent(tasks, "", "  ")
		log, _ := os.ReadFile(filepath.Join(u.state, "daemon.log"))
		u.t.Fatalf("the project %s has not %d ended tasks each notified once within %v:\n%s\ndaemon log:\n%s", dir, n, timeout, b, log)
	}
	return tasks
}

// delivered counts t's delivered notifications of run ends. A notice that the run waits for a
// permission is not one: whether it is sent depends on whether the Manager saw the question
// before the person in the TUI answered it.
func delivered(t asyncagents.Task) int {
	n := 0
	for _, no := range t.Notifications {
		if no.State == asyncagents.NotificationDelivered && !strings.Contains(no.Key, "/permission/") {
			n++
		}
	}
	return n
}

// The install-once scenarios below run beside each other (each has a HOME, a daemon and
// TUIs of its own), and not beside the other tests: TUIs and daemons run before the hosts
// tests, whose leases are short.
func TestInstallOnce(t *testing.T) {
	t.Run("then OpenCode as usual", func(t *testing.T) {
		t.Parallel()
		installOnceThenOpenCodeAsUsual(t)
	})
	t.Run("with serve and attach", func(t *testing.T) {
		t.Parallel()
		installOnceWithServeAndAttach(t)
	})
}

// Issue 33: a person runs asyncagents install once and then opencode in any project, as they
// always do (a TUI without --port, one with a server password nobody exported by hand), and
// has background agents: a forked and a plain task end, each parent session is told once and
// the TUI shows a toast; a second TUI in another project at the same time does the same and
// nothing crosses; a daemon killed mid-task is started again by the next tool call and
// nothing is lost.
func installOnceThenOpenCodeAsUsual(t *testing.T) {
	u := newTUIUser(t)
	out := u.asyncagents("install")
	plugin := filepath.Join(u.home, ".config", "opencode", "plugin", companionName)
	if !strings.Contains(out, "written") {
		t.Fatalf("install said:\n%s", out)
	}
	if _, err := os.Stat(plugin); err != nil {
		t.Fatal(err)
	}
	if again := u.asyncagents("install"); !strings.Contains(again, "unchanged") {
		t.Errorf("a second install said:\n%s", again)
	}

	a, b := u.project("alpha"), u.project("beta")
	password := "OPENCODE_SERVER_PASSWORD=only-opencode-knows"
	tuiA := u.startTUI(a, nil, password).ready()
	tuiB := u.startTUI(b, nil).ready()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("alpha's TUI:\n%s\nbeta's TUI:\n%s", tuiA.screen(), tuiB.screen())
		}
	})
	u.step("alpha's and beta's TUIs are up")

	toastA, toastB := tuiA.seen("completed in"), tuiB.seen("completed in") // the toasts of the ends
	tuiA.send("Remember SECRET-A-42. " + launchLine(map[string]any{"description": "forked in alpha", "agent": "general", "fork": true, "prompt": "QUOTE:SECRET-A"}))
	tuiB.send(launchLine(map[string]any{"description": "plain in beta", "agent": "general", "prompt": "say beta done"}))
	tuiA.waitScreen("description=forked in alpha", 60*time.Second) // the TUI took the first message
	tuiA.send(launchLine(map[string]any{"description": "plain in alpha", "agent": "general", "prompt": "say alpha done"}))

	tasksA := u.waitTasks(a, 2, 90*time.Second)
	u.step("alpha's tasks ended")
	tasksB := u.waitTasks(b, 1, 90*time.Second)
	for _, tk := range tasksA {
		if tk.Status != asyncagents.StatusCompleted {
			t.Errorf("alpha's task %q ended %s: %s", tk.Description, tk.Status, tk.Error)
		}
		if tk.Directory != a || !strings.Contains(tk.Description, "alpha") {
			t.Errorf("alpha's store holds %q in %s", tk.Description, tk.Directory)
		}
		if tk.Forked && !strings.Contains(tk.Result, "SECRET-A-42") {
			t.Errorf("the forked task did not see the parent's context: %q", tk.Result)
		}
	}
	if len(tasksB) != 1 || tasksB[0].Directory != b || tasksB[0].Status != asyncagents.StatusCompleted {
		t.Errorf("beta's store holds %+v", tasksB)
	}
	if tasksA[0].ParentSessionID == tasksB[0].ParentSessionID {
		t.Errorf("alpha's and beta's tasks share a parent session")
	}
	if !testmain.Eventually(30*time.Second, func() bool { return toastA() && toastB() }) {
		t.Errorf("a task's end showed no toast: in alpha's TUI %t, in beta's %t", toastA(), toastB())
	}

	u.step("the tasks ended, toasts seen")
	// No task's end gave its parent's model more than one turn: a turn is one user message
	// that names the task, which the several model requests of one turn (a retry, a tool call)
	// share. A task that ends while its parent is busy may give none: its notification is in
	// the parent's session for the step that follows.
	turns := func(tk asyncagents.Task) int {
		seen := map[string]bool{}
		for _, r := range u.model.Requests() {
			// The turn's first line names the tasks that reported; a later line may name
			// this one as still running, in another task's turn.
			i, last := r.LastUser()
			if first, _, _ := strings.Cut(last, "\n"); strings.Contains(first, "reported since your last turn") && strings.Contains(first, tk.ID[:12]) {
				seen[strconv.Itoa(i)+"\x00"+last] = true
			}
		}
		return len(seen)
	}
	for _, tk := range append(slices.Clone(tasksA), tasksB...) {
		if n := turns(tk); n > 1 {
			var lasts []string
			for _, r := range u.model.Requests() {
				if i, last := r.LastUser(); strings.Contains(last, tk.ID[:12]) {
					lasts = append(lasts, fmt.Sprintf("message %d: %q", i, last))
				}
			}
			t.Errorf("the end of %q gave its parent %d turns, want at most 1; the requests naming it:\n%s", tk.Description, n, strings.Join(lasts, "\n"))
		}
	}

	// The plugin's port answers only with its credential.
	hc := daemonClient(filepath.Join(u.state, "daemon.sock"))
	resp, err := hc.Get("http://asyncagents/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Servers []struct{ URL, Directory string }
	}
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil || len(st.Servers) != 2 {
		t.Fatalf("the daemon's status: %+v, %v", st, err)
	}
	for _, s := range st.Servers {
		resp, err := http.Get(s.URL + "/session")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET /session at the plugin's port of %s without its credential: %s", s.Directory, resp.Status)
		}
	}

	u.step("the daemon is killed mid-task")
	// The daemon is killed while a task runs; the next tool call starts it again, and the
	// task ends with its one notification.
	old := u.daemonPID()
	tuiB.send(launchLine(map[string]any{"description": "outlives the daemon", "agent": "general", "prompt": "SLEEP:6"}))
	if !testmain.Eventually(60*time.Second, func() bool {
		for _, tk := range u.tasks(b) {
			if tk.Description == "outlives the daemon" && tk.Status == asyncagents.StatusRunning && !tk.Starting {
				return true
			}
		}
		return false
	}) {
		t.Fatalf("the long task did not start: %+v", u.tasks(b))
	}
	syscall.Kill(old, syscall.SIGKILL)
	if !testmain.Eventually(10*time.Second, func() bool { return !processAlive(old) }) {
		t.Fatal("the daemon did not die")
	}
	tuiB.send("TOOL:asyncagents_list {}")
	u.waitTasks(b, 2, 90*time.Second)
	if pid := u.daemonPID(); pid == old || pid == 0 || !processAlive(pid) {
		t.Errorf("no new daemon runs (pid %d, the killed one %d)", pid, old)
	}
	log, _ := os.ReadFile(filepath.Join(u.state, "daemon.log"))
	if strings.Contains(string(log), "DATA RACE") || strings.Contains(string(log), "panic:") {
		t.Errorf("the daemon reported a race or a panic:\n%s", log)
	}
	for _, want := range []string{"task launched", "task ended", "notification delivered"} {
		if n := strings.Count(string(log), want); n != 4 {
			t.Errorf("the daemon logged %q %d times, want once per task (4)\n%s", want, n, log)
		}
	}

	u.step("a new daemon ended the task")
	// alpha's OpenCode, which called no tool since, is followed by the new daemon too: its
	// plugin checks every 5 s.
	following := func() []string {
		resp, err := hc.Get("http://asyncagents/v1/status")
		if err != nil {
			return nil
		}
		defer resp.Body.Close()
		st.Servers = nil
		if json.NewDecoder(resp.Body).Decode(&st) != nil {
			return nil
		}
		var dirs []string
		for _, s := range st.Servers {
			dirs = append(dirs, s.Directory)
		}
		return dirs
	}
	if !testmain.Eventually(20*time.Second, func() bool { return len(following()) == 2 }) {
		t.Errorf("the new daemon follows %q, want alpha's and beta's OpenCode", following())
	}

	u.step("the new daemon follows both")
	// alpha's TUI quits while a task runs, and starts again on its session (-c): the task
	// ends interrupted because OpenCode stopped, its parent is told once, its duration ends
	// at the quit, and it resumes.
	tuiA.send(launchLine(map[string]any{"description": "cut by the quit", "agent": "general", "prompt": "SLEEP:60"}))
	var cut asyncagents.Task
	if !testmain.Eventually(60*time.Second, func() bool {
		for _, tk := range u.tasks(a) {
			if tk.Description == "cut by the quit" && tk.Status == asyncagents.StatusRunning && !tk.Starting {
				cut = tk
				return true
			}
		}
		return false
	}) {
		t.Fatalf("the task to cut did not start: %+v", u.tasks(a))
	}
	time.Sleep(2 * time.Second) // its model is asked
	tuiA.quit()
	u.step("alpha's TUI quit")
	quit := time.Now()
	tuiA = u.startTUI(a, []string{"-c"}, password)
	tuiA.waitScreen("cut by the quit", 60*time.Second) // the end of its session
	var interrupted asyncagents.Task
	if !testmain.Eventually(60*time.Second, func() bool {
		for _, tk := range u.tasks(a) {
			if tk.ID == cut.ID && !tk.Status.Active() && delivered(tk) == 1 {
				interrupted = tk
				return true
			}
		}
		return false
	}) {
		t.Fatalf("the task cut by the quit did not end with one notification: %+v", u.tasks(a))
	}
	if interrupted.Status != asyncagents.StatusError || !strings.HasPrefix(interrupted.Error, "interrupted: OpenCode stopped") || !strings.Contains(interrupted.Error, "resume") {
		t.Errorf("the task cut by the quit ended %s: %q", interrupted.Status, interrupted.Error)
	}
	if interrupted.Completed.After(quit) {
		t.Errorf("the cut run ended at %v, after the quit at %v: its duration counts the downtime", interrupted.Completed, quit)
	}
	u.step("the cut task ended interrupted")
	tuiA.send(launchLine(map[string]any{"resume": interrupted.ID, "prompt": "say resumed"}))
	if !testmain.Eventually(60*time.Second, func() bool {
		for _, tk := range u.tasks(a) {
			if tk.ID == cut.ID && tk.Status == asyncagents.StatusCompleted && tk.ResumeCount == 1 && delivered(tk) == 2 {
				return true
			}
		}
		return false
	}) {
		t.Fatalf("the cut task did not resume and complete: %+v", u.tasks(a))
	}

	u.step("the cut task resumed and completed")
	// The daemon forgets an OpenCode whose process ended.
	tuiA.kill()
	if !testmain.Eventually(15*time.Second, func() bool { dirs := following(); return len(dirs) == 1 && dirs[0] == b }) {
		t.Errorf("the daemon follows %q after alpha's OpenCode ended, want beta's alone", following())
	}

	u.step("the daemon forgot alpha")
	// uninstall removes the plugin and stops the daemon.
	pid := u.daemonPID()
	u.asyncagents("uninstall")
	if _, err := os.Stat(plugin); !os.IsNotExist(err) {
		t.Errorf("the plugin is still there after uninstall: %v", err)
	}
	if processAlive(pid) {
		t.Errorf("the daemon (pid %d) still runs after uninstall", pid)
	}
	if log, _ := os.ReadFile(filepath.Join(u.state, "daemon.log")); strings.Contains(string(log), "DATA RACE") || strings.Contains(string(log), "panic:") {
		t.Errorf("a daemon reported a race or a panic:\n%s", log)
	}
}

// install leaves a plugin file of its name that asyncagents did not write alone unless
// -force, replaces one an earlier install wrote, and names a project set up for serve where
// it runs, leaving it alone.
func TestInstallKeepsAForeignPlugin(t *testing.T) {
	config := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", config)
	path := filepath.Join(config, "opencode", "plugin", companionName)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	foreign := "export const Mine = async () => ({});\n"
	if err := os.WriteFile(path, []byte(foreign), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runCmd(t, "install"); code != exitFail || !strings.Contains(errOut, "-force") {
		t.Errorf("install over a foreign plugin: exit %d\n%s%s", code, out, errOut)
	}
	if b, _ := os.ReadFile(path); string(b) != foreign {
		t.Errorf("the foreign plugin was changed: %q", b)
	}
	if code, out, errOut := runCmd(t, "install", "-force"); code != exitOK || !strings.Contains(out, "replaced") {
		t.Errorf("install -force: exit %d\n%s%s", code, out, errOut)
	}
	older := strings.Replace(string(mustRead(t, path)), "const VERSION = ", "const VERSION = \"v0.0.1\" || ", 1)
	if err := os.WriteFile(path, []byte(older), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runCmd(t, "install"); code != exitOK || !strings.Contains(out, "replaced") {
		t.Errorf("install over an earlier install's plugin: exit %d\n%s%s", code, out, errOut)
	}
	if !strings.Contains(string(mustRead(t, path)), companionMark) {
		t.Error("the plugin lost its mark")
	}

	// A project set up for serve, where install runs, is named and left alone.
	project := t.TempDir()
	cfg := `{"mcp": {"asyncagents": {"type": "remote", "url": "http://127.0.0.1:4097/mcp"}}}`
	if err := os.WriteFile(filepath.Join(project, "opencode.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(project)
	if code, out, errOut := runCmd(t, "install"); code != exitOK || !strings.Contains(out, "has a setup for asyncagents serve") {
		t.Errorf("install in a project set up for serve: exit %d\n%s%s", code, out, errOut)
	}
	if b := mustRead(t, filepath.Join(project, "opencode.json")); string(b) != cfg {
		t.Errorf("install changed the project's opencode.json: %s", b)
	}
}

// The daemon exits after -idle without any OpenCode to follow.
func TestDaemonExitsWhenIdle(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "d", "daemon.sock")
	done := make(chan int, 1)
	go func() {
		code, _, _ := runCmd(t, "daemon", "-idle", "300ms", "-daemon-socket", sock)
		done <- code
	}()
	awaitExit(t, done, 20*time.Second)
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The daemon refuses what it cannot act on with an error a person can act on: a plugin of
// another version (run install again), a bad announce, a call for an OpenCode it does not
// follow (the plugin announces again).
func TestDaemonRefusals(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "d", "daemon.sock")
	done := make(chan int, 1)
	go func() {
		code, _, _ := runCmd(t, "daemon", "-idle", "2s", "-daemon-socket", sock)
		done <- code
	}()
	if !testmain.Eventually(10*time.Second, func() bool { return daemonAnswers(context.Background(), sock) }) {
		t.Fatal("the daemon did not answer")
	}
	hc := daemonClient(sock)
	defer hc.CloseIdleConnections()
	post := func(path, body string) (int, string) {
		resp, err := hc.Post("http://asyncagents"+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	good := hello{URL: "http://127.0.0.1:9", Secret: strings.Repeat("ab", 32), Directory: t.TempDir(), PID: os.Getpid(), Plugin: "v0.0.1"}
	for _, tc := range []struct {
		name string
		edit func(*hello)
		code int
		want string
	}{
		{"another version", func(*hello) {}, http.StatusConflict, "run asyncagents install again"},
		{"not loopback", func(h *hello) { h.URL = "http://example.com:80" }, http.StatusBadRequest, "bad url"},
		{"no secret", func(h *hello) { h.Secret = "" }, http.StatusBadRequest, "no secret"},
		{"relative directory", func(h *hello) { h.Directory = "src" }, http.StatusBadRequest, "bad directory"},
		{"unreachable OpenCode", func(h *hello) { h.Plugin = buildVersion() }, http.StatusBadGateway, "does not answer through its plugin"},
	} {
		h := good
		tc.edit(&h)
		b, _ := json.Marshal(h)
		if code, body := post("/v1/announce", string(b)); code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %q, want %d with %q", tc.name, code, body, tc.code, tc.want)
		}
	}
	if code, body := post("/v1/call", `{"server":"oc1_nope","tool":"asyncagents_list","caller":{"sessionID":"ses_x"}}`); code != http.StatusNotFound || !strings.Contains(body, "announce it again") {
		t.Errorf("a call for an unknown OpenCode: %d %q", code, body)
	}
	awaitExit(t, done, 30*time.Second)
}

// awaitExit waits for the exit code of an idle daemon run by runCmd on done, which must be
// exitOK within timeout.
func awaitExit(t *testing.T, done <-chan int, timeout time.Duration) {
	t.Helper()
	select {
	case code := <-done:
		if code != exitOK {
			t.Errorf("the idle daemon exited with %d", code)
		}
	case <-time.After(timeout):
		t.Fatal("the idle daemon did not exit")
	}
}

// Issue 33: `opencode serve` and a TUI attached to it (`opencode attach <url> --dir
// <project>`) work the same after install: the plugin runs in the serve, the task's parent is
// told once, and the attached TUI shows a toast when the task ends and one when a task waits
// for a permission. Before that, a plugin of another version than the daemon's gets no tools,
// and the TUI says what to do (errors a person can act on).
func installOnceWithServeAndAttach(t *testing.T) {
	u := newTUIUser(t)
	u.asyncagents("install")

	// A plugin of another version than the daemon's: the TUI says what to do, at the latest
	// at the first message.
	plugin := filepath.Join(u.home, ".config", "opencode", "plugin", companionName)
	src := string(mustRead(t, plugin))
	i := strings.Index(src, "const VERSION = ")
	j := i + strings.Index(src[i:], ";")
	if err := os.WriteFile(plugin, []byte(src[:i]+`const VERSION = "v0.0.1"`+src[j:]), 0o644); err != nil {
		t.Fatal(err)
	}
	old := u.startTUI(u.project("delta"), nil).ready()
	u.step("the TUI with a plugin of another version is up")
	old.send("hello")
	if !testmain.Eventually(30*time.Second, func() bool { return strings.Contains(old.screen(), "v0.0.1") }) {
		daemon, _ := os.ReadFile(filepath.Join(u.state, "daemon.log"))
		var logs []byte
		matches, _ := filepath.Glob(filepath.Join(u.home, ".local", "share", "opencode", "log", "*.log"))
		for _, m := range matches {
			b, _ := os.ReadFile(m)
			logs = append(logs, b...)
		}
		t.Fatalf("the TUI did not show the plugin's version error:\n%s\ndaemon log:\n%s\nOpenCode's log:\n%s", old.screen(), daemon, logs)
	}
	old.kill()
	if out := u.asyncagents("install"); !strings.Contains(out, "replaced") {
		t.Fatalf("install over the other version's plugin said:\n%s", out)
	}

	dir := u.project("gamma")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	url := "http://127.0.0.1:" + strconv.Itoa(port)
	serve := exec.Command(u.bin, "serve", "--hostname", "127.0.0.1", "--port", strconv.Itoa(port), "--print-logs")
	serve.Dir, serve.Env = dir, u.env
	var serveLog syncBuffer
	serve.Stdout, serve.Stderr = &serveLog, &serveLog
	serve.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { serve.Wait(); close(exited) }()
	t.Cleanup(func() {
		syscall.Kill(-serve.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			syscall.Kill(-serve.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	})
	hc := &http.Client{Timeout: 5 * time.Second}
	if !testmain.Eventually(60*time.Second, func() bool {
		resp, err := hc.Get(url + "/global/health")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusOK
	}) {
		t.Fatalf("opencode serve did not answer:\n%s", serveLog.String())
	}
	t.Cleanup(func() {
		if t.Failed() {
			daemon, _ := os.ReadFile(filepath.Join(u.state, "daemon.log"))
			t.Logf("opencode serve:\n%s\ndaemon log:\n%s", serveLog.String(), daemon)
		}
	})
	tui := u.startTUI(dir, []string{"attach", url, "--dir", dir}).ready()
	u.step("the attached TUI is up")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the attached TUI:\n%s", tui.screen())
			for _, r := range u.model.Requests() {
				t.Logf("tool results seen by the model: %q", r.ToolResultsSinceUser())
			}
		}
	})
	toast := tui.seen("completed in")
	tui.send(launchLine(map[string]any{"description": "through attach", "agent": "general", "prompt": "say attached"}))
	tasks := u.waitTasks(dir, 1, 90*time.Second)
	if tasks[0].Status != asyncagents.StatusCompleted || tasks[0].Directory != dir {
		t.Errorf("the task through attach: %+v", tasks[0])
	}
	if !testmain.Eventually(30*time.Second, toast) {
		t.Error("the task's end showed no toast in the attached TUI")
	}

	u.step("the task through attach ended")
	// A task whose run waits for a permission (reading outside the project asks for
	// external_directory): the TUI says so in a toast. OpenCode's TUI shows the question of
	// the session's child too; the person allows it once, and the task ends with its one
	// notification.
	asks := tui.seen("waits for a permission")
	tui.send(launchLine(map[string]any{"description": "outside", "agent": "general", "prompt": "RUN:cat /no/such/file.txt"}))
	if !testmain.Eventually(60*time.Second, asks) {
		b, _ := json.MarshalIndent(u.tasks(dir), "", "  ")
		t.Fatalf("a task waiting for a permission showed no toast in the attached TUI:\n%s\ntasks:\n%s", tui.screen(), b)
	}
	u.step("the permission toast showed")
	tui.waitScreen("Permission required", 30*time.Second)
	tui.press("Enter") // Allow once
	for _, tk := range u.waitTasks(dir, 2, 60*time.Second) {
		if tk.Description == "outside" && tk.Status != asyncagents.StatusCompleted {
			t.Errorf("the task allowed once ended %s: %s", tk.Status, tk.Error)
		}
	}
}

// install -service writes a systemd user unit that runs the daemon and enables it, and says
// what to run when systemctl cannot; uninstall disables and removes it.
func TestInstallServiceWritesAUserUnit(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the user service of this system is not a systemd unit")
	}
	config := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", config)
	var ran []string
	fail := false
	run := runServiceCommand
	t.Cleanup(func() { runServiceCommand = run })
	runServiceCommand = func(c []string) ([]byte, error) {
		ran = append(ran, strings.Join(c, " "))
		if fail {
			return []byte("Failed to connect to bus"), errors.New("exit status 1")
		}
		return nil, nil
	}
	code, out, errOut := runCmd(t, "install", "-service")
	unit := filepath.Join(config, "systemd", "user", serviceUnit)
	if code != exitOK || !strings.Contains(out, "now runs as a user service") {
		t.Fatalf("install -service: exit %d\n%s%s", code, out, errOut)
	}
	exe, _ := os.Executable()
	exe, _ = filepath.EvalSymlinks(exe)
	body := string(mustRead(t, unit))
	if want := fmt.Sprintf("ExecStart=%q \"daemon\" \"-daemon-socket\" %q \"-idle\" \"0\"", exe, defaultPath("daemon.sock")); !strings.Contains(body, want) {
		t.Errorf("the unit:\n%s\nwant the line %s", body, want)
	}
	if want := []string{"systemctl --user daemon-reload", "systemctl --user enable --now " + serviceUnit}; !slices.Equal(ran, want) {
		t.Errorf("install ran %q, want %q", ran, want)
	}

	ran, fail = nil, true
	if code, out, _ := runCmd(t, "install", "-service"); code != exitOK || !strings.Contains(out, "run it yourself") {
		t.Errorf("install -service without a user systemd: exit %d\n%s", code, out)
	}
	ran = nil
	if code, out, errOut := runCmd(t, "uninstall"); code != exitOK || !strings.Contains(out, "removed") {
		t.Errorf("uninstall: exit %d\n%s%s", code, out, errOut)
	}
	if _, err := os.Stat(unit); !os.IsNotExist(err) {
		t.Errorf("the unit is still there after uninstall: %v", err)
	}
	if want := []string{"systemctl --user disable --now " + serviceUnit}; !slices.Equal(ran, want) {
		t.Errorf("uninstall ran %q, want %q", ran, want)
	}
}
