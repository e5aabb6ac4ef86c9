package main

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/net/netutil"
)

// httpLimits bound what a connection to serve may hold without doing anything useful: a
// header or a body sent slowly, a keep-alive connection left open, headers too large, too
// many connections. None of them bounds an answer: an event stream or a tool call that
// streams its answer (a blocking output, up to 600 s) lasts as long as it needs. (ReadTimeout
// ends with the request: net/http lifts the read deadline when it starts watching the
// connection for the client going away, once the body has been read, so the deadline does
// not cancel the request's context; TestReadTimeoutDoesNotEndAnswers holds it to that. No
// WriteTimeout: it would cut the streams.)
type httpLimits struct {
	readHeader     time.Duration // to read a request's headers, from its first byte
	read           time.Duration // to read a whole request, body included, from its first byte
	idle           time.Duration // a keep-alive connection may wait for its next request
	maxHeaderBytes int           // the size of a request's headers (net/http adds 4 KiB of slack)
	maxConns       int           // connections open at once on the TCP listener; more wait to be accepted
	maxLocalConns  int           // the same on the Unix socket
}

// Defaults of httpLimits; -max-conns sets maxConns.
const (
	defaultReadHeaderTimeout = 10 * time.Second
	defaultReadTimeout       = 30 * time.Second
	defaultIdleTimeout       = 60 * time.Second
	defaultMaxHeaderBytes    = 64 << 10
	defaultMaxConns          = 256
	maxMaxConns              = 1 << 16
	defaultMaxLocalConns     = 32
)

func defaultHTTPLimits() httpLimits {
	return httpLimits{
		readHeader:     defaultReadHeaderTimeout,
		read:           defaultReadTimeout,
		idle:           defaultIdleTimeout,
		maxHeaderBytes: defaultMaxHeaderBytes,
		maxConns:       defaultMaxConns,
		maxLocalConns:  defaultMaxLocalConns,
	}
}

// newHTTPServer returns the server of serve: requests on the TCP listener go to remote,
// requests on the Unix socket (whose peers were checked when accepted) to local. Every
// request's context derives from base, so cancelling base ends the calls in flight.
func newHTTPServer(base context.Context, remote, local http.Handler, lim httpLimits, log *slog.Logger) *http.Server {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && a.Network() == "unix" {
			local.ServeHTTP(w, r)
			return
		}
		remote.ServeHTTP(w, r)
	})
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: lim.readHeader,
		ReadTimeout:       lim.read,
		IdleTimeout:       lim.idle,
		MaxHeaderBytes:    lim.maxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return base },
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// withCredential returns h for requests from the Unix socket, whose peer was checked when
// its connection was accepted: each request gets the "Authorization: Bearer <token>" header
// that h asks for, in place of whatever it carried, and the Host "localhost" (no browser
// reaches the socket, so there is no DNS rebinding to guard against). The token never
// leaves the process.
func withCredential(h http.Handler, token string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+token)
		r.Host = "localhost"
		h.ServeHTTP(w, r)
	})
}

// httpService is serve's HTTP server at work on its listeners.
type httpService struct {
	srv      *http.Server
	served   chan error // what Serve returned, one per listener
	serving  sync.WaitGroup
	endCalls context.CancelFunc // ends the calls in flight
}

// startHTTP serves remote on ln, with at most lim.maxConns connections open at once, and
// local on the Unix socket sock (nil: none), with at most lim.maxLocalConns (newHTTPServer).
func startHTTP(remote, local http.Handler, lim httpLimits, log *slog.Logger, ln, sock net.Listener) *httpService {
	// Calls in flight (a blocking output waits up to 10 minutes) end when serving stops.
	callCtx, endCalls := context.WithCancel(context.Background())
	s := &httpService{srv: newHTTPServer(callCtx, remote, local, lim, log), endCalls: endCalls}
	listeners := []net.Listener{netutil.LimitListener(ln, lim.maxConns)}
	if sock != nil {
		listeners = append(listeners, netutil.LimitListener(sock, lim.maxLocalConns))
	}
	s.served = make(chan error, len(listeners))
	for _, l := range listeners {
		s.serving.Go(func() { s.served <- s.srv.Serve(l) })
	}
	return s
}

// run serves until ctx is done or a listener fails, and returns that listener's error (nil
// when ctx ended it). Then it ends the calls in flight and shuts the server down: it waits
// at most timeout for the connections to end, closes those left, and returns once every
// listener has stopped serving.
func (s *httpService) run(ctx context.Context, timeout time.Duration, log *slog.Logger) error {
	var err error
	select {
	case err = <-s.served:
	case <-ctx.Done():
		log.Info("asyncagents: stopping; tasks go on running on the server")
	}
	s.endCalls()
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if serr := s.srv.Shutdown(sctx); serr != nil {
		_ = s.srv.Close()
	}
	s.serving.Wait()
	return err
}
