//go:build linux

package dashboard_test

import (
	"errors"
	"os/exec"
	"syscall"
	"time"
)

// ownGroup starts the browser in a process group of its own, so that the helpers
// chromium forks (zygote, crashpad, utility processes) can be stopped with it, and
// killed if the test binary dies first.
func ownGroup(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = new(syscall.SysProcAttr)
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}

// stopGroup kills the browser's process group and waits, up to d, until no process of
// it is left: a helper outliving the browser would keep writing into its profile.
func stopGroup(pid int, d time.Duration) {
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if err := syscall.Kill(-pid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
	}
}
