//go:build unix

package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// lockDaemon takes STATE/daemon.lock (flock), which one daemon per user holds while it
// runs; unlock releases it.
func lockDaemon(state string) (unlock func(), err error) {
	if err := os.MkdirAll(state, 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(state, "daemon.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("another asyncagents daemon runs (it holds %s)", quote(f.Name()))
		}
		return nil, err
	}
	return func() { f.Close() }, nil
}

// processAlive reports whether the process pid exists (signal 0; a process of another user
// counts).
func processAlive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// terminate sends pid SIGTERM.
func terminate(pid int) error { return unix.Kill(pid, unix.SIGTERM) }

// startDetached starts exe with args in a session of its own (so that a terminal that
// closes does not stop it), stdin from /dev/null and its output to logFile.
func startDetached(exe string, args []string, logFile *os.File) (*os.Process, error) {
	cmd := exec.Command(exe, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return cmd.Process, nil
}
