package asyncagents_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents/internal/leanserver"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// The scale benchmarks' transport=process: the lean server behind opencodetest.HTTPServer in a
// process of its own, as `opencode serve` is one. It is this test binary run as
// TestLeanServerProcess; the benchmark ends its runs through a second loopback listener of
// that process (POST /end, all of a finish in one request, so that a burst is as fast as in
// process). The benchmark's process then holds only the Manager, its HTTP client and the
// benchmark itself: its CPU and heap figures are the Manager's side alone, and the two
// processes share the machine's CPUs as a host and its OpenCode server do.

// leanServerEnv, set, makes TestLeanServerProcess serve instead of skipping.
const leanServerEnv = "ASYNCAGENTS_LEAN_SERVER"

// TestLeanServerProcess is the server of transport=process: it prints "lean-server <URL>
// <control URL>" and serves until its standard input ends. Without leanServerEnv it skips.
func TestLeanServerProcess(t *testing.T) {
	if os.Getenv(leanServerEnv) == "" {
		t.Skip("the scale benchmarks' server process (transport=process), started by them")
	}
	lean := leanserver.New(leanserver.Served())
	front := opencodetest.NewHTTPServer(lean)
	ctl := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/end": // ends the runs of the sessions in the body, one id a line, every apart
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			every, _ := time.ParseDuration(r.URL.Query().Get("every"))
			var out []byte
			t0 := time.Now()
			for i, id := range strings.Fields(string(body)) {
				if d := time.Until(t0.Add(time.Duration(i) * every)); d > 0 {
					time.Sleep(d)
				}
				out = strconv.AppendInt(out, lean.End(id).UnixNano(), 10)
				out = append(out, '\n')
			}
			_, _ = w.Write(out)
		case "/settled": // whether every run is held and every event sent was read (read=N)
			n, _ := strconv.ParseInt(r.URL.Query().Get("read"), 10, 64)
			_, _ = fmt.Fprint(w, lean.Settled() && lean.Sent() == n)
		default:
			http.NotFound(w, r)
		}
	}))
	fmt.Printf("lean-server %s %s\n", front.URL, ctl.URL)
	_, _ = io.Copy(io.Discard, os.Stdin)
	ctl.Close()
	front.Close()
	_ = lean.Close()
}

// processBackend is the benchmark's side of transport=process.
type processBackend struct {
	*opencode.HTTPClient
	cmd    *exec.Cmd
	stdin  io.Closer
	output chan struct{} // closed when the server's output ends
	ctl    string
	ctlc   *http.Client
	read   atomic.Int64 // events the Manager read, server.* ones left out

	mu    sync.Mutex
	reads map[string]time.Time // session → when the Manager read its last idle
}

func newProcessBackend(b *testing.B) scaleBackend {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestLeanServerProcess$", "-test.count=1", "-test.timeout=2h")
	cmd.Env = append(os.Environ(), leanServerEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	p := &processBackend{cmd: cmd, stdin: stdin, output: make(chan struct{}), ctlc: &http.Client{}, reads: map[string]time.Time{}}
	lines := bufio.NewScanner(stdout)
	var srvURL string
	for srvURL == "" && lines.Scan() {
		if f := strings.Fields(lines.Text()); len(f) == 3 && f[0] == "lean-server" {
			srvURL, p.ctl = f[1], f[2]
		}
	}
	go func() { // the rest of its output, until it exits (Close waits for this)
		defer close(p.output)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	if srvURL == "" {
		p.Close()
		b.Fatal("the server process printed no address")
	}
	if p.HTTPClient, err = opencode.NewHTTPClient(srvURL); err != nil {
		p.Close()
		b.Fatal(err)
	}
	return p
}

func (p *processBackend) end(id string) time.Time { return p.endAll([]string{id}, 0)[0] }

// endAll ends the runs of ids in the server's process, every apart (0: at once), and returns
// when each one's idle was emitted.
func (p *processBackend) endAll(ids []string, every time.Duration) []time.Time {
	resp, err := p.ctlc.Post(p.ctl+"/end?every="+url.QueryEscape(every.String()), "text/plain", strings.NewReader(strings.Join(ids, "\n")))
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		panic(fmt.Sprintf("end: %s %s %v", resp.Status, body, err))
	}
	var at []time.Time
	for _, f := range strings.Fields(string(body)) {
		ns, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			panic(err)
		}
		at = append(at, time.Unix(0, ns))
	}
	return at
}

func (p *processBackend) settled() bool {
	resp, err := p.ctlc.Get(p.ctl + "/settled?read=" + strconv.FormatInt(p.read.Load(), 10))
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body) == "true"
}

func (*processBackend) goroutinesPerRun() int { return 0 }

// phases returns when the Manager read the session's last idle; the server's reads of its
// messages are not known here.
func (p *processBackend) phases(id string) (read, msgs time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reads[id], time.Time{}
}

func (p *processBackend) markRead(sid string) {
	now := time.Now()
	p.mu.Lock()
	p.reads[sid] = now
	p.mu.Unlock()
}

func (p *processBackend) Events(ctx context.Context) (opencode.EventStream, error) {
	st, err := p.HTTPClient.Events(ctx)
	if err != nil {
		return nil, err
	}
	return &markingStream{EventStream: st, mark: p.markRead, read: &p.read}, nil
}

// Close ends the server's input, so that it stops, and waits for it (10 s, then kills it by
// its pid).
func (p *processBackend) Close() error {
	_ = p.stdin.Close()
	exited := make(chan error, 1)
	go func() {
		<-p.output
		exited <- p.cmd.Wait()
	}()
	var err error
	select {
	case err = <-exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		err = <-exited
	}
	if p.HTTPClient != nil {
		p.HTTPClient.CloseIdleConnections()
	}
	p.ctlc.CloseIdleConnections()
	return err
}
