package opencodetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Proxy is a reverse proxy on a loopback port that stands between an OpenCode client and
// its server (a [Server], or any `opencode serve`) and makes the faults of a network and of
// a server that goes away, on demand: requests answered with an error status or a reset
// connection without reaching the server ([Fault]), requests delayed, answers lost after the
// server acted, requests the server gets only after their client gave up, event streams cut ([Proxy.CutEvents]) or fed events the server never sent
// ([Proxy.SendEvent]), and a switch to another server ([Proxy.SetUpstream]), such as one
// that came back on a new port after [Server.Restart].
//
// Requests without a fault pass through, asking the server for uncompressed answers; event
// streams (GET /global/event, GET /event) are relayed frame by frame as they come. When the
// server cannot be reached the proxy answers 502 Bad Gateway.
//
// Like [httptest.Server], a Proxy is created running and stopped with [Proxy.Close]. It is
// safe for concurrent use. It owns the goroutines that serve its connections and read the
// event streams it relays; Close ends them.
type Proxy struct {
	// URL is the proxy's base URL, e.g. "http://127.0.0.1:41235": what a client dials
	// instead of the server's.
	URL string

	srv       *httptest.Server
	rp        *httputil.ReverseProxy
	transport *http.Transport
	ctx       context.Context // cancelled by Close: ends delays and upstream requests
	cancel    context.CancelFunc
	pumps     sync.WaitGroup // the goroutines reading upstream event streams
	late      sync.WaitGroup // the goroutines forwarding late requests
	closeOnce sync.Once

	mu       sync.Mutex
	upstream *url.URL
	faults   []*Injection
	streams  map[*eventBody]struct{}
}

// NewProxy starts a proxy to the server at upstream (a base URL such as [Server.URL]).
// Like [httptest.NewServer] it has no error to return: it panics when upstream is not an
// absolute http(s) URL. Close it when done.
func NewProxy(upstream string) *Proxy {
	u := mustUpstream(upstream)
	p := &Proxy{upstream: u, streams: map[*eventBody]struct{}{}}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.transport = http.DefaultTransport.(*http.Transport).Clone()
	p.transport.DisableCompression = true // frames are read as sent
	discard := log.New(io.Discard, "", 0)
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			p.mu.Lock()
			target := p.upstream
			p.mu.Unlock()
			pr.SetURL(target)
			pr.Out.Header.Del("Accept-Encoding")
		},
		Transport:      p.transport,
		FlushInterval:  -1,
		ErrorLog:       discard,
		ModifyResponse: p.relayEvents,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			writeError(w, http.StatusBadGateway, "upstream: "+err.Error())
		},
	}
	p.srv = httptest.NewUnstartedServer(http.HandlerFunc(p.serve))
	p.srv.Config.ErrorLog = discard
	p.srv.Start()
	p.URL = p.srv.URL
	return p
}

func mustUpstream(raw string) *url.URL {
	u, err := url.Parse(strings.TrimRight(raw, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		panic(fmt.Sprintf("opencodetest: proxy upstream %q must be an absolute http(s) URL", raw))
	}
	return u
}

// SetUpstream sends the requests that arrive from now on to the server at upstream, e.g.
// the new [Server.URL] after [Server.Restart]. Requests and event streams in progress stay
// with the old server (when it stopped, they have failed already; [Proxy.CutEvents] moves
// open streams over). It panics when upstream is not an absolute http(s) URL.
func (p *Proxy) SetUpstream(upstream string) {
	u := mustUpstream(upstream)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.upstream = u
}

// Upstream returns the base URL requests are sent to.
func (p *Proxy) Upstream() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.upstream.String()
}

// Fault says what a [Proxy] does to the requests it matches. With none of Status, Reset,
// DropResponse and Late set, a matching request is forwarded after Delay: a Fault with nothing
// else set only counts requests ([Injection.Hits]).
type Fault struct {
	// Pattern selects requests by method and path, in the syntax of [http.ServeMux]
	// patterns without a host: "POST /session/{id}/prompt_async" (any session),
	// "/session/ses_abc/{rest...}" (every route below one session, any method),
	// "GET /global/event". Required.
	Pattern string
	// Times is how many matching requests the fault takes; later ones pass it by. Zero
	// means every matching request until [Injection.Remove].
	Times int
	// Delay holds a matching request this long before anything else happens (a request
	// whose client gives up meanwhile goes no further), plus a random part below Jitter.
	Delay, Jitter time.Duration
	// Status answers the request with this HTTP status and an OpenCode-shaped JSON error
	// body ({"name": "ProxyFault", "data": {"message": …}}), without forwarding it.
	Status int
	// Reset closes the client's connection without an answer (a TCP reset where it can),
	// without forwarding the request.
	Reset bool
	// DropResponse forwards the request and reads the server's whole answer, then closes
	// the client's connection without passing the answer on: the server acted, the client
	// sees a broken connection.
	DropResponse bool
	// Late answers the client at once with a reset connection, without forwarding the
	// request, and forwards it Delay later (plus Jitter), its answer dropped: a request the
	// client gave up on that the server acts on only after the client tried again. The
	// proxy's Close ends a late request not yet forwarded.
	Late bool
}

// Injection is a [Fault] in effect on a Proxy, from [Proxy.Inject] until Remove.
type Injection struct {
	fault Fault
	mux   *http.ServeMux

	mu      sync.Mutex
	hits    int
	removed bool
	p       *Proxy
}

// faultMatch is the handler an Injection's mux holds: finding it means the pattern matched
// (a redirect or a 404/405 handler means it did not).
type faultMatch struct{}

func (faultMatch) ServeHTTP(http.ResponseWriter, *http.Request) {}

// Inject puts f in effect and returns its handle. A request goes to the oldest injection in
// effect that matches it and has requests left ([Fault.Times]); others see it pass through.
// Inject panics, as [http.ServeMux.Handle] does, on a pattern that does not parse, and on a
// fault with more than one of Status, Reset, DropResponse and Late, a Status
// outside 100–599, or a negative Times, Delay or Jitter.
//
// Note that Go's [http.Transport] sends a replayable request (GET, HEAD, …, or one with an
// Idempotency-Key) again, once, when a connection it reused closes without an answer: with
// Reset or DropResponse each try is a request here.
func (p *Proxy) Inject(f Fault) *Injection {
	actions := 0
	for _, on := range []bool{f.Status != 0, f.Reset, f.DropResponse, f.Late} {
		if on {
			actions++
		}
	}
	switch {
	case actions > 1:
		panic("opencodetest: a fault sets at most one of Status, Reset, DropResponse and Late")
	case f.Status != 0 && (f.Status < 100 || f.Status > 599):
		panic(fmt.Sprintf("opencodetest: fault status %d out of range", f.Status))
	case f.Times < 0 || f.Delay < 0 || f.Jitter < 0:
		panic("opencodetest: fault Times, Delay and Jitter must not be negative")
	}
	in := &Injection{fault: f, mux: http.NewServeMux(), p: p}
	in.mux.Handle(f.Pattern, faultMatch{})
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults = append(p.faults, in)
	return in
}

// Hits returns how many requests the injection has taken so far.
func (in *Injection) Hits() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.hits
}

// Remove takes the fault out of effect for requests that arrive from now on; requests it
// holds (Delay) go on. It is idempotent.
func (in *Injection) Remove() {
	in.mu.Lock()
	in.removed = true
	in.mu.Unlock()
	p := in.p
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, o := range p.faults {
		if o == in {
			p.faults = append(p.faults[:i:i], p.faults[i+1:]...)
			break
		}
	}
}

// take counts r against the injection when it matches and has requests left.
func (in *Injection) take(r *http.Request) bool {
	if h, pattern := in.mux.Handler(r); pattern == "" {
		return false
	} else if _, ok := h.(faultMatch); !ok {
		return false
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.removed || (in.fault.Times > 0 && in.hits >= in.fault.Times) {
		return false
	}
	in.hits++
	return true
}

// match returns the fault that takes r, if any.
func (p *Proxy) match(r *http.Request) *Fault {
	p.mu.Lock()
	faults := p.faults
	p.mu.Unlock()
	for _, in := range faults {
		if in.take(r) {
			f := in.fault
			return &f
		}
	}
	return nil
}

// serve handles one request from the client.
func (p *Proxy) serve(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(p.ctx, cancel)()
	r = r.WithContext(ctx)

	f := p.match(r)
	if f == nil {
		p.rp.ServeHTTP(w, r)
		return
	}
	if f.Late {
		p.forwardLate(r, f.Delay+jitter(f.Jitter))
		reset(w)
		return
	}
	if d := f.Delay + jitter(f.Jitter); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			panic(http.ErrAbortHandler) // the client left, or the proxy is closing
		}
	}
	switch {
	case f.Status != 0:
		writeError(w, f.Status, fmt.Sprintf("opencodetest: injected HTTP %d for %s %s", f.Status, r.Method, r.URL.Path))
	case f.Reset:
		reset(w)
	case f.DropResponse:
		p.rp.ServeHTTP(&discardWriter{h: http.Header{}}, r)
		reset(w)
	default:
		p.rp.ServeHTTP(w, r)
	}
}

// forwardLate forwards r after d, on a goroutine of the proxy's own, and drops the answer.
// The request's body is read now, while its client still sends it.
func (p *Proxy) forwardLate(r *http.Request, d time.Duration) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return // the client left before it sent the request: nothing to forward
	}
	late := r.Clone(p.ctx)
	late.Body, late.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	p.late.Add(1)
	go func() {
		defer p.late.Done()
		defer func() {
			if r := recover(); r != nil && r != http.ErrAbortHandler { // the answer broke off: it is dropped anyway
				panic(r)
			}
		}()
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			p.rp.ServeHTTP(&discardWriter{h: http.Header{}}, late)
		case <-p.ctx.Done():
		}
	}()
}

func jitter(max time.Duration) time.Duration {
	if max <= 0 {
		return 0
	}
	return rand.N(max)
}

// writeError answers status with a body in OpenCode's {"name", "data": {"message"}} shape.
func writeError(w http.ResponseWriter, status int, msg string) {
	b, _ := json.Marshal(map[string]any{"name": "ProxyFault", "data": map[string]string{"message": msg}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// reset closes the client's connection without an answer: with a TCP reset when the
// connection can be taken over, otherwise by aborting the handler.
func reset(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

// discardWriter is where a dropped answer goes.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header { return d.h }

func (d *discardWriter) Write(b []byte) (int, error) { return len(b), nil }

func (d *discardWriter) WriteHeader(int) {}

func (d *discardWriter) Flush() {}

// Close stops the proxy: it cuts open event streams and connections, ends held and
// forwarded requests, and waits for its goroutines. It is idempotent.
func (p *Proxy) Close() {
	p.closeOnce.Do(func() {
		p.cancel()
		p.CutEvents()
		p.srv.CloseClientConnections()
		p.srv.Close()
		p.pumps.Wait()
		p.late.Wait()
		p.transport.CloseIdleConnections()
	})
}
