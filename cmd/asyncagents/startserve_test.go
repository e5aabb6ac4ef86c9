package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// The harness of the serve tests (serve_test.go): serve run in the test process, its
// output, and calls of its tools through OpenCode.

// syncBuffer is a bytes.Buffer for one writer goroutine and readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var bridgeLine = regexp.MustCompile(`MCP bridge: +http://([0-9.:]+)/mcp`)

// serving is an `asyncagents serve` run in the test's process.
type serving struct {
	addr string // host:port it listens on
	out  *syncBuffer
	log  *syncBuffer
	stop func() int // stops it as SIGINT would and returns its exit code
}

// stateArgs returns the flags that put serve's store, token file and socket in a new
// folder (made by serve, mode 0700) in a temporary folder, and that folder.
func stateArgs(t *testing.T) (string, []string) {
	state := filepath.Join(t.TempDir(), "state")
	args := []string{"-store", filepath.Join(state, "tasks.jsonl"), "-token-file", filepath.Join(state, "token")}
	if socketSupported {
		args = append(args, "-socket", filepath.Join(state, "serve.sock"))
	}
	return state, args
}

// tasksArgs returns the flags with which `tasks` reaches the serve s whose files are in
// state (stateArgs), and reads the store when s has stopped.
func tasksArgs(s *serving, state string) []string {
	args := []string{"tasks", "-store", filepath.Join(state, "tasks.jsonl")}
	if socketSupported {
		return append(args, "-socket", filepath.Join(state, "serve.sock"))
	}
	return append(args, "-listen", s.addr, "-token-file", filepath.Join(state, "token"))
}

// startServe runs `asyncagents serve args…` until the test ends (or stop) and waits until it
// is ready.
func startServe(t *testing.T, args ...string) *serving {
	t.Helper()
	return startServeWith(t, nil, args...)
}

// startServeWith is startServe with tweak applied to the parsed configuration (nil: none),
// for the knobs that have no flag.
func startServeWith(t *testing.T, tweak func(*serveConfig), args ...string) *serving {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out, errOut := &syncBuffer{}, &syncBuffer{}
	code := make(chan int, 1)
	go func() {
		if tweak == nil {
			code <- run(ctx, append([]string{"serve"}, args...), out, errOut)
			return
		}
		fs := flag.NewFlagSet("asyncagents serve", flag.ContinueOnError)
		fs.SetOutput(errOut)
		c, log, err := parseServe(fs, args, errOut)
		if err == nil {
			tweak(&c)
			err = serve(ctx, c, out, log)
		}
		if err != nil {
			fmt.Fprintf(errOut, "asyncagents serve: %v\n", err)
			code <- exitFail
			return
		}
		code <- exitOK
	}()
	var once sync.Once
	exit := -1
	stop := func() int {
		once.Do(func() { cancel(); exit = <-code })
		return exit
	}
	t.Cleanup(func() { stop() })
	ok := testmain.Eventually(30*time.Second, func() bool {
		select {
		case c := <-code:
			code <- c
			return true
		default:
			return strings.Contains(out.String(), "Ready.")
		}
	})
	if !ok || !strings.Contains(out.String(), "Ready.") {
		t.Fatalf("serve did not get ready:\n%s\n%s", out, errOut)
	}
	m := bridgeLine.FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("serve printed no bridge URL:\n%s", out)
	}
	return &serving{addr: m[1], out: out, log: errOut, stop: stop}
}

var projects atomic.Int64

// project returns the package's shared OpenCode server, a new project folder on it and a
// client scoped to that folder: a test that registers its serve's bridge with the folder's
// instance shares the server, not the instance, with the tests that run beside it. When the
// test ends, the folder's busy sessions are aborted.
func project(t *testing.T) (*opencodetest.Server, string, *opencode.HTTPClient) {
	t.Helper()
	srv := shared.Get(t)
	dir, err := srv.NewProject(fmt.Sprintf("%s-%d", strings.ReplaceAll(t.Name(), "/", "_"), projects.Add(1)))
	if err != nil {
		t.Fatal(err)
	}
	c := srv.Client(opencode.WithDirectory(dir))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, _ := c.SessionStatus(ctx, "")
		for id := range st {
			_ = c.Abort(ctx, id)
		}
	})
	return srv, dir, c
}

// freeAddr returns a loopback address that was free a moment ago, for a serve that must
// come back on the same port.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// callTool has the parent's scripted model call a tool through OpenCode and returns the
// tool part. A notification posted into the parent while its turn runs can take that turn
// over (OpenCode answers the newest user message, so the model does not see the request):
// when no new call of the tool is in the parent, it asks again, up to 3 times.
func callTool(t *testing.T, c *opencode.HTTPClient, parent, name, args string) opencode.Part {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	calls := func() []opencode.Part { // the parent's calls of the tool, newest first
		msgs, err := c.Messages(ctx, parent, 0)
		if err != nil {
			t.Fatal(err)
		}
		var out []opencode.Part
		for i := len(msgs) - 1; i >= 0; i-- {
			for _, p := range msgs[i].Parts {
				if p.Type == opencode.PartTool && p.Tool == name && p.State != nil {
					out = append(out, p)
				}
			}
		}
		return out
	}
	before := map[string]bool{}
	for _, p := range calls() {
		before[p.ID] = true
	}
	for range 3 {
		if _, err := c.Prompt(ctx, parent, opencode.PromptRequest{Parts: []opencode.TextPartInput{opencode.NewText("TOOL:" + name + " " + args)}}); err != nil {
			t.Fatal(err)
		}
		if got := calls(); len(got) > 0 && !before[got[0].ID] {
			return got[0]
		}
	}
	t.Fatalf("the model did not call %s", name)
	return opencode.Part{}
}

// B-4: serve registers the bridge with the project's instance (POST /mcp), the parent's
// model launches a task through OpenCode → MCP → the bridge, the status API and `tasks`
// show it, SIGINT stops serve with exit 0, and `tasks` then reads the store.
// S-2 (issue 13): `tasks` reaches serve through its Unix socket (mode 0600) without a token;
