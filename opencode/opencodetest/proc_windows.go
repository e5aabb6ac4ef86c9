package opencodetest

import (
	"os"
	"os/exec"
)

// startOwnGroup does nothing on Windows: there are no process groups to signal.
func startOwnGroup(*exec.Cmd) {}

// terminateGroup kills p: Windows has no SIGTERM for console processes.
func terminateGroup(p *os.Process) error { return p.Kill() }

// killGroup kills p.
func killGroup(p *os.Process) error { return p.Kill() }
