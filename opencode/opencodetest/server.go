package opencodetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents/opencode"
)

// ErrNoBinary is returned by NewServer when no opencode binary can be found.
var ErrNoBinary = errors.New("opencodetest: opencode binary not found: run `make opencode` (installs the pinned opencode-ai with npm into .cache/opencode) or set OPENCODE_BIN")

// binaryPath finds the opencode binary: $OPENCODE_BIN, else .cache/opencode/node_modules/.bin/opencode
// in the nearest folder above the working directory that holds a go.mod.
func binaryPath() (string, error) {
	if p := os.Getenv("OPENCODE_BIN"); p != "" {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		return "", fmt.Errorf("%w (OPENCODE_BIN=%s does not exist)", ErrNoBinary, p)
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", ErrNoBinary
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			p := filepath.Join(dir, ".cache", "opencode", "node_modules", ".bin", "opencode")
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", ErrNoBinary
		}
		dir = parent
	}
}

// ServerOption configures NewServer and Start.
type ServerOption interface{ applyServer(*serverConfig) }

type serverOptionFunc func(*serverConfig)

func (f serverOptionFunc) applyServer(c *serverConfig) { f(c) }

type serverConfig struct {
	password     string
	model        *Model
	config       map[string]any
	files        map[string]string
	mcp          map[string]opencode.MCPConfig
	plugins      bool
	startTimeout time.Duration
	root         string
	tui          bool
}

// WithPassword starts the server with OPENCODE_SERVER_PASSWORD, so every route needs HTTP
// Basic auth (user "opencode"). Server.Client sets the credentials.
func WithPassword(pw string) ServerOption {
	return serverOptionFunc(func(c *serverConfig) { c.password = pw })
}

// WithModel uses m as the scripted model instead of a new one; the caller closes m.
func WithModel(m *Model) ServerOption {
	return serverOptionFunc(func(c *serverConfig) { c.model = m })
}

// WithConfig merges top-level keys into the project's opencode.json, e.g.
// {"compaction": {"prune": true}}.
func WithConfig(cfg map[string]any) ServerOption {
	return serverOptionFunc(func(c *serverConfig) {
		for k, v := range cfg {
			c.config[k] = v
		}
	})
}

// WithFiles writes files (path relative to the project folder → content) into the project.
func WithFiles(files map[string]string) ServerOption {
	return serverOptionFunc(func(c *serverConfig) {
		for k, v := range files {
			c.files[k] = v
		}
	})
}

// WithPlugins starts the server with external plugins on — without --pure, which every other
// server of this package gets — and writes files (file name → JavaScript source) into the
// project's .opencode/plugin/ folder, where OpenCode loads them from (an ES module with a
// named export `async (ctx) => hooks`; a plugin without imports needs no npm package).
//
// With plugins on, OpenCode runs `npm install @opencode-ai/plugin` in the background for
// each of its config folders (the project's .opencode and $XDG_CONFIG_HOME/opencode), and
// plugin loading waits for it: offline, npm gives up only after its retries, and the first
// request to the project's instance waits about 70 s (online, the package would be
// downloaded). So the server gets both folders seeded with an empty node_modules and a
// package-lock.json that lists the package, which OpenCode takes as installed: no install
// is attempted and no network is used. The server also runs with npm_config_offline=true
// and npm_config_fetch_retries=0, which alone make an install fail at once, in case one
// starts all the same. The first prompt then takes about as long as under --pure.
func WithPlugins(files map[string]string) ServerOption {
	return serverOptionFunc(func(c *serverConfig) {
		c.plugins = true
		for name, src := range files {
			c.files[".opencode/plugin/"+name] = src
		}
	})
}

// WithMCP adds an MCP server to the project's opencode.json ("mcp": {name: cfg}); repeat it
// for more. A remote server that does not answer when the instance starts is "failed" until
// opencode.HTTPClient.ConnectMCP connects it. To add one to a running server, use
// opencode.HTTPClient.AddMCP.
func WithMCP(name string, cfg opencode.MCPConfig) ServerOption {
	return serverOptionFunc(func(c *serverConfig) { c.mcp[name] = cfg })
}

// WithTUI runs OpenCode's terminal UI, `opencode --port N`, instead of `opencode serve`: the
// TUI in a pseudo-terminal (util-linux script(1), which Unix systems have), with its server
// listening on the port, as a user runs OpenCode when a program is to reach its server. The
// server answers the same API; the tests that use it check what a TUI user sees from
// programs beside it. script gives the TUI a session of its own: stopping script's process
// group (Close, Kill) hangs up the terminal, which ends the TUI. Unix only: NewServer fails
// elsewhere or without script.
func WithTUI() ServerOption {
	return serverOptionFunc(func(c *serverConfig) { c.tui = true })
}

// WithStartTimeout bounds how long NewServer waits for the server to answer. Defaults to 60s.
func WithStartTimeout(d time.Duration) ServerOption {
	return serverOptionFunc(func(c *serverConfig) { c.startTimeout = d })
}

// withRoot puts the server's folders under root instead of a new temporary folder.
func withRoot(root string) ServerOption {
	return serverOptionFunc(func(c *serverConfig) { c.root = root })
}

// Server is a real `opencode serve` process with an isolated HOME and XDG folders, a
// temporary project folder whose opencode.json points at a scripted Model, and a loopback
// port. Close stops the process group and removes the folders.
type Server struct {
	// URL is the server's base URL, e.g. "http://127.0.0.1:41234".
	URL string
	// Directory is the project folder (the server's working directory).
	Directory string
	// Home is the isolated HOME; XDG folders live below it.
	Home string
	// Model is the scripted model the server's default provider points at.
	Model *Model
	// Version is what GET /global/health reported.
	Version string

	password     string
	plugins      bool // without --pure, see WithPlugins
	tui          bool // the TUI with --port, see WithTUI
	ownModel     bool
	ownRoot      string
	bin          string
	startTimeout time.Duration
	logs         *logBuffer
	closeOnce    sync.Once
	projectJSON  []byte // the project's opencode.json, for NewProject

	clientsMu sync.Mutex
	clients   []*opencode.HTTPClient // from Client: Close closes their idle connections

	mu     sync.Mutex // guards the process fields: Restart replaces them
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
	closed bool
}

var listenLine = regexp.MustCompile(`listening on (http://[0-9.:\[\]a-z]+)`)

// NewServer starts `opencode serve` and waits until it answers GET /global/health. It returns
// [ErrNoBinary] (wrapped) when the binary is missing. On Unix the server and its children run
// in their own process group, which Close signals.
func NewServer(ctx context.Context, opts ...ServerOption) (srv *Server, err error) {
	cfg := &serverConfig{config: map[string]any{}, files: map[string]string{}, mcp: map[string]opencode.MCPConfig{},
		startTimeout: 60 * time.Second}
	for _, o := range opts {
		o.applyServer(cfg)
	}
	bin, err := binaryPath()
	if err != nil {
		return nil, err
	}
	s := &Server{Model: cfg.model, password: cfg.password, plugins: cfg.plugins, tui: cfg.tui, bin: bin,
		startTimeout: cfg.startTimeout, logs: &logBuffer{}}
	if s.Model == nil {
		s.Model, s.ownModel = NewModel(), true
	}
	root := cfg.root
	if root == "" {
		if root, err = os.MkdirTemp("", "opencodetest-"); err != nil {
			s.Close()
			return nil, err
		}
		s.ownRoot = root
	}
	defer func() {
		if err != nil {
			s.Close()
			srv = nil
		}
	}()
	s.Home = filepath.Join(root, "home")
	s.Directory = filepath.Join(root, "project")
	if err := s.writeProject(cfg); err != nil {
		return nil, err
	}
	err = s.launch(ctx, 0)
	if errors.Is(err, errExitedEarly) { // the free port was taken meanwhile, perhaps
		s.stop()
		err = s.launch(ctx, 0)
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

// launch starts `opencode serve` on port (0: a free port) and waits until it answers
// GET /global/health, then sets URL and Version. On failure the process is left for stop.
func (s *Server) launch(ctx context.Context, port int) error {
	if port == 0 {
		// Not --port 0: OpenCode then takes 4096 whenever it is free, so a restarted server
		// could come back on the port another server just left, and its clients reach a
		// server that is not theirs.
		p, err := freePort()
		if err != nil {
			return fmt.Errorf("opencodetest: find a free port: %w", err)
		}
		port = p
	}
	args := []string{"serve", "--hostname", "127.0.0.1", "--port", strconv.Itoa(port), "--print-logs"}
	if !s.plugins {
		args = append(args, "--pure")
	}
	cmd := exec.Command(s.bin, args...)
	if s.tui {
		c, err := tuiCommand(s.bin, append(args[1:len(args):len(args)], "--log-level", "WARN"))
		if err != nil {
			return err
		}
		cmd = c
	}
	cmd.Dir = s.Directory
	cmd.Env = s.environ()
	if s.tui {
		cmd.Env = append(cmd.Env, "TERM=xterm-256color")
	}
	mark := s.logs.Len() // the listen line of this process comes after what earlier ones printed
	cmd.Stdout = s.logs
	cmd.Stderr = s.logs
	startOwnGroup(cmd)
	cmd.WaitDelay = 2 * time.Second
	exited := make(chan struct{})
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errServerClosed
	}
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		return fmt.Errorf("opencodetest: start %s: %w", s.bin, err)
	}
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()

	ctx, cancel := context.WithTimeout(ctx, s.startTimeout)
	defer cancel()
	url := ""
	if s.tui { // the TUI prints no listen line: its server is where it was told
		url = "http://127.0.0.1:" + strconv.Itoa(port)
	}
	for url == "" {
		if m := listenLine.FindStringSubmatch(s.logs.Since(mark)); m != nil {
			url = m[1]
			break
		}
		select {
		case <-exited:
			return fmt.Errorf("%w:\n%s", errExitedEarly, s.logs.Tail(4000))
		case <-ctx.Done():
			return fmt.Errorf("opencodetest: opencode serve did not listen within %v:\n%s", s.startTimeout, s.logs.Tail(4000))
		case <-time.After(20 * time.Millisecond):
		}
	}
	s.URL = url
	c := s.Client()
	for {
		// Each try is bounded: OpenCode never answers a request that reaches it in a moment
		// while it starts (the TUI listens before that moment is over).
		hctx, hcancel := context.WithTimeout(ctx, 2*time.Second)
		v, err := c.Health(hctx)
		hcancel()
		if err == nil {
			s.Version = v
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("opencodetest: opencode serve exited:\n%s", s.logs.Tail(4000))
		case <-ctx.Done():
			return fmt.Errorf("opencodetest: opencode serve not healthy within %v (%v):\n%s", s.startTimeout, err, s.logs.Tail(4000))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

var (
	errExitedEarly  = errors.New("opencodetest: opencode serve exited before listening")
	errServerClosed = errors.New("opencodetest: server closed")
)

// Restart stops the server's process group as Close does (SIGTERM, then SIGKILL after 5 s;
// on Windows it kills the process) and starts `opencode serve` again on the same HOME, XDG
// folders and project folder, with the same configuration and Model. What the server stored
// survives: sessions, their messages and parts, the last step of an interrupted run as it
// was (no finish, no completion time, no error). Runs in progress do not: after the restart
// every session is idle and nothing tells clients so (no event is sent for them).
//
// The server comes back on the same port when it is free (it returns when the new process
// answers GET /global/health), else on another; Restart then updates URL. Clients made with
// [Server.Client] before keep the URL they were made with. OpenCode 1.18.33 accepts
// connections a moment before it is ready and never answers requests that arrive then: a
// client that keeps calling the port during Restart can be left waiting. To restart under a
// client without that, put a [Proxy] in between, make it refuse requests during Restart, then
// [Proxy.SetUpstream] to the new URL.
//
// Restart returns an error when ctx ends or the server does not come back (bounded by
// [WithStartTimeout]); the server is then stopped and Close still removes its folders. It
// also updates Version and PID. It must not be called concurrently with Close, Client,
// another Restart or reads of URL; after Close it returns an error.
func (s *Server) Restart(ctx context.Context) error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return errServerClosed
	}
	port := 0
	if u, err := neturl.Parse(s.URL); err == nil {
		port, _ = strconv.Atoi(u.Port())
	}
	s.stop()
	err := s.launch(ctx, port)
	if errors.Is(err, errExitedEarly) && port != 0 { // the port was taken meanwhile
		s.stop()
		err = s.launch(ctx, 0)
	}
	if err != nil {
		s.stop()
		return fmt.Errorf("opencodetest: restart: %w", err)
	}
	return nil
}

// Kill ends the server as a crash does: SIGKILL to its process group (on Windows, to the
// server process), with no chance to write anything more, and waits for it to exit. What it
// stored stays in its folders; [Server.Restart] starts it again on them. Kill returns an
// error after Close or when no server runs.
func (s *Server) Kill() error {
	s.mu.Lock()
	cmd, exited, closed := s.cmd, s.exited, s.closed
	s.mu.Unlock()
	if closed {
		return errServerClosed
	}
	if cmd == nil || cmd.Process == nil {
		return errors.New("opencodetest: kill: no server runs")
	}
	if err := killGroup(cmd.Process); err != nil {
		return fmt.Errorf("opencodetest: kill: %w", err)
	}
	<-exited
	return nil
}

// stop ends the current process group, if any, and waits for it.
func (s *Server) stop() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	p := cmd.Process
	_ = terminateGroup(p)
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		_ = killGroup(p)
		<-exited
	}
	// Children that ignored SIGTERM (a tool's shell) go with the group. Wait until the group
	// is empty: before 1.17 the npm bin is a Node launcher whose child, the server itself,
	// may still be exiting when the launcher is gone. killGroup fails once no member is left
	// (on Windows: once the process has exited).
	for deadline := time.Now().Add(5 * time.Second); killGroup(p) == nil && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *Server) writeProject(cfg *serverConfig) error {
	for _, d := range []string{s.Directory, filepath.Join(s.Home, ".config"), filepath.Join(s.Home, ".local", "share"),
		filepath.Join(s.Home, ".cache"), filepath.Join(s.Home, ".local", "state")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	conf := map[string]any{
		"$schema": "https://opencode.ai/config.json",
		"provider": map[string]any{ProviderID: map[string]any{
			"npm":     "@ai-sdk/openai-compatible",
			"name":    "Scripted",
			"options": map[string]any{"baseURL": s.Model.BaseURL(), "apiKey": "scripted"},
			"models":  map[string]any{ModelID: map[string]any{"name": "Scripted M1"}},
		}},
		"model":       ProviderID + "/" + ModelID,
		"small_model": ProviderID + "/" + ModelID,
		"autoupdate":  false,
		"share":       "disabled",
	}
	for k, v := range cfg.config {
		conf[k] = v
	}
	if len(cfg.mcp) > 0 {
		servers := map[string]any{}
		if m, ok := conf["mcp"].(map[string]any); ok { // from WithConfig
			for k, v := range m {
				servers[k] = v
			}
		}
		for k, v := range cfg.mcp {
			servers[k] = v
		}
		conf["mcp"] = servers
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(s.Directory, "opencode.json"), b, 0o644); err != nil {
		return err
	}
	s.projectJSON = b
	if cfg.plugins {
		for _, dir := range []string{filepath.Join(s.Directory, ".opencode"), filepath.Join(s.Home, ".config", "opencode")} {
			if err := seedPluginDependency(dir); err != nil {
				return err
			}
		}
	}
	for name, content := range cfg.files {
		p := filepath.Join(s.Directory, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// NewProject creates another project folder, name, beside Directory, with the same
// opencode.json (the scripted model, WithConfig and WithMCP entries; not WithFiles), and
// returns its absolute path. The running server serves it as one more instance when a request
// names it (?directory= or the x-opencode-directory header): one server, several projects, as
// `opencode serve` runs for a user with several repositories. name must be a plain folder name
// other than "project" and "home"; the folder is removed with the server's.
func (s *Server) NewProject(name string) (string, error) {
	if name == "" || name != filepath.Base(name) || name == "." || name == ".." || name == "project" || name == "home" {
		return "", fmt.Errorf("opencodetest: NewProject: %q is not a free plain folder name", name)
	}
	dir := filepath.Join(filepath.Dir(s.Directory), name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", fmt.Errorf("opencodetest: NewProject: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "opencode.json"), s.projectJSON, 0o644); err != nil {
		return "", fmt.Errorf("opencodetest: NewProject: %w", err)
	}
	return dir, nil
}

// environ is the process environment without the caller's HOME, XDG and OPENCODE settings,
// plus the isolated folders and switches that keep OpenCode off the network.
func (s *Server) environ() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "HOME" || strings.HasPrefix(k, "XDG_") || strings.HasPrefix(k, "OPENCODE_") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env,
		"HOME="+s.Home,
		"XDG_CONFIG_HOME="+filepath.Join(s.Home, ".config"),
		"XDG_DATA_HOME="+filepath.Join(s.Home, ".local", "share"),
		"XDG_CACHE_HOME="+filepath.Join(s.Home, ".cache"),
		"XDG_STATE_HOME="+filepath.Join(s.Home, ".local", "state"),
		"OPENCODE_DISABLE_AUTOUPDATE=1",
		"OPENCODE_DISABLE_MODELS_FETCH=1",
		"OPENCODE_DISABLE_LSP_DOWNLOAD=1",
		"OPENCODE_DISABLE_SHARE=1",
		"OPENCODE_DISABLE_CLAUDE_CODE=1",
		"OPENCODE_DISABLE_EXTERNAL_SKILLS=1",
	)
	if s.password != "" {
		env = append(env, "OPENCODE_SERVER_PASSWORD="+s.password)
	}
	if s.plugins {
		env = append(env, "npm_config_offline=true", "npm_config_fetch_retries=0")
	}
	return env
}

// pluginPackage is the package OpenCode installs into each config folder when plugins are on.
const pluginPackage = "@opencode-ai/plugin"

// seedPluginDependency makes a config folder look as if OpenCode had installed its plugin
// package there already: a package.json that depends on it, a package-lock.json whose root
// package lists it, and a node_modules folder. OpenCode 1.18.33 skips the install when
// node_modules exists and the lock's root package has every dependency. Files that exist
// are left as they are.
func seedPluginDependency(dir string) error {
	if err := os.MkdirAll(filepath.Join(dir, "node_modules"), 0o755); err != nil {
		return err
	}
	deps := map[string]string{pluginPackage: "*"}
	files := map[string]any{
		"package.json": map[string]any{"dependencies": deps},
		"package-lock.json": map[string]any{"name": filepath.Base(dir), "lockfileVersion": 3, "requires": true,
			"packages": map[string]any{"": map[string]any{"dependencies": deps}}},
	}
	for name, v := range files {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			continue
		}
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Client returns an HTTP client for the server, with its credentials and scoped to its
// project folder. Extra options are applied after those.
func (s *Server) Client(opts ...opencode.ClientOption) *opencode.HTTPClient {
	base := []opencode.ClientOption{opencode.WithDirectory(s.Directory)}
	if s.password != "" {
		base = append(base, opencode.WithBasicAuth("opencode", s.password))
	}
	c, err := opencode.NewHTTPClient(s.URL, append(base, opts...)...)
	if err != nil {
		panic(err) // the URL comes from the server itself
	}
	s.clientsMu.Lock()
	s.clients = append(s.clients, c)
	s.clientsMu.Unlock()
	return c
}

// PID returns the server's process id. On Unix it is also the id of the server's process
// group.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Logs returns what the server printed so far (stdout and stderr).
func (s *Server) Logs() string { return s.logs.String() }

// Close stops the server's process group (SIGTERM, then SIGKILL after 5 s; on Windows it
// kills the server process), waits for it, closes the model it created and removes the
// folders it created. It is idempotent.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.clientsMu.Lock()
		for _, c := range s.clients {
			c.CloseIdleConnections()
		}
		s.clientsMu.Unlock()
		s.stop()
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		if s.ownModel && s.Model != nil {
			s.Model.Close()
		}
		if s.ownRoot != "" {
			_ = os.RemoveAll(s.ownRoot)
		}
	})
}

// Start starts a server for a test and closes it in t.Cleanup. Without a binary it skips the
// test with a message saying how to install one; under CI=true it fails the test instead.
func Start(t testing.TB, opts ...ServerOption) *Server {
	t.Helper()
	srv, err := NewServer(context.Background(), append([]ServerOption{withRoot(t.TempDir())}, opts...)...)
	if err != nil {
		skipOrFail(t, err)
	}
	t.Cleanup(srv.Close)
	return srv
}

func skipOrFail(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, ErrNoBinary) && os.Getenv("CI") != "true" {
		t.Skip(err)
	}
	t.Fatal(err)
}

// Shared is one server shared by the tests of a package, started on first use. The zero
// value is ready; set Options before the first Get. Close it from TestMain after m.Run.
type Shared struct {
	Options []ServerOption

	once sync.Once
	srv  *Server
	err  error
}

// Get returns the shared server, starting it on the first call. It skips or fails t as
// Start does when the server cannot be started.
func (sh *Shared) Get(t testing.TB) *Server {
	t.Helper()
	sh.once.Do(func() { sh.srv, sh.err = NewServer(context.Background(), sh.Options...) })
	if sh.err != nil {
		skipOrFail(t, sh.err)
	}
	return sh.srv
}

// Close stops the shared server if it was started.
func (sh *Shared) Close() {
	sh.once.Do(func() {}) // a Get after Close starts nothing
	if sh.srv != nil {
		sh.srv.Close()
	}
}

// logBuffer collects process output, keeping the last 1 MiB.
type logBuffer struct {
	mu    sync.Mutex
	buf   []byte
	total int // bytes written so far
}

const maxLog = 1 << 20

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	l.total += len(p)
	if len(l.buf) > maxLog {
		l.buf = append(l.buf[:0], l.buf[len(l.buf)-maxLog:]...)
	}
	return len(p), nil
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.buf)
}

// Len returns how many bytes were written so far (including those no longer kept).
func (l *logBuffer) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

// Since returns what was written after the first mark bytes, as far as it is kept.
func (l *logBuffer) Since(mark int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	skip := mark - (l.total - len(l.buf))
	if skip <= 0 {
		return string(l.buf)
	}
	return string(l.buf[skip:])
}

// Tail returns the last n bytes of the log.
func (l *logBuffer) Tail(n int) string {
	s := l.String()
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// tuiCommand returns the command that runs `bin args…` (the TUI) in a pseudo-terminal of
// its own: script -q -e -f -c '<command>' /dev/null, the command quoted for the shell.
func tuiCommand(bin string, args []string) (*exec.Cmd, error) {
	script, err := exec.LookPath("script")
	if err != nil {
		return nil, fmt.Errorf("opencodetest: WithTUI needs script(1): %w", err)
	}
	words := make([]string, 0, len(args)+1)
	for _, w := range append([]string{bin}, args...) {
		words = append(words, "'"+strings.ReplaceAll(w, "'", `'\''`)+"'")
	}
	return exec.Command(script, "-q", "-e", "-f", "-c", strings.Join(words, " "), "/dev/null"), nil
}
