package opencodetest

import (
	"context"
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
	"time"
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

var listenLine = regexp.MustCompile(`listening on (http://[0-9.:\[\]a-z]+)`)

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
	cmd, err := s.command(port)
	if err != nil {
		return err
	}
	mark := s.logs.Len() // the listen line of this process comes after what earlier ones printed
	exited, err := s.start(cmd)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.startTimeout)
	defer cancel()
	url, err := s.listening(ctx, port, mark, exited)
	if err != nil {
		return err
	}
	s.URL = url
	return s.healthy(ctx, exited)
}

// command returns the command that runs the server on port: `opencode serve` (with --pure
// unless WithPlugins), or the TUI (WithTUI), in the project folder, with the isolated
// environment, its output going to the log, in a process group of its own.
func (s *Server) command(port int) (*exec.Cmd, error) {
	args := []string{"serve", "--hostname", "127.0.0.1", "--port", strconv.Itoa(port), "--print-logs"}
	if !s.plugins {
		args = append(args, "--pure")
	}
	cmd := exec.Command(s.bin, args...)
	if s.tui {
		c, err := tuiCommand(s.bin, append(args[1:len(args):len(args)], "--log-level", "WARN"))
		if err != nil {
			return nil, err
		}
		cmd = c
	}
	cmd.Dir = s.Directory
	cmd.Env = s.environ()
	if s.tui {
		cmd.Env = append(cmd.Env, "TERM=xterm-256color")
	}
	cmd.Stdout = s.logs
	cmd.Stderr = s.logs
	startOwnGroup(cmd)
	cmd.WaitDelay = 2 * time.Second
	return cmd, nil
}

// start starts cmd as the server's process, unless the server is closed, and the goroutine
// that waits for it; the channel it returns is closed when the process has exited.
func (s *Server) start(cmd *exec.Cmd) (chan struct{}, error) {
	exited := make(chan struct{})
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errServerClosed
	}
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("opencodetest: start %s: %w", s.bin, err)
	}
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	return exited, nil
}

// listening returns the URL the process listens on: the one of the listen line it printed
// after the first mark bytes of the log (the TUI prints none: its server is on port). It
// fails with errExitedEarly when the process exits first.
func (s *Server) listening(ctx context.Context, port, mark int, exited <-chan struct{}) (string, error) {
	if s.tui { // the TUI prints no listen line: its server is where it was told
		return "http://127.0.0.1:" + strconv.Itoa(port), nil
	}
	for {
		if m := listenLine.FindStringSubmatch(s.logs.Since(mark)); m != nil {
			return m[1], nil
		}
		select {
		case <-exited:
			return "", fmt.Errorf("%w:\n%s", errExitedEarly, s.logs.Tail(4000))
		case <-ctx.Done():
			return "", fmt.Errorf("opencodetest: opencode serve did not listen within %v:\n%s", s.startTimeout, s.logs.Tail(4000))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// healthy waits until the server at URL answers GET /global/health, and sets Version.
func (s *Server) healthy(ctx context.Context, exited <-chan struct{}) error {
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
