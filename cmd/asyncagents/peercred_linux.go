package main

import (
	"net"

	"golang.org/x/sys/unix"
)

// peerUID returns the uid of the process at the other end of the Unix socket c
// (SO_PEERCRED: the peer's credentials when it connected or listened).
func peerUID(c net.Conn) (int, error) {
	uid := -1
	err := sockControl(c, func(fd int) error {
		cred, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
		if err == nil {
			uid = int(cred.Uid)
		}
		return err
	})
	return uid, err
}
