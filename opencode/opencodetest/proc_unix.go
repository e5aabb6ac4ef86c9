//go:build unix

package opencodetest

import (
	"os"
	"os/exec"
	"syscall"
)

// startOwnGroup makes cmd start in a new process group whose id is its pid, so the server's
// children (a tool's shell) can be signalled with it.
func startOwnGroup(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} }

// terminateGroup sends SIGTERM to p's process group.
func terminateGroup(p *os.Process) error { return syscall.Kill(-p.Pid, syscall.SIGTERM) }

// killGroup sends SIGKILL to p's process group.
func killGroup(p *os.Process) error { return syscall.Kill(-p.Pid, syscall.SIGKILL) }
