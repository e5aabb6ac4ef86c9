//go:build darwin || dragonfly || freebsd || illumos || linux || netbsd || openbsd || solaris

package asyncagents

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// A FileStore closed while a child process still holds its lock file (one forked by another
// goroutine between its fork and its exec holds every open file) is free at once: a new
// FileStore on the path opens.
func TestFileStoreCloseUnlocksWhileAChildHoldsTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tasks.jsonl")
	s, err := NewFileStore(path)
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command("sleep", "30")
	child.ExtraFiles = []*os.File{s.lock} // as a fork that has not exec'd yet holds it
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { child.Process.Kill(); child.Wait() })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := NewFileStore(path)
	if err != nil {
		t.Fatalf("NewFileStore after Close while a child holds the lock file: %v", err)
	}
	again.Close()
}
