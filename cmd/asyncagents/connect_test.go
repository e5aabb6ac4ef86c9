package main

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// Issue 33, "no start order works": serve started before OpenCode waits for it, saying once
// what it waits for and holding its -listen port meanwhile, and gets ready when OpenCode
// answers at -url; it then serves the tools.
func TestServeStartedBeforeOpenCodeWaitsForIt(t *testing.T) {
	t.Parallel()
	srv, dir, c := project(t)
	addr, listen := freeAddr(t), freeAddr(t)
	_, args := stateArgs(t)
	ctx, cancel := context.WithCancel(context.Background())
	out, errOut := &syncBuffer{}, &syncBuffer{}
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, append([]string{"serve", "-url", "http://" + addr, "-listen", listen, "-dir", dir}, args...), out, errOut)
	}()
	t.Cleanup(func() { cancel(); <-code })
	if !testmain.Eventually(30*time.Second, func() bool { return strings.Contains(errOut.String(), "waiting for OpenCode") }) {
		t.Fatalf("serve without OpenCode at its -url did not say it waits:\n%s\n%s", out, errOut)
	}
	if strings.Contains(out.String(), "Ready.") {
		t.Fatalf("serve is ready with nothing at its -url:\n%s", out)
	}
	if ln, err := net.Listen("tcp", listen); err == nil {
		ln.Close()
		t.Errorf("serve waiting for OpenCode does not hold its -listen address %s", listen)
	}
	// OpenCode comes up at the address: here the shared server, through a proxy listening there.
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("the address was taken meanwhile: %v", err)
	}
	upstream, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: httputil.NewSingleHostReverseProxy(upstream), ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	if !testmain.Eventually(30*time.Second, func() bool { return strings.Contains(out.String(), "Ready.") }) {
		t.Fatalf("serve did not get ready once OpenCode answered:\n%s\n%s", out, errOut)
	}
	if n := strings.Count(errOut.String(), "waiting for OpenCode"); n != 1 {
		t.Errorf("serve said %d times that it waits, want once:\n%s", n, errOut)
	}
	parent, err := c.CreateSession(t.Context(), opencode.CreateSessionRequest{Title: "parent"})
	if err != nil {
		t.Fatal(err)
	}
	part := callTool(t, c, parent.ID, "asyncagents_list", `{}`)
	if part.State.Status != "completed" {
		t.Errorf("asyncagents_list through OpenCode: %s %s", part.State.Status, part.State.Error)
	}
}

// Issue 33, "the password recipe cannot work as written": serve in front of an OpenCode that
// asks for a password says which variable to set when it has none, and that its password is
// not OpenCode's when it has another; either way it stops at once, serving nothing.
func TestServeNamesThePasswordVariable(t *testing.T) {
	srv := opencodetest.Start(t, opencodetest.WithPassword("the-right-one"))
	for _, tc := range []struct{ password, want string }{
		{"", "asks for a password: set OPENCODE_SERVER_PASSWORD"},
		{"a-wrong-one", "refuses the password in OPENCODE_SERVER_PASSWORD"},
	} {
		t.Setenv(passwordVar, tc.password)
		_, args := stateArgs(t)
		code, out, errOut := runCmd(t, append([]string{"serve", "-url", srv.URL, "-listen", "127.0.0.1:0"}, args...)...)
		if code != exitFail || !strings.Contains(errOut, tc.want) || strings.Contains(out, "Ready.") || tc.password != "" && strings.Contains(errOut, tc.password) {
			t.Errorf("serve with password %q: exit %d, %q; want exit %d and an error with %q (and not the password)", tc.password, code, errOut, exitFail, tc.want)
		}
	}
}

// A password given to serve that OpenCode does not ask for protects nothing: serve says so.
func TestServeWarnsOfOpenCodeWithoutPassword(t *testing.T) {
	srv, _, _ := project(t)
	t.Setenv(passwordVar, "only-serve-has-it")
	_, args := stateArgs(t)
	s := startServe(t, append(args, "-url", srv.URL, "-listen", "127.0.0.1:0")...)
	if !strings.Contains(s.log.String(), "OpenCode answers without a password") {
		t.Errorf("serve with a password OpenCode does not ask for logged no warning:\n%s", s.log)
	}
}
