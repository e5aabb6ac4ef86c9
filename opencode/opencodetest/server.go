package opencodetest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents/opencode"
)

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
