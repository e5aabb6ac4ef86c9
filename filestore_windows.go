package asyncagents

import (
	"errors"
	"os"

	"golang.org/x/sys/windows"
)

// errLocked is what lockFile returns when another open file holds the lock.
var errLocked = errors.New("locked")

// lockFile opens or creates the file at name and locks its first byte exclusively with
// LockFileEx without waiting. The lock belongs to the handle, so two opens in one process
// exclude each other as two processes do.
func lockFile(name string) (*os.File, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	conn, err := f.SyscallConn()
	if err == nil {
		cerr := conn.Control(func(fd uintptr) {
			err = windows.LockFileEx(windows.Handle(fd),
				windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, new(windows.Overlapped))
		})
		err = errors.Join(err, cerr)
	}
	if err != nil {
		_ = f.Close()
		if errors.Is(err, windows.ERROR_LOCK_VIOLATION) {
			return nil, errLocked
		}
		return nil, err
	}
	return f, nil
}

// unlockFile releases a lock of lockFile at once (closing the handle alone releases it
// only when the system gets to it) and closes its file.
func unlockFile(f *os.File) error {
	conn, err := f.SyscallConn()
	if err == nil {
		cerr := conn.Control(func(fd uintptr) {
			err = windows.UnlockFileEx(windows.Handle(fd), 0, 1, 0, new(windows.Overlapped))
		})
		err = errors.Join(err, cerr)
	}
	return errors.Join(err, f.Close())
}

// syncDir does nothing: Windows cannot open a directory to flush it, and a rename is
// made durable by the file system's journal.
func syncDir(string) error { return nil }

// tightenMode does nothing: there are no mode bits to tighten here.
func tightenMode(*os.File) error { return nil }
