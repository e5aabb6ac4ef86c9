//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// socketSupported says whether serve listens on a Unix socket for `asyncagents tasks`.
const socketSupported = true

// maxSocketPath is the longest socket path that every Unix takes: sun_path holds 104 bytes
// on macOS and the BSDs, 108 on Linux, a NUL included.
const maxSocketPath = 103

// listenSocket listens on the Unix socket at path for `asyncagents tasks`. The socket's
// directory is made (mode 0700) when missing and must then be the user's alone
// (checkPrivateDir); the socket gets mode 0600. A socket left at path by a serve that
// ended without removing it is removed; one that a running serve answers on is an error.
// Connections whose peer is another user are closed when accepted (peerListener).
func listenSocket(path string, log *slog.Logger) (net.Listener, error) {
	if len(path) > maxSocketPath {
		return nil, fmt.Errorf("-socket %s: %d bytes, longer than the %d a socket path may have; set a shorter -socket",
			path, len(path), maxSocketPath)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("-socket %s: %w", path, err)
	}
	if err := checkPrivateDir(dir, os.Getuid()); err != nil {
		return nil, fmt.Errorf("-socket %s: %w", path, err)
	}
	if err := removeStaleSocket(path); err != nil {
		return nil, err
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("-socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("-socket %s: %w", path, err)
	}
	return &peerListener{Listener: ln, uid: os.Getuid(), log: log}, nil
}

// removeStaleSocket removes the socket at path when nothing listens on it; it returns an
// error when a process answers there or path is not a socket.
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("-socket %s: the path exists and is not a socket; remove it or set another -socket", path)
	}
	c, err := net.DialTimeout("unix", path, 2*time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("-socket %s: another asyncagents serve listens there; stop it or set another -socket", path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("-socket %s: %w", path, err)
	}
	return os.Remove(path)
}

// peerListener accepts the connections whose peer runs as uid and closes the others. Where
// the system cannot tell a socket's peer (peerUID: errors.ErrUnsupported), the socket's
// private directory and mode keep other users out, and every connection is accepted.
type peerListener struct {
	net.Listener
	uid int
	log *slog.Logger
}

func (l *peerListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		uid, err := peerUID(c)
		if err == nil && uid == l.uid || errors.Is(err, errors.ErrUnsupported) {
			return c, nil
		}
		l.log.Warn("asyncagents: refused a connection on the socket", "peer_uid", uid, "err", err)
		c.Close()
	}
}

// dialSocket connects to the serve at the Unix socket path and checks that it runs as this
// user, where the system can tell.
func dialSocket(ctx context.Context, path string) (net.Conn, error) {
	return dialSocketAs(ctx, path, os.Getuid())
}

// dialSocketAs is dialSocket for a serve that must run as uid.
func dialSocketAs(ctx context.Context, path string, uid int) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	peer, err := peerUID(c)
	if err == nil && peer != uid {
		err = fmt.Errorf("the process listening on %s runs as uid %d, not as you (uid %d)", path, peer, uid)
	}
	if err != nil && !errors.Is(err, errors.ErrUnsupported) {
		c.Close()
		return nil, err
	}
	return c, nil
}

// socketAbsent reports whether err, from dialSocket, says that no serve listens: no socket
// file, or one that nothing accepts on.
func socketAbsent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" && (errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED))
}

// sockControl runs f on the file descriptor of the socket c.
func sockControl(c net.Conn, f func(fd int) error) error {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return errors.New("not a socket")
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := raw.Control(func(fd uintptr) { ferr = f(int(fd)) }); err != nil {
		return err
	}
	return ferr
}
