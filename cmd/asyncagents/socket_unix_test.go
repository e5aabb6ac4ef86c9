//go:build unix

package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/storetest"
)

// privateDir returns a new folder of mode 0700 in the test's temporary folder.
func privateDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

// S-2 (issue 13): serve's socket is 0600 in a folder that must be the user's alone; a socket
// that a serve left behind is replaced, a live one or a file that is not a socket is not.
func TestListenSocket(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	dir := privateDir(t)
	path := filepath.Join(dir, "serve.sock")
	ln, err := listenSocket(path, log)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(path); err != nil || fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket: %v, %v; want a socket of mode 0600", fi.Mode(), err)
	}
	if _, err := listenSocket(path, log); err == nil || !strings.Contains(err.Error(), "another asyncagents serve listens there") {
		t.Errorf("a second listen on a live socket: %v", err)
	}
	ln.Close()

	// A socket whose serve died: the file stays, nothing accepts.
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ul.SetUnlinkOnClose(false)
	ul.Close()
	if ln, err = listenSocket(path, log); err != nil {
		t.Errorf("listen over a stale socket: %v", err)
	} else {
		ln.Close()
	}

	notSocket := filepath.Join(dir, "file")
	if err := os.WriteFile(notSocket, []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := listenSocket(notSocket, log); err == nil || !strings.Contains(err.Error(), "is not a socket") {
		t.Errorf("listen on a regular file: %v", err)
	}
	if b, _ := os.ReadFile(notSocket); string(b) != "mine" {
		t.Errorf("the regular file changed: %q", b)
	}

	open := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := listenSocket(filepath.Join(open, "serve.sock"), log); err == nil || !strings.Contains(err.Error(), "run: chmod 700 "+open) {
		t.Errorf("listen in a folder others may read: %v", err)
	}
	made := filepath.Join(t.TempDir(), "new", "state")
	if ln, err := listenSocket(filepath.Join(made, "serve.sock"), log); err != nil {
		t.Errorf("listen in a missing folder: %v", err)
	} else {
		ln.Close()
		if fi, err := os.Stat(made); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("the folder made for the socket: %v, %v; want mode 0700", fi.Mode(), err)
		}
	}
	long := filepath.Join(dir, strings.Repeat("x", maxSocketPath))
	if _, err := listenSocket(long, log); err == nil || !strings.Contains(err.Error(), "set a shorter -socket") {
		t.Errorf("listen on a long path: %v", err)
	}
}

// S-2 (issue 13): a connection on the socket from another user is closed when accepted. The
// other user is simulated: the listener expects a uid that is not the test's.
func TestPeerListenerRefusesOtherUsers(t *testing.T) {
	if _, err := peerUID(nil); errors.Is(err, errors.ErrUnsupported) {
		t.Skipf("%s cannot tell a socket's peer", runtime.GOOS)
	}
	path := filepath.Join(privateDir(t), "s.sock")
	inner, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		uid    int
		accept bool
	}{{"same user", os.Getuid(), true}, {"other user", os.Getuid() + 1, false}} {
		l := &peerListener{Listener: inner, uid: tc.uid, log: slog.New(slog.DiscardHandler)}
		accepted := make(chan net.Conn, 1)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if c, err := l.Accept(); err == nil {
				accepted <- c
			}
		}()
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		if tc.accept {
			sc := <-accepted
			sc.Close()
		} else {
			// The listener closed the connection: the client reads EOF.
			if n, err := c.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
				t.Errorf("%s: read %d, %v; want EOF", tc.name, n, err)
			}
		}
		c.Close()
		if !tc.accept {
			inner.Close() // ends the Accept loop
		}
		<-done
		select {
		case sc := <-accepted:
			sc.Close()
			if !tc.accept {
				t.Errorf("%s: accepted", tc.name)
			}
		default:
		}
	}
}

// S-2, S-4 (issue 13, 14): `tasks` reads the store only when no serve listens on the socket
// (no socket file, or nothing accepts on it), and then creates, locks and changes nothing;
// without a store it says there are no tasks. It has no TCP flags on Unix: it never sends
// the token over TCP.
func TestTasksFallsBackToTheStore(t *testing.T) {
	dir := privateDir(t)
	socket, store := filepath.Join(dir, "serve.sock"), filepath.Join(dir, "tasks.jsonl")

	code, out, errOut := runCmd(t, "tasks", "-socket", socket, "-store", store)
	if code != exitOK || !strings.Contains(out, "No tasks (no serve answers, no store at "+store+")") {
		t.Errorf("no serve, no store: exit %d\n%s%s", code, out, errOut)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("tasks created %d files: %v", len(entries), entries)
	}

	s, err := asyncagents.NewFileStore(store)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Save(t.Context(), storetest.FullTask("ses_stored", 1)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := os.Remove(store + ".lock"); err != nil {
		t.Fatal(err)
	}
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: socket, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ul.SetUnlinkOnClose(false)
	ul.Close() // a stale socket: connection refused
	code, out, errOut = runCmd(t, "tasks", "-socket", socket, "-store", store)
	if code != exitOK || !strings.Contains(out, "ses_stored") || !strings.Contains(out, "from "+store) {
		t.Errorf("stale socket: exit %d\n%s%s", code, out, errOut)
	}
	if _, err := os.Stat(store + ".lock"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("tasks made a lock file: %v", err)
	}

	code, _, errOut = runCmd(t, "tasks", "-listen", DefaultListen)
	if code != exitUsage || !strings.Contains(errOut, "flag provided but not defined: -listen") {
		t.Errorf("tasks -listen on Unix: exit %d, %s", code, errOut)
	}
}

// S-2 (issue 13): `tasks` sends no token through the socket (the serve there adds the
// status page's credential itself), and refuses a socket served by another user — simulated:
// the check expects a uid that is not the test's.
func TestTasksOverTheSocket(t *testing.T) {
	dir := privateDir(t)
	path := filepath.Join(dir, "serve.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	auth := make(chan string, 1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case auth <- r.Header.Get("Authorization"):
		default:
		}
		fmt.Fprint(w, `{"tasks":[{"id":"ses_live","parentSessionID":"ses_p","status":"running"}]}`)
	})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	defer func() {
		srv.Close()
		<-done
	}()
	code, out, errOut := runCmd(t, "tasks", "-socket", path, "-store", filepath.Join(dir, "tasks.jsonl"))
	if code != exitOK || !strings.Contains(out, "ses_live") || !strings.Contains(out, "from asyncagents serve at "+path) {
		t.Errorf("tasks through the socket: exit %d\n%s%s", code, out, errOut)
	}
	if a := <-auth; a != "" {
		t.Errorf("tasks sent Authorization %q through the socket", a)
	}

	if _, err := peerUID(nil); errors.Is(err, errors.ErrUnsupported) {
		return
	}
	c, err := dialSocketAs(t.Context(), path, os.Getuid()+1)
	if err == nil || !strings.Contains(err.Error(), "not as you") {
		t.Errorf("dial a socket served by another user: %v", err)
	}
	if c != nil {
		c.Close()
	}
}
