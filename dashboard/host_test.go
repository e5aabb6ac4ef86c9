package dashboard_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/dashboard"
)

// doHost sends a request with the given Host header, giving up after 10 s (an event
// stream that was not refused would not end).
func (e *env) doHost(t *testing.T, method, path, host string, hdr ...string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	client := &http.Client{Transport: e.srv.Client().Transport, Timeout: 10 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s with Host %s: %v", method, path, host, err)
	}
	return resp.StatusCode, resp.Header, body
}

// On a loopback address, only localhost and loopback IPs are served by default: a
// page whose name was re-bound to 127.0.0.1 reads nothing, cancels nothing and uses up
// no login link.
//
// S-1: Host is checked on loopback listeners.
func TestHostCheckRefusesRebindingOnLoopback(t *testing.T) {
	e := newEnv(t, held())
	task := e.launch(t, e.caller, "stuck", "x", false)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(e.srv.URL, "http://"))
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "LocalHost:" + port, "localhost",
		"127.0.0.1", "127.8.9.10:80", "[::1]:" + port, "[::ffff:127.0.0.1]:" + port} {
		if code, _, body := e.doHost(t, http.MethodGet, "/api/tasks", host); code != http.StatusOK {
			t.Errorf("Host %s: %d %s", host, code, body)
		}
	}
	link := e.h.LoginLink()
	for _, host := range []string{"rebind.example:" + port, "rebind.example", "127.0.0.1.nip.io:" + port,
		"localhost.rebind.example", "localhost.:" + port, "10.0.0.1:" + port, "[::2]:" + port} {
		for _, r := range []struct{ method, path string }{
			{"GET", "/"}, {"GET", "/api/tasks"}, {"GET", "/api/tasks/" + task.ID}, {"GET", "/api/events"},
			{"POST", "/api/tasks/" + task.ID + "/cancel"}, {"GET", "/" + link}, {"POST", "/api/login-link"},
		} {
			code, hdr, body := e.doHost(t, r.method, r.path, host)
			wantError(t, "Host "+host+": "+r.method+" "+r.path, code, http.StatusForbidden, hdr, body)
		}
	}
	if got, _ := e.m.Get(task.ID); got.Status != asyncagents.StatusRunning {
		t.Errorf("a refused cancel changed the task: %s", got.Status)
	}
	login(t, e, link) // not used up by the refused requests

	// With a token too: the Host is checked before the token.
	et := newEnv(t, nil, dashboard.WithToken("tok"))
	code, hdr, body := et.doHost(t, http.MethodGet, "/api/tasks", "rebind.example", "Authorization", "Bearer tok")
	wantError(t, "rebound host with the token", code, http.StatusForbidden, hdr, body)
}

// WithAllowedHosts adds names, any port, any case; WithAnyHost turns the check off.
//
// S-1: Host is checked on loopback listeners.
func TestAllowedHostsAndAnyHost(t *testing.T) {
	e := newEnv(t, nil, dashboard.WithAllowedHosts("Dev.Example", "192.0.2.7", "::ffff:192.0.2.8"))
	for _, host := range []string{"dev.example", "DEV.example:8080", "192.0.2.7:1", "192.0.2.8", "localhost"} {
		if code, _, body := e.doHost(t, http.MethodGet, "/api/tasks", host); code != http.StatusOK {
			t.Errorf("allowed Host %s: %d %s", host, code, body)
		}
	}
	for _, host := range []string{"other.example", "sub.dev.example", "192.0.2.9"} {
		code, hdr, body := e.doHost(t, http.MethodGet, "/api/tasks", host)
		wantError(t, "Host "+host, code, http.StatusForbidden, hdr, body)
	}
	anyHost := newEnv(t, nil, dashboard.WithAnyHost())
	if code, _, body := anyHost.doHost(t, http.MethodGet, "/api/tasks", "rebind.example"); code != http.StatusOK {
		t.Errorf("WithAnyHost: %d %s", code, body)
	}
}

// Requests that arrive on an address that is not loopback are not checked (a host
// serving on a LAN address authenticates instead).
//
// S-1: Host is checked on loopback listeners.
func TestHostCheckOnlyOnLoopback(t *testing.T) {
	e := newEnv(t, nil)
	for _, c := range []struct {
		local string
		want  int
	}{
		{"192.0.2.1:4097", http.StatusOK},
		{"127.0.0.1:4097", http.StatusForbidden},
		{"[::1]:4097", http.StatusForbidden},
	} {
		req := httptest.NewRequest(http.MethodGet, "/api/tasks", nil)
		req.Host = "rebind.example"
		addr, err := net.ResolveTCPAddr("tcp", c.local)
		if err != nil {
			t.Fatal(err)
		}
		req = req.WithContext(context.WithValue(req.Context(), http.LocalAddrContextKey, net.Addr(addr)))
		rec := httptest.NewRecorder()
		e.h.ServeHTTP(rec, req)
		if rec.Code != c.want {
			t.Errorf("local address %s, Host rebind.example: %d, want %d", c.local, rec.Code, c.want)
		}
	}
}
