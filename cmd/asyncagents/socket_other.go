//go:build !unix

package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
)

// socketSupported is false: on Windows serve offers no socket, and `asyncagents tasks`
// asks serve over TCP with the bearer token.
const socketSupported = false

func listenSocket(string, *slog.Logger) (net.Listener, error) {
	return nil, errors.ErrUnsupported
}

func dialSocket(context.Context, string) (net.Conn, error) { return nil, errors.ErrUnsupported }

func socketAbsent(error) bool { return false }
