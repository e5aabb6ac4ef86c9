//go:build unix && !linux && !darwin && !freebsd

package main

import (
	"errors"
	"net"
)

// peerUID cannot tell the peer of a Unix socket on this system: it returns
// errors.ErrUnsupported, and the socket's private directory and mode keep other users out.
func peerUID(net.Conn) (int, error) { return -1, errors.ErrUnsupported }
