//go:build !unix

package main

import (
	"errors"
	"os"
)

// The daemon needs a Unix socket: runDaemon refuses to start without one, and these are
// never reached.

func lockDaemon(string) (func(), error) { return nil, errors.ErrUnsupported }

func processAlive(int) bool { return false }

func terminate(int) error { return errors.ErrUnsupported }

func startDetached(string, []string, *os.File) (*os.Process, error) {
	return nil, errors.ErrUnsupported
}
