package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Starting, reaching and stopping the daemon from another process: the plugin's
// asyncagents daemon -detach, uninstall and asyncagents daemon -stop.

// detachDaemon starts `asyncagents daemon` with args (less -detach) in a session of its own,
// its output appended to STATE/daemon.log, unless a daemon answers on the socket; it
// returns once the daemon answers, or with the log's end when it exits first.
func detachDaemon(ctx context.Context, d daemonConfig, args []string, out io.Writer) error {
	if daemonAnswers(ctx, d.socket) {
		fmt.Fprintln(out, "asyncagents daemon: already running")
		return nil
	}
	if err := os.MkdirAll(d.stateDir, 0o700); err != nil {
		return err
	}
	logPath := filepath.Join(d.stateDir, "daemon.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logFile.Close()
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	var rest []string
	for _, a := range args {
		if a != "-detach" && a != "--detach" && a != "-detach=true" {
			rest = append(rest, a)
		}
	}
	proc, err := startDetached(exe, append([]string{"daemon"}, rest...), logFile)
	if err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { proc.Wait(); close(exited) }()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("the daemon exited at once; the end of %s:\n%s", logPath, tail(logPath, 2000))
		case <-time.After(50 * time.Millisecond):
		}
		if daemonAnswers(ctx, d.socket) {
			fmt.Fprintf(out, "asyncagents daemon: started, pid %d, log %s\n", proc.Pid, quote(logPath))
			proc.Release()
			return nil
		}
	}
	return fmt.Errorf("the daemon did not answer within 15s; the end of %s:\n%s", logPath, tail(logPath, 2000))
}

// daemonAnswers reports whether a daemon answers GET /v1/status on socket.
func daemonAnswers(ctx context.Context, socket string) bool {
	hc := daemonClient(socket)
	defer hc.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://asyncagents/v1/status", nil)
	resp, err := hc.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// daemonClient returns an HTTP client that reaches the daemon on socket (checking, where
// the system tells, that the daemon runs as this user).
func daemonClient(socket string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return dialSocket(ctx, socket)
	}}}
}

// stopDaemon stops the daemon whose pid STATE/daemon.pid holds, if it answers, and waits
// for it to exit (at most 30 s).
func stopDaemon(ctx context.Context, d daemonConfig, out io.Writer) error {
	if !daemonAnswers(ctx, d.socket) {
		fmt.Fprintln(out, "asyncagents daemon: not running")
		return nil
	}
	b, err := os.ReadFile(filepath.Join(d.stateDir, "daemon.pid"))
	if err != nil {
		return err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return fmt.Errorf("bad pid file: %q", b)
	}
	if err := terminate(pid); err != nil {
		return err
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if !processAlive(pid) {
			fmt.Fprintf(out, "asyncagents daemon: stopped pid %d\n", pid)
			return nil
		}
	}
	return fmt.Errorf("the daemon (pid %d) did not exit within 30s", pid)
}

// tail returns the last n bytes of the file at path.
func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		f.Seek(st.Size()-n, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}
