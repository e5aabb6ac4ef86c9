package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/opencode"
)

const daemonHelp = `Runs the asyncagents daemon: one per user, for every OpenCode the user runs. The plugin
that asyncagents install puts into OpenCode's global plugin folder starts it when none runs
(asyncagents daemon -detach), and each OpenCode process (a TUI with or without --port,
opencode serve, the server behind opencode attach) announces itself to it over the socket
-socket: a loopback port the plugin serves that OpenCode's API on, behind a credential of its
own, its project directory and its process id. The daemon runs one Manager for each OpenCode
it follows, with the tasks of each project in a file of their own under STATE/projects (so
the next OpenCode of that project finds them), answers the plugin's tool calls with the
caller OpenCode gives the plugin, shows a toast in the TUI when a task ends or waits for a
permission, logs one line per launch, run end and notification, and forgets an OpenCode
when its process ends. It exits after -idle without any OpenCode (0: never), or on SIGINT or
SIGTERM; tasks go on running and are picked up by the next daemon.
It takes serve's flags that shape tasks (-max-running, -limit, -max-per-parent, -deadline,
-stale-timeout, the budgets, -notify, -wave-window, -fork-mode, -isolation, …); -url,
-store, -listen, -dir and the PostgreSQL flags are serve's alone.`

// daemonConfig is what the daemon's own flags say.
type daemonConfig struct {
	socket, stateDir string
	idle             time.Duration
	detach, stop     bool
}

func runDaemon(ctx context.Context, fs *flag.FlagSet, args []string, out, errOut io.Writer) error {
	var d daemonConfig
	fs.BoolVar(&d.detach, "detach", false, "start a daemon in the background unless one answers, and return once it does")
	fs.BoolVar(&d.stop, "stop", false, "stop the running daemon")
	fs.DurationVar(&d.idle, "idle", 30*time.Minute, "exit after this long without any OpenCode to follow (0: never)")
	fs.StringVar(&d.socket, "daemon-socket", defaultPath("daemon.sock"), "the daemon's Unix `socket`")
	c, log, err := parseServe(fs, args, errOut)
	if err != nil {
		return err
	}
	if !socketSupported {
		return errors.New("the daemon needs a Unix socket; on Windows run asyncagents serve beside opencode serve")
	}
	if d.socket == "" {
		return errors.New("no state folder: set -daemon-socket")
	}
	d.stateDir = filepath.Dir(d.socket)
	switch {
	case d.stop:
		return stopDaemon(ctx, d, out)
	case d.detach:
		return detachDaemon(ctx, d, args, out)
	}
	return runDaemonLoop(ctx, d, c, log, out)
}

// buildVersion names this build of asyncagents: the module version, and the commit when
// the build has one. The plugin carries the version that installed it, which the daemon
// checks.
func buildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += "+" + s.Value[:12]
		}
	}
	return v
}

// daemon follows every OpenCode its plugins announce.
type daemon struct {
	cfg     serveConfig
	dcfg    daemonConfig
	log     *slog.Logger
	version string

	announcing sync.Mutex // serializes announces (followOnce); before mu
	mu         sync.Mutex
	servers    map[string]*followed // by id
	projects   map[string]*followed // by directory: the one that has the project's store
	lastSeen   time.Time            // when the daemon last followed no OpenCode
	idle       chan struct{}        // closed when the daemon has been idle for dcfg.idle
	wg         sync.WaitGroup       // the followers' goroutines
}

// followed is one OpenCode the daemon follows.
type followed struct {
	id, dir, url string
	pid          int
	client       *opencode.HTTPClient
	m            *asyncagents.Manager
	closeM       func() error
	tools        map[string]asyncagents.Tool
	defs         []toolDef
	stopLog      func()
	done         chan struct{} // closed to stop watching the process
}

// toolDef is a tool as the plugin defines it.
type toolDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

func runDaemonLoop(ctx context.Context, d daemonConfig, c serveConfig, log *slog.Logger, out io.Writer) error {
	unlock, err := lockDaemon(d.stateDir)
	if err != nil {
		return err
	}
	defer unlock()
	ln, err := listenSocket(d.socket, log)
	if err != nil {
		return err
	}
	defer ln.Close()
	pidFile := filepath.Join(d.stateDir, "daemon.pid")
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		return err
	}
	defer os.Remove(pidFile)
	dm := &daemon{cfg: c, dcfg: d, log: log, version: buildVersion(), servers: map[string]*followed{},
		projects: map[string]*followed{}, lastSeen: time.Now(), idle: make(chan struct{})}
	defer dm.closeAll()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", dm.status)
	mux.HandleFunc("POST /v1/announce", dm.announce)
	mux.HandleFunc("POST /v1/call", dm.call)
	mux.HandleFunc("POST /v1/ping", dm.ping)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 60 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	stopIdle := make(chan struct{})
	dm.wg.Add(1)
	go dm.watchIdle(stopIdle)
	fmt.Fprintf(out, "asyncagents daemon %s: pid %d, socket %s\n", dm.version, os.Getpid(), quote(d.socket))
	fmt.Fprintln(out, "Ready.")
	select {
	case <-ctx.Done():
	case <-dm.idle:
		log.Info("asyncagents daemon: no OpenCode to follow; exiting", "idle", d.idle)
	case err = <-errc:
	}
	close(stopIdle)
	sctx, cancel := context.WithTimeout(context.Background(), c.shutdown)
	defer cancel()
	return errors.Join(err, srv.Shutdown(sctx))
}

// watchIdle closes dm.idle once the daemon followed no OpenCode for dcfg.idle.
func (dm *daemon) watchIdle(stop <-chan struct{}) {
	defer dm.wg.Done()
	if dm.dcfg.idle <= 0 {
		return
	}
	t := time.NewTicker(min(dm.dcfg.idle/4, 10*time.Second))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			dm.mu.Lock()
			idle := len(dm.servers) == 0 && time.Since(dm.lastSeen) >= dm.dcfg.idle
			dm.mu.Unlock()
			if idle {
				close(dm.idle)
				return
			}
		}
	}
}

// closeAll stops following every OpenCode and waits for the goroutines.
func (dm *daemon) closeAll() {
	dm.mu.Lock()
	all := make([]*followed, 0, len(dm.servers))
	for _, f := range dm.servers {
		all = append(all, f)
	}
	dm.mu.Unlock()
	for _, f := range all {
		dm.forget(f, "the daemon stops")
	}
	dm.wg.Wait()
}

func (dm *daemon) status(w http.ResponseWriter, _ *http.Request) {
	dm.mu.Lock()
	type server struct {
		ID        string `json:"id"`
		Directory string `json:"directory"`
		PID       int    `json:"pid"`
		URL       string `json:"url"` // the plugin's port (its credential is not told)
	}
	st := struct {
		Version string   `json:"version"`
		PID     int      `json:"pid"`
		Servers []server `json:"servers"`
	}{Version: dm.version, PID: os.Getpid()}
	for _, f := range dm.servers {
		st.Servers = append(st.Servers, server{f.id, f.dir, f.pid, f.url})
	}
	dm.mu.Unlock()
	writeJSON(w, http.StatusOK, st)
}

// hello is what the plugin announces.
type hello struct {
	URL       string `json:"url"`
	Secret    string `json:"secret"`
	Directory string `json:"directory"`
	PID       int    `json:"pid"`
	Plugin    string `json:"plugin"`
	// Started is when the plugin started in that OpenCode, in Unix milliseconds: no run of
	// that process began before it.
	Started int64 `json:"started"`
}

func (h hello) check() error {
	u, err := url.Parse(h.URL)
	switch {
	case err != nil || u.Scheme != "http" || u.Hostname() != "127.0.0.1" || u.Port() == "" || u.Path != "":
		return fmt.Errorf("bad url %q: want http://127.0.0.1:<port>", h.URL)
	case len(h.Secret) < 32:
		return errors.New("no secret")
	case !filepath.IsAbs(h.Directory):
		return fmt.Errorf("bad directory %q", h.Directory)
	case h.PID <= 0:
		return errors.New("bad pid")
	}
	return nil
}

const maxAnnounce = 64 << 10

func (dm *daemon) announce(w http.ResponseWriter, r *http.Request) {
	var h hello
	if err := json.NewDecoder(io.LimitReader(r.Body, maxAnnounce)).Decode(&h); err != nil {
		http.Error(w, "bad announce: "+err.Error(), http.StatusBadRequest)
		return
	}
	if err := h.check(); err != nil {
		http.Error(w, "bad announce: "+err.Error(), http.StatusBadRequest)
		return
	}
	if h.Plugin != dm.version {
		dm.log.Warn("asyncagents daemon: refused a plugin of another version", "plugin", h.Plugin, "daemon", dm.version, "directory", h.Directory, "pid", h.PID)
		http.Error(w, fmt.Sprintf("the asyncagents plugin is of version %s and the running daemon of %s: run asyncagents install again, then asyncagents daemon -stop, and restart OpenCode",
			h.Plugin, dm.version), http.StatusConflict)
		return
	}
	f, err := dm.followOnce(r.Context(), h)
	if err != nil {
		dm.log.Warn("asyncagents daemon: cannot follow OpenCode", "directory", h.Directory, "pid", h.PID, "err", err)
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Server string    `json:"server"`
		Tools  []toolDef `json:"tools"`
	}{f.id, f.defs})
}

// followOnce returns the follower of the OpenCode h announces: the one the daemon has when
// that OpenCode (its pid, directory and port) was announced before, else a new one (follow).
// Announces of one OpenCode are serialized, so that two at once make one follower.
func (dm *daemon) followOnce(ctx context.Context, h hello) (*followed, error) {
	dm.announcing.Lock()
	defer dm.announcing.Unlock()
	dm.mu.Lock()
	for _, f := range dm.servers {
		if f.pid == h.PID && f.dir == h.Directory && f.url == h.URL {
			dm.mu.Unlock()
			return f, nil
		}
	}
	dm.mu.Unlock()
	return dm.follow(ctx, h)
}

// follow starts following the OpenCode h announces: a client through the plugin's port, a
// Manager with the project's store, the log of its tasks and the watch of its process.
func (dm *daemon) follow(ctx context.Context, h hello) (*followed, error) {
	client, err := opencode.NewHTTPClient(h.URL, opencode.WithBasicAuth("asyncagents", h.Secret))
	if err != nil {
		return nil, err
	}
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	version, err := client.Health(hctx)
	if err != nil {
		client.CloseIdleConnections()
		return nil, fmt.Errorf("OpenCode (pid %d) does not answer through its plugin at %s: %w", h.PID, h.URL, err)
	}
	f := &followed{id: newFollowID(h.PID), dir: h.Directory, url: h.URL, pid: h.PID, client: client, done: make(chan struct{})}
	dm.mu.Lock()
	if old := dm.projects[h.Directory]; old != nil && !processAlive(old.pid) { // its watch has not seen it yet
		dm.mu.Unlock()
		dm.forget(old, "its process ended")
		dm.mu.Lock()
	}
	var store closingStore
	if _, taken := dm.projects[h.Directory]; !taken {
		if store, err = asyncagents.NewFileStore(projectStore(dm.dcfg.stateDir, h.Directory)); err != nil {
			dm.mu.Unlock()
			client.CloseIdleConnections()
			return nil, err
		}
		dm.projects[h.Directory] = f
	} else {
		dm.log.Warn("asyncagents daemon: another OpenCode of this project has its task file; this one's tasks are kept in memory only",
			"directory", h.Directory, "pid", h.PID)
		store = memoryStore{&asyncagents.MemoryStore{}}
	}
	dm.mu.Unlock()
	var started []asyncagents.Option
	if h.Started > 0 { // a run of the project's store aborted before then was cut by an earlier OpenCode's stop
		started = append(started, asyncagents.WithServerStarted(time.UnixMilli(h.Started)))
	}
	m, closeM, err := openManager(client, store, dm.cfg, dm.log, started...)
	if err != nil {
		dm.releaseProject(f)
		client.CloseIdleConnections()
		return nil, err
	}
	f.m, f.closeM = m, closeM
	f.tools = map[string]asyncagents.Tool{}
	for _, t := range asyncagents.Tools(m) {
		f.tools[t.Name] = t
		f.defs = append(f.defs, toolDef{t.Name, t.Description, t.Parameters})
	}
	if f.stopLog, err = logActivity(m, dm.log.With("directory", h.Directory), f.toast); err != nil {
		dm.releaseProject(f)
		return nil, errors.Join(err, closeM())
	}
	dm.mu.Lock()
	dm.servers[f.id] = f
	dm.mu.Unlock()
	dm.wg.Add(1)
	go dm.watch(f)
	dm.log.Info("asyncagents daemon: following OpenCode", "opencode", version, "directory", h.Directory, "pid", h.PID, "server", f.id)
	return f, nil
}

// memoryStore is a MemoryStore with the Close of a closingStore.
type memoryStore struct{ *asyncagents.MemoryStore }

func (memoryStore) Close() error { return nil }

// releaseProject gives up f's claim on its project's store.
func (dm *daemon) releaseProject(f *followed) {
	dm.mu.Lock()
	defer dm.mu.Unlock()
	if dm.projects[f.dir] == f {
		delete(dm.projects, f.dir)
	}
}

// projectStore is the file of the tasks of the project at dir: STATE/projects/<hash>/tasks.jsonl,
// the hash the first 16 bytes of the directory's SHA-256 in hex.
func projectStore(state, dir string) string {
	sum := sha256.Sum256([]byte(dir))
	return filepath.Join(state, "projects", hex.EncodeToString(sum[:16]), "tasks.jsonl")
}

// newFollowID names an OpenCode the daemon follows: its pid and random bytes.
func newFollowID(pid int) string {
	return "oc" + strconv.Itoa(pid) + "_" + strings.ToLower(rand.Text()[:10])
}

// watch forgets f once its process has ended, checking every second.
func (dm *daemon) watch(f *followed) {
	defer dm.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-f.done:
			return
		case <-t.C:
			if !processAlive(f.pid) {
				go dm.forget(f, "its process ended")
				return
			}
		}
	}
}

// forget stops following f: its Manager is closed (its tasks stay in the project's store,
// for the next OpenCode of the project).
func (dm *daemon) forget(f *followed, why string) {
	dm.mu.Lock()
	if dm.servers[f.id] != f {
		dm.mu.Unlock()
		return
	}
	delete(dm.servers, f.id)
	if len(dm.servers) == 0 {
		dm.lastSeen = time.Now()
	}
	close(f.done)
	dm.mu.Unlock()
	f.stopLog()
	err := f.closeM()
	dm.releaseProject(f)
	f.client.CloseIdleConnections()
	dm.log.Info("asyncagents daemon: stopped following OpenCode", "directory", f.dir, "pid", f.pid, "why", why, "err", err)
}

// ping answers 200 when the daemon follows the OpenCode the plugin names ({"server": id}),
// else 404: the plugin then announces it again.
func (dm *daemon) ping(w http.ResponseWriter, r *http.Request) {
	var p struct {
		Server string `json:"server"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, maxAnnounce)).Decode(&p); err != nil {
		http.Error(w, "bad ping: "+err.Error(), http.StatusBadRequest)
		return
	}
	if dm.lookup(w, p.Server) != nil {
		writeJSON(w, http.StatusOK, struct{}{})
	}
}

// lookup returns the OpenCode the daemon follows under id, or nil after answering 404, on
// which the plugin announces its OpenCode again.
func (dm *daemon) lookup(w http.ResponseWriter, id string) *followed {
	dm.mu.Lock()
	f := dm.servers[id]
	dm.mu.Unlock()
	if f == nil {
		http.Error(w, "unknown OpenCode: announce it again", http.StatusNotFound)
	}
	return f
}

// callRequest is a tool call the plugin passes on.
type callRequest struct {
	Server string             `json:"server"`
	Tool   string             `json:"tool"`
	Caller asyncagents.Caller `json:"caller"`
	Args   json.RawMessage    `json:"args"`
}

const maxCall = 1 << 20

func (dm *daemon) call(w http.ResponseWriter, r *http.Request) {
	var c callRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, maxCall)).Decode(&c); err != nil {
		http.Error(w, "bad call: "+err.Error(), http.StatusBadRequest)
		return
	}
	f := dm.lookup(w, c.Server)
	if f == nil {
		return
	}
	t, ok := f.tools[c.Tool]
	if !ok {
		http.Error(w, "unknown tool "+strconv.Quote(c.Tool), http.StatusNotFound)
		return
	}
	if c.Caller.SessionID == "" {
		http.Error(w, "no calling session", http.StatusBadRequest)
		return
	}
	if len(c.Args) == 0 || string(c.Args) == "null" {
		c.Args = json.RawMessage("{}")
	}
	out, err := t.Handler(r.Context(), c.Caller, c.Args)
	if err != nil {
		writeJSON(w, http.StatusOK, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"output": out})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// toast shows in f's TUI what happened to t: a run that ended, or a permission it waits
// for (POST /tui/show-toast; a server without a TUI takes it and shows nothing).
func (f *followed) toast(t asyncagents.Task, what activity) {
	var msg, variant string
	desc := strings.Join(strings.Fields(t.Description), " ")
	switch what {
	case activityEnded:
		msg, variant = fmt.Sprintf("Task %q %s in %v.", desc, t.Status, t.Duration(t.Completed).Round(time.Second)), "success"
		if t.Status != asyncagents.StatusCompleted {
			variant = "warning"
		}
	case activityPermission:
		msg, variant = fmt.Sprintf("Task %q waits for a permission (%s).", desc, t.Permission.Permission), "info"
	default:
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = f.client.ShowToast(ctx, opencode.Toast{Title: "asyncagents", Message: msg, Variant: variant, Duration: 8 * time.Second})
}
