package dashboard_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/asyncagentstest"
	"github.com/asyncagents/asyncagents/dashboard"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// The harness of the browser tests (browser_test.go): Chromium, the page's rows, and a
// Manager with a dashboard on the real OpenCode server.

const noChromium = "chromium not found: run `make browser` or `apt-get install chromium` (Debian), or set ASYNCAGENTS_CHROMIUM to a Chromium binary"

// chromium returns the browser binary, or skips the test (fails it under CI=true).
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("ASYNCAGENTS_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "/usr/bin/chromium"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal(noChromium)
	}
	t.Skip(noChromium)
	return ""
}

// browser starts a headless chromium with a fresh profile, HOME, TMPDIR and XDG folders under
// t.TempDir, and extra options, and stops it when the test ends: the browser through
// chromedp's allocator, then every process of its group, then the profile is removed. A
// browser that does not start (seen once on a loaded machine: the process ended before it
// printed its DevTools address) is started again, three times at most.
func browser(t *testing.T, width, height int, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	exe := chromium(t)
	for attempt := 1; ; attempt++ {
		ctx, stop, err := startBrowser(t, exe, width, height, extra)
		if err == nil {
			t.Cleanup(stop)
			return ctx
		}
		stop()
		if attempt == 3 {
			t.Fatalf("starting %s: %v", exe, err)
		}
		t.Logf("starting %s (attempt %d): %v", exe, attempt, err)
	}
}

// startBrowser starts one chromium for browser; stop stops it and removes its profile.
func startBrowser(t *testing.T, exe string, width, height int, extra []chromedp.ExecAllocatorOption) (ctx context.Context, stop func(), err error) {
	home := t.TempDir()
	profile := filepath.Join(home, "profile")
	// With --disable-dev-shm-usage chromium keeps its shared memory in TMPDIR's files.
	tmp := filepath.Join(home, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return nil, func() {}, err
	}
	var cmd *exec.Cmd
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append([]chromedp.ExecAllocatorOption{
		chromedp.ModifyCmdFunc(func(c *exec.Cmd) { cmd = c; ownGroup(c) }),
		chromedp.ExecPath(exe),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-breakpad", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("password-store", "basic"),
		chromedp.Flag("force-color-profile", "srgb"),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(width, height),
		chromedp.Env("HOME="+home, "TMPDIR="+tmp, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
			"XDG_CACHE_HOME="+filepath.Join(home, ".cache"), "XDG_DATA_HOME="+filepath.Join(home, ".local/share")),
	}, extra...)...)
	var (
		mu   sync.Mutex
		errs []string
	)
	ctx, cancel := chromedp.NewContext(actx,
		chromedp.WithLogf(func(string, ...any) {}),
		chromedp.WithErrorf(func(format string, args ...any) {
			mu.Lock()
			defer mu.Unlock()
			errs = append(errs, fmt.Sprintf(format, args...))
		}))
	stop = func() {
		cancel()
		mu.Lock()
		if len(errs) > 0 && testing.Verbose() {
			t.Logf("chromedp: %d errors, first: %s", len(errs), errs[0])
		}
		mu.Unlock()
		cancelAlloc() // kills the browser process and waits for it
		if cmd != nil && cmd.Process != nil {
			stopGroup(cmd.Process.Pid, 5*time.Second)
		}
		removeAll(t, profile)
	}
	start := time.Now()
	if err := chromedp.Run(ctx); err != nil {
		return nil, stop, err
	}
	t.Logf("chromium started in %v", time.Since(start).Round(time.Millisecond))
	return ctx, stop, nil
}

// removeAll removes a browser's profile, retrying for a moment: chromium's processes
// may still be closing files in it when the browser has gone.
func removeAll(t *testing.T, dir string) {
	t.Helper()
	var err error
	for range 50 {
		if err = os.RemoveAll(dir); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("removing the browser profile: %v", err)
}

// run runs chromedp actions with a timeout.
func run(t *testing.T, ctx context.Context, d time.Duration, actions ...chromedp.Action) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if err := chromedp.Run(ctx, actions...); err != nil {
		t.Fatal(err)
	}
}

// rowState is what the page shows of one task.
type rowState struct {
	Status string `json:"status"`
	Calls  string `json:"calls"`
	Tools  string `json:"tools"`
	Text   string `json:"text"`
	Cancel bool   `json:"cancel"`
	Forked bool   `json:"forked"`
	Fork   string `json:"fork"`
	Dur    string `json:"dur"`
	Meta   string `json:"meta"`  // agent, model, … and what the task used
	Group  string `json:"group"` // its parent group's head: counts and what its tasks used
}

const rowJS = `((id) => {
	const el = document.querySelector('article.task[data-id="' + id + '"]');
	if (!el) return null;
	const q = s => el.querySelector(s);
	return {status: el.dataset.status, calls: q('.calls').textContent, tools: q('.tools').textContent,
		text: q('.text').textContent, cancel: !q('.cancel').hidden, forked: !q('.b-fork').hidden,
		fork: q('.fork').hidden ? '' : q('.fork').textContent, dur: q('.dur').textContent,
		meta: q('.agent').textContent, group: el.closest('[data-parent]').querySelector('.gcounts').textContent};
})(%q)`

func row(t *testing.T, ctx context.Context, id string) *rowState {
	t.Helper()
	var r *rowState
	run(t, ctx, 10*time.Second, chromedp.Evaluate(fmt.Sprintf(rowJS, id), &r))
	return r
}

// waitRow polls the page until cond holds for the task's row.
func waitRow(t *testing.T, ctx context.Context, id string, d time.Duration, what string, cond func(*rowState) bool) *rowState {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		r := row(t, ctx, id)
		if r != nil && cond(r) {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page did not show %s within %v; row: %+v", what, d, r)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// recorder notes every state of every row the page shows, in order, so that a test sees
// states shorter than its polling.
const recorder = `(() => {
	window.__seen = [];
	window.__kept = 'no reload';
	const note = () => document.querySelectorAll('article.task').forEach(el => {
		const v = el.dataset.id + '|' + el.dataset.status + '|' + el.querySelector('.calls').textContent;
		if (!window.__seen.includes(v)) window.__seen.push(v);
	});
	new MutationObserver(note).observe(document.getElementById('groups'), {subtree: true, childList: true, characterData: true, attributes: true});
	return true;
})()`

// realEnv is a Manager on a real OpenCode server with the handler on a loopback port.
type realEnv struct {
	srv    *opencodetest.Server
	m      *asyncagents.Manager
	url    string
	caller asyncagents.Caller
}

func newRealEnv(t *testing.T, srv *opencodetest.Server, mopts []asyncagents.Option, opts ...dashboard.Option) *realEnv {
	t.Helper()
	c := srv.Client()
	m, err := asyncagents.New(c, append([]asyncagents.Option{asyncagents.WithPollInterval(500 * time.Millisecond)}, mopts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	h, err := dashboard.New(m, opts...)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	t.Cleanup(func() { _ = h.Close() })
	return &realEnv{srv: srv, m: m, url: hs.URL + "/", caller: parent(t, c)}
}

func (e *realEnv) launch(t *testing.T, in asyncagents.LaunchInput) asyncagents.Task {
	t.Helper()
	if in.Caller.SessionID == "" {
		in.Caller = e.caller
	}
	if in.Agent == "" {
		in.Agent = "general"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	task, err := e.m.Launch(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	return asyncagentstest.Started(t, e.m, task)
}

// The page shows a task appear, its progress advance and its result arrive without a
