//go:build darwin || dragonfly || freebsd || illumos || linux || netbsd || openbsd || solaris

package asyncagents

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// errLocked is what lockFile returns when another open file holds the lock.
var errLocked = errors.New("locked")

// lockFile opens or creates the file at name and takes an exclusive flock on it without
// waiting. flock belongs to the open file, so two opens in one process exclude each other
// as two processes do; the lock ends when the file is closed, or the process ends.
func lockFile(name string) (*os.File, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	conn, err := f.SyscallConn()
	if err == nil {
		cerr := conn.Control(func(fd uintptr) {
			for {
				err = unix.Flock(int(fd), unix.LOCK_EX|unix.LOCK_NB)
				if err != unix.EINTR {
					return
				}
			}
		})
		err = errors.Join(err, cerr)
	}
	if err != nil {
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, errLocked
		}
		return nil, err
	}
	return f, nil
}

// unlockFile releases a lock of lockFile, then closes its file. The unlock comes first: a
// process that another goroutine forks holds the open file until it execs, and a close alone
// would leave the lock held until then.
func unlockFile(f *os.File) error {
	conn, err := f.SyscallConn()
	if err == nil {
		err = conn.Control(func(fd uintptr) { _ = unix.Flock(int(fd), unix.LOCK_UN) })
	}
	return errors.Join(err, f.Close())
}

// syncDir fsyncs the directory dir, so that a rename in it is durable. File systems that
// cannot sync a directory (EINVAL, ENOTSUP) are let be.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if errors.Is(err, errors.ErrUnsupported) || errors.Is(err, syscall.EINVAL) {
		err = nil
	}
	return errors.Join(err, d.Close())
}

// tightenMode changes f to mode 0o600 when its group or others have any permission on it.
func tightenMode(f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		if err := f.Chmod(0o600); err != nil {
			return fmt.Errorf("%s has mode %04o (others may read it) and chmod 600 failed: %w", f.Name(), perm, err)
		}
	}
	return nil
}
