//go:build !(darwin || dragonfly || freebsd || illumos || linux || netbsd || openbsd || solaris || windows)

package asyncagents

import (
	"errors"
	"fmt"
	"os"
	"runtime"
)

// errLocked is what lockFile returns when another open file holds the lock.
var errLocked = errors.New("locked")

// lockFile fails: this platform has no flock or LockFileEx, and a FileStore does not run
// without a lock.
func lockFile(string) (*os.File, error) {
	return nil, fmt.Errorf("no file locks on %s: %w", runtime.GOOS, errors.ErrUnsupported)
}

func unlockFile(f *os.File) error { return f.Close() }

func syncDir(string) error { return nil }

// tightenMode does nothing: there are no mode bits to tighten here.
func tightenMode(*os.File) error { return nil }
