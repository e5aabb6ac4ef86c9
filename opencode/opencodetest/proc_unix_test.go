//go:build unix

package opencodetest_test

import "syscall"

func processAlive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// groupAlive reports whether the process group pgid has members.
func groupAlive(pgid int) bool { return syscall.Kill(-pgid, 0) == nil }
