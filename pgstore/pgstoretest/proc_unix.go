//go:build unix

package pgstoretest

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"syscall"
)

// runAs is the user the server runs as: nil for this process's own.
type runAs struct{ uid, gid int }

// serverUser returns "postgres" when this process is root (initdb and postgres refuse to
// run as root), else nil.
func serverUser() (*runAs, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgstoretest: running as root, PostgreSQL needs another user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &runAs{uid: uid, gid: gid}, nil
}

// apply runs cmd as the user in its own process group.
func (u *runAs) apply(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if u != nil {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(u.uid), Gid: uint32(u.gid)}
	}
}

// own gives path to the user.
func (u *runAs) own(path string) error {
	if u == nil {
		return nil
	}
	return os.Chown(path, u.uid, u.gid)
}

func interrupt(p *os.Process) { p.Signal(syscall.SIGINT) }
func quit(p *os.Process)      { p.Signal(syscall.SIGQUIT) }
func killGroup(p *os.Process) { syscall.Kill(-p.Pid, syscall.SIGKILL) }
