// Package pgstoretest starts throwaway PostgreSQL servers for tests: [Start] runs initdb and
// postgres from the machine's PostgreSQL installation in a new temporary directory, on a
// loopback TCP port with a random password, and stops the server by its process id when the
// test ends. [Server.NewDatabase] gives each test a database of its own on one server, such
// as the one a package's tests share ([Shared]).
//
// The binaries are found in $PG_BIN, else in the newest /usr/lib/postgresql/N/bin (Debian's
// layout), else on $PATH. Without them Start skips the test with a message saying how to
// install them; under CI=true it fails the test instead. Run as root, the server runs as the
// user "postgres" (initdb refuses root), which owns the temporary directory.
package pgstoretest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNoBinary is the error of [Start] when initdb or postgres cannot be found.
var ErrNoBinary = errors.New("pgstoretest: PostgreSQL binaries not found (install Debian's postgresql, or set PG_BIN to the folder of initdb and postgres)")

// Server is one running PostgreSQL server (postmaster) started by [Start].
type Server struct {
	dir      string // the temporary directory: data/, the socket, the log
	bin      string
	port     int
	password string
	user     *runAs

	mu     sync.Mutex
	cmd    *exec.Cmd  // nil while stopped
	exited chan error // receives cmd.Wait's result
	n      int        // databases made
}

// Start starts a server for tb and stops it (SIGQUIT to its process group, then SIGKILL)
// and removes its directory when tb ends. It fails tb when the server does not answer
// within 30 s.
func Start(tb testing.TB) *Server {
	tb.Helper()
	s, err := start()
	if errors.Is(err, ErrNoBinary) && os.Getenv("CI") != "true" {
		tb.Skip(err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	return s
}

// Shared is one server shared by the tests of a package, started on first use; each test
// takes a database of its own ([Server.NewDatabase]) and leaves the server running (a test
// that stops or kills its server needs one of its own, from [Start]). The zero value is
// ready. Close it from TestMain after m.Run.
type Shared struct {
	once sync.Once
	srv  *Server
	err  error
}

// Get returns the shared server, starting it on the first call. It skips or fails tb as
// Start does when the server cannot be started.
func (sh *Shared) Get(tb testing.TB) *Server {
	tb.Helper()
	sh.once.Do(func() { sh.srv, sh.err = start() })
	if errors.Is(sh.err, ErrNoBinary) && os.Getenv("CI") != "true" {
		tb.Skip(sh.err)
	}
	if sh.err != nil {
		tb.Fatal(sh.err)
	}
	return sh.srv
}

// Close stops the shared server, if it was started, and removes its directory.
func (sh *Shared) Close() {
	sh.once.Do(func() {}) // a Get after Close starts nothing
	if sh.srv != nil {
		sh.srv.Close()
	}
}

func start() (*Server, error) {
	bin, err := findBin()
	if err != nil {
		return nil, err
	}
	u, err := serverUser()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pgstoretest-")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, bin: bin, user: u, password: randomHex(16)}
	if err := s.init(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := s.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

func (s *Server) init() error {
	if err := s.user.own(s.dir); err != nil {
		return err
	}
	pw := filepath.Join(s.dir, "pwfile")
	if err := os.WriteFile(pw, []byte(s.password+"\n"), 0o600); err != nil {
		return err
	}
	if err := s.user.own(pw); err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(s.bin, "initdb"), "-D", filepath.Join(s.dir, "data"), "-U", "postgres",
		"--pwfile", pw, "-A", "scram-sha-256", "-E", "UTF8", "--no-sync", "--locale", "C")
	s.user.apply(cmd)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pgstoretest: initdb: %v: %s", err, out)
	}
	return os.Remove(pw)
}

// Start starts the server again after [Server.Stop] or [Server.Kill], on the same port with
// the same data; it waits until the server accepts connections. Start of a running server
// does nothing. After a Kill, the killed server's backends (each in a process group of its
// own) may outlive it a moment, holding its shared memory: Start tries again for up to 10 s
// while PostgreSQL refuses to start for that.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return nil
	}
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; {
		err = s.startLocked()
		if err == nil || !strings.Contains(err.Error(), "pre-existing shared memory block") || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startLocked makes one attempt at Start.
func (s *Server) startLocked() error {
	if s.port == 0 {
		p, err := freePort()
		if err != nil {
			return err
		}
		s.port = p
	}
	log, err := os.OpenFile(filepath.Join(s.dir, "postgres.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command(filepath.Join(s.bin, "postgres"), "-D", filepath.Join(s.dir, "data"),
		"-p", strconv.Itoa(s.port), "-k", s.dir, "-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=off", "-c", "max_connections=200", "-c", "shared_buffers=32MB")
	cmd.Stdout, cmd.Stderr = log, log
	s.user.apply(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgstoretest: start postgres: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := pgx.Connect(ctx, s.DSN("postgres"))
		cancel()
		if err == nil {
			c.Close(context.Background())
			// The waiting goroutine ends when the process does; Stop and Kill wait for it.
			s.cmd, s.exited = cmd, exited
			return nil
		}
		select {
		case werr := <-exited:
			b, _ := os.ReadFile(filepath.Join(s.dir, "postgres.log"))
			return fmt.Errorf("pgstoretest: postgres exited (%v): %s", werr, tail(b, 2000))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			killGroup(cmd.Process)
			<-exited
			return fmt.Errorf("pgstoretest: postgres did not accept connections within 30 s: %v", err)
		}
	}
}

// Stop shuts the server down the fast way (SIGINT: connections are ended, data is kept) and
// waits for it to exit.
func (s *Server) Stop() { s.stop(interrupt) }

// Kill ends the server at once (SIGKILL to the postmaster's process group), as a crash
// would, and waits for it to exit; its backends, each in a process group of its own, end
// when they see it gone. [Server.Start] then recovers the data.
func (s *Server) Kill() { s.stop(killGroup) }

func (s *Server) stop(signal func(p *os.Process)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	signal(s.cmd.Process)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		killGroup(s.cmd.Process)
		<-s.exited
	}
	s.cmd, s.exited = nil, nil
}

// Close stops the server (SIGQUIT: immediate shutdown) and removes its directory.
func (s *Server) Close() {
	s.stop(quit)
	os.RemoveAll(s.dir)
}

// Port returns the server's TCP port on 127.0.0.1.
func (s *Server) Port() int { return s.port }

// DSN returns the URL of database db on the server as the superuser "postgres", with its
// password: a secret, not for logs.
func (s *Server) DSN(db string) string {
	return s.DSNAt(net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)), db)
}

// DSNAt is [Server.DSN] with another address, host:port, such as a proxy's in front of
// the server.
func (s *Server) DSNAt(addr, db string) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword("postgres", s.password), Host: addr,
		Path: "/" + db, RawQuery: "sslmode=disable"}
	return u.String()
}

// NewDatabase creates an empty database of its own for tb and returns its URL (see
// [Server.DSN]); it is dropped when tb ends.
func (s *Server) NewDatabase(tb testing.TB) string {
	tb.Helper()
	s.mu.Lock()
	s.n++
	name := fmt.Sprintf("t%d_%s", s.n, randomHex(4))
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, s.DSN("postgres"))
		if err != nil {
			return // the server was stopped
		}
		defer c.Close(context.Background())
		c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	return s.DSN(name)
}

// findBin returns the folder of initdb and postgres.
func findBin() (string, error) {
	var dirs []string
	if d := os.Getenv("PG_BIN"); d != "" {
		dirs = append(dirs, d)
	}
	versions, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(versions, func(a, b string) int { return major(b) - major(a) })
	dirs = append(dirs, versions...)
	if p, err := exec.LookPath("postgres"); err == nil {
		dirs = append(dirs, filepath.Dir(p))
	}
	for _, d := range dirs {
		if isFile(filepath.Join(d, "initdb")) && isFile(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", ErrNoBinary
}

// major returns N of /usr/lib/postgresql/N/bin.
func major(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir()
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func tail(b []byte, n int) string {
	s := strings.TrimSpace(string(b))
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return s
}
