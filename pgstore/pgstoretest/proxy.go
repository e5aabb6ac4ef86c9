package pgstoretest

import (
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
)

// Proxy is a TCP proxy on 127.0.0.1 in front of a [Server], which a test can cut to
// make the database unreachable for the clients that connect through it.
type Proxy struct {
	l      net.Listener
	target string
	wg     sync.WaitGroup

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]bool
}

// NewProxy starts a proxy in front of s, closed when tb ends. Connect through it with
// [Server.DSNAt](p.Addr(), db).
func (s *Server) NewProxy(tb testing.TB) *Proxy {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &Proxy{l: l, target: net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)), conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.serve()
	tb.Cleanup(p.Close)
	return p
}

// Addr returns the proxy's address, host:port.
func (p *Proxy) Addr() string { return p.l.Addr().String() }

// Cut closes every connection through the proxy and closes new ones at once, until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
}

// Restore lets connections through again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// Close stops the proxy and ends its connections.
func (p *Proxy) Close() {
	p.l.Close()
	p.Cut()
	p.wg.Wait()
}

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.pipe(c)
		}()
	}
}

// pipe copies between c and a new connection to the server until either ends or the proxy
// is cut.
func (p *Proxy) pipe(c net.Conn) {
	defer c.Close()
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer s.Close()
	if !p.track(c, s) {
		return
	}
	defer p.untrack(c, s)
	done := make(chan struct{}, 2)
	go func() { io.Copy(s, c); s.Close(); done <- struct{}{} }()
	go func() { io.Copy(c, s); c.Close(); done <- struct{}{} }()
	<-done
	<-done
}

func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return false
	}
	for _, c := range cs {
		p.conns[c] = true
	}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
	}
}
