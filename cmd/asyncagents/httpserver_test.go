package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/netutil"
)

// The limits are those serve's help states.
func TestHTTPLimitsAsDocumented(t *testing.T) {
	lim := defaultHTTPLimits()
	if lim.readHeader != 10*time.Second || lim.read != 30*time.Second || lim.idle != 60*time.Second ||
		lim.maxHeaderBytes != 64<<10 || lim.maxConns != 256 {
		t.Errorf("limits %+v differ from the help", lim)
	}
	for _, want := range []string{"headers within 10 s", "body within 30 s", "closed after 60 s", "limited to 64 KiB", "-max-conns"} {
		if !strings.Contains(serveHelp, want) {
			t.Errorf("serve's help does not say %q", want)
		}
	}
	code, _, errOut := runCmd(t, "serve", "-max-conns", "0")
	if code != exitUsage || !strings.Contains(errOut, "bad -max-conns 0") {
		t.Errorf("serve -max-conns 0: exit %d, %s", code, errOut)
	}
}

// testServer serves h with newHTTPServer's settings and lim on a loopback port with at most
// lim.maxConns connections, until the test ends. It returns the address.
func testServer(t *testing.T, h http.Handler, lim httpLimits) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base, cancel := context.WithCancel(context.Background())
	srv := newHTTPServer(base, h, http.NotFoundHandler(), lim, slog.New(slog.DiscardHandler))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(netutil.LimitListener(ln, lim.maxConns))
	}()
	t.Cleanup(func() {
		cancel()
		_ = srv.Close()
		<-done
	})
	return ln.Addr().String()
}

// closedWithin reports whether the server closes c within d: a read returns EOF or a reset
// (after any answer it sends first).
func closedWithin(t *testing.T, c net.Conn, d time.Duration) bool {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(d)); err != nil {
		t.Fatal(err)
	}
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// S-3 (issue 11): a connection that sends its headers or its body too slowly, or stays idle
// between requests, is closed; the limits are serve's, shortened.
func TestHTTPServerClosesStalledAndIdleConnections(t *testing.T) {
	lim := defaultHTTPLimits()
	lim.readHeader, lim.read, lim.idle = 200*time.Millisecond, 400*time.Millisecond, 300*time.Millisecond
	bodyErr := make(chan error, 1)
	addr := testServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.Copy(io.Discard, r.Body)
		if r.Method == http.MethodPost {
			bodyErr <- err
		}
		fmt.Fprintln(w, "ok")
	}), lim)

	t.Run("headers", func(t *testing.T) {
		c := dial(t, addr)
		fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: localhost\r\n") // the headers never end
		if !closedWithin(t, c, 5*time.Second) {
			t.Error("a connection whose headers stalled is still open")
		}
	})
	t.Run("body", func(t *testing.T) {
		c := dial(t, addr)
		fmt.Fprint(c, "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100\r\n\r\n{\"partial\":") // 89 bytes short
		if !closedWithin(t, c, 5*time.Second) {
			t.Error("a connection whose body stalled is still open")
		}
		if err := <-bodyErr; err == nil {
			t.Error("the handler read the stalled body without an error")
		}
	})
	t.Run("idle", func(t *testing.T) {
		c := dial(t, addr)
		fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		start := time.Now()
		if !closedWithin(t, c, 5*time.Second) {
			t.Error("an idle keep-alive connection is still open")
		}
		if d := time.Since(start); d < lim.idle/2 {
			t.Errorf("the idle connection was closed after %v; want about %v", d, lim.idle)
		}
	})
	t.Run("headers too large", func(t *testing.T) {
		c := dial(t, addr)
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: localhost\r\nX-Big: %s\r\n\r\n", strings.Repeat("a", lim.maxHeaderBytes+8192))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("headers over %d bytes: %s; want 431", lim.maxHeaderBytes, resp.Status)
		}
	})
}

// S-3 (issue 11): no more than maxConns connections are served at once; the next waits until
// one closes, and is served then.
func TestHTTPServerConnectionCap(t *testing.T) {
	lim := defaultHTTPLimits()
	lim.maxConns = 2
	addr := testServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") }), lim)
	get := func(c net.Conn) (chan error, *bufio.Reader) {
		fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
		br := bufio.NewReader(c)
		answered := make(chan error, 1)
		go func() {
			resp, err := http.ReadResponse(br, nil)
			if err == nil {
				resp.Body.Close()
			}
			answered <- err
		}()
		return answered, br
	}
	first, second := dial(t, addr), dial(t, addr)
	for _, c := range []net.Conn{first, second} {
		if ans, _ := get(c); <-ans != nil {
			t.Fatal("a connection under the cap was not served")
		}
	}
	third := dial(t, addr)
	ans, _ := get(third)
	select {
	case err := <-ans:
		t.Fatalf("a connection over the cap was served (%v)", err)
	case <-time.After(300 * time.Millisecond):
	}
	first.Close()
	select {
	case err := <-ans:
		if err != nil {
			t.Errorf("the waiting connection: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("the waiting connection was not served after another closed")
	}
}

// S-3 (issue 11): ReadTimeout does not end answers: an event stream (GET) and a call whose
// answer streams after its body was read (POST, as an MCP tool call) outlive it with their
// context intact. net/http lifts the read deadline when it starts its background read of
// the connection (after the body); were the deadline kept, that read would fail at it and
// cancel the request's context.
func TestReadTimeoutDoesNotEndAnswers(t *testing.T) {
	const readTimeout = 200 * time.Millisecond
	const answerFor = 4 * readTimeout
	stream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			return
		}
		rc := http.NewResponseController(w)
		end := time.After(answerFor)
		tick := time.NewTicker(readTimeout / 4)
		defer tick.Stop()
		for {
			select {
			case <-r.Context().Done():
				fmt.Fprintln(w, "cancelled")
				return
			case <-end:
				fmt.Fprintln(w, "done")
				return
			case <-tick.C:
				fmt.Fprintln(w, "tick")
				_ = rc.Flush()
			}
		}
	})
	lim := defaultHTTPLimits()
	lim.readHeader, lim.read = readTimeout, readTimeout
	addr := testServer(t, stream, lim)
	var wg sync.WaitGroup
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		wg.Go(func() {
			var body io.Reader
			if method == http.MethodPost {
				body = strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/call"}`)
			}
			req, _ := http.NewRequest(method, "http://"+addr+"/", body)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Errorf("%s: %v", method, err)
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			if last := lines[len(lines)-1]; last != "done" || len(lines) < 3 {
				t.Errorf("%s: the answer ended %q after %d lines; want \"done\" after %v", method, last, len(lines), answerFor)
			}
		})
	}
	wg.Wait()
}
