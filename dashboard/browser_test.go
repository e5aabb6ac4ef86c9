package dashboard_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/dashboard"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// The page in a real browser: Debian's chromium, headless, driven with chromedp, against
// the handler over a Manager on the real OpenCode server (and, for the 1,000-task check,
// on the in-memory one).
//
// ASYNCAGENTS_CHROMIUM names the browser binary (default: chromium on PATH, then
// /usr/bin/chromium). ASYNCAGENTS_SCREENSHOT=path.png makes TestBrowserScreenshot save a
// picture of the page with tasks in every state (docs/dashboard.png);
// ASYNCAGENTS_SCREENSHOT_WIDTH sets its width in CSS pixels (default 1280).

// reload, and its cancel button cancels a running task — on the real server.
func TestBrowserLiveTasks(t *testing.T) {
	chromium(t) // skip before starting a server
	srv := opencodetest.Start(t)
	e := newRealEnv(t, srv, []asyncagents.Option{asyncagents.WithNestingDepth(2)})
	ctx := browser(t, 1280, 900)

	start := time.Now()
	var ok bool
	run(t, ctx, 30*time.Second,
		chromedp.Navigate(e.url),
		chromedp.WaitVisible(`#conn[data-state="live"]`, chromedp.ByQuery),
		chromedp.Evaluate(recorder, &ok))
	t.Logf("page live in %v", time.Since(start).Round(time.Millisecond))

	// A task with three bash steps, each a second apart.
	start = time.Now()
	task := e.launch(t, asyncagents.LaunchInput{Description: "three steps", Prompt: "RUN:sleep 1 ||| sleep 1 ||| echo finished-ok"})
	waitRow(t, ctx, task.ID, 10*time.Second, "the new task", func(r *rowState) bool { return r.Status == "running" || r.Status == "completed" })
	t.Logf("task on the page %v after its launch", time.Since(start).Round(time.Millisecond))
	final := waitRow(t, ctx, task.ID, 60*time.Second, "the result", func(r *rowState) bool { return r.Status == "completed" })
	if !strings.Contains(final.Text, "finished-ok") || final.Calls != "3 tool calls" || !strings.Contains(final.Tools, "bash") {
		t.Errorf("completed row = %+v", final)
	}
	// C-3: what the task used, and its parent's total (the only task of that parent yet).
	done, _ := e.m.Get(task.ID)
	used := strings.ReplaceAll(done.Usage.String(), ", ", " · ")
	if done.Usage.Cost == 0 || !strings.Contains(final.Meta, used) || !strings.Contains(final.Group, used+" in all") {
		t.Errorf("usage on the page: row %q, group %q; want %q", final.Meta, final.Group, used)
	}
	// C-2: a task the task launched counts in its parent's tree too.
	nested := e.launch(t, asyncagents.LaunchInput{Caller: asyncagents.Caller{SessionID: task.SessionID, Agent: "general"},
		Description: "nested", Prompt: "RUN:echo nested-ok"})
	waitRow(t, ctx, nested.ID, 60*time.Second, "the nested task", func(r *rowState) bool { return r.Status == "completed" })
	nestedDone, _ := e.m.Get(nested.ID)
	tree := strings.ReplaceAll(done.Usage.Add(nestedDone.Usage).String(), ", ", " · ") + " in all"
	waitRow(t, ctx, task.ID, 10*time.Second, "the tree's usage in the top group", func(r *rowState) bool { return strings.Contains(r.Group, tree) })
	t.Logf("completed on the page %v after its launch: %+v", time.Since(start).Round(time.Millisecond), final)
	var seen []string
	var kept string
	run(t, ctx, 10*time.Second, chromedp.Evaluate(`window.__seen`, &seen), chromedp.Evaluate(`window.__kept`, &kept))
	if kept != "no reload" {
		t.Error("the page was reloaded")
	}
	var progress []string
	for _, s := range seen {
		if strings.HasPrefix(s, task.ID+"|running|") {
			progress = append(progress, strings.TrimPrefix(s, task.ID+"|running|"))
		}
	}
	t.Logf("states of the running task on the page: %q", progress)
	var advanced bool
	for _, p := range progress {
		advanced = advanced || p == "1 tool call" || p == "2 tool calls"
	}
	if !advanced {
		t.Errorf("the page never showed the progress of the running task: %q", seen)
	}
	if got, _ := e.m.Get(task.ID); got.Status != asyncagents.StatusCompleted {
		t.Errorf("the Manager's task = %s", got.Status)
	}

	// Cancel a running task with the page's button: a first click arms it, a second cancels.
	long := e.launch(t, asyncagents.LaunchInput{Description: "sleeps", Prompt: "RUN:sleep 60 ||| echo never"})
	sel := `article.task[data-id="` + long.ID + `"] .cancel`
	waitRow(t, ctx, long.ID, 30*time.Second, "the task running its command, with a cancel button", func(r *rowState) bool {
		return r.Status == "running" && r.Calls == "1 tool call" && r.Cancel
	})
	start = time.Now()
	run(t, ctx, 10*time.Second, chromedp.Click(sel, chromedp.ByQuery), chromedp.Click(sel, chromedp.ByQuery))
	r := waitRow(t, ctx, long.ID, 20*time.Second, "the cancelled task", func(r *rowState) bool { return r.Status == "cancelled" })
	t.Logf("cancelled on the page %v after the click: %+v", time.Since(start).Round(time.Millisecond), r)
	if r.Cancel {
		t.Error("a cancelled task still has its cancel button")
	}
	if got, _ := e.m.Get(long.ID); got.Status != asyncagents.StatusCancelled {
		t.Errorf("the Manager's task after the click = %s", got.Status)
	}
	var title string
	run(t, ctx, 5*time.Second, chromedp.Title(&title))
	if title != "asyncagents · tasks" {
		t.Errorf("title with nothing active = %q", title)
	}
}

// 1,000 tasks: the page shows them all, and a change updates its row only (the other
// rows stay the same DOM nodes).
func TestBrowserThousandTasks(t *testing.T) {
	chromium(t)
	const n, parents = 1000, 20
	e := newEnv(t, held())
	callers := []asyncagents.Caller{e.caller}
	for len(callers) < parents {
		callers = append(callers, parent(t, e.f))
	}
	var tasks []asyncagents.Task
	for i := range n {
		tasks = append(tasks, e.launch(t, callers[i%parents], fmt.Sprintf("task %d", i), "x", false))
	}
	ctx := browser(t, 1280, 900)
	start := time.Now()
	var count int
	run(t, ctx, 60*time.Second,
		chromedp.Navigate(e.srv.URL+"/"),
		chromedp.Poll(`document.querySelectorAll('article.task').length === 1000 && document.querySelectorAll('section.group').length`, &count,
			chromedp.WithPollingTimeout(30*time.Second)))
	t.Logf("%d tasks in %d groups on the page %v after navigation", n, count, time.Since(start).Round(time.Millisecond))
	if count != parents {
		t.Errorf("%d groups, want %d", count, parents)
	}
	var ok bool
	run(t, ctx, 10*time.Second, chromedp.Evaluate(`(() => {
		document.querySelectorAll('article.task').forEach(el => el.__tag = 1);
		window.__long = [];
		new PerformanceObserver(l => l.getEntries().forEach(e => window.__long.push(e.duration))).observe({type: 'longtask'});
		return true;
	})()`, &ok))

	// 200 tasks finish, each after a tool call: several changes per task.
	start = time.Now()
	for _, task := range tasks[:200] {
		if err := e.f.Release(task.SessionID, opencodetest.Bash("echo hi"), opencodetest.Text("done")); err != nil {
			t.Fatal(err)
		}
	}
	var done bool
	run(t, ctx, 60*time.Second, chromedp.Poll(`document.querySelector('[data-count="completed"]').textContent === '200'`, &done,
		chromedp.WithPollingTimeout(45*time.Second)))
	t.Logf("200 completions on the page %v after the releases", time.Since(start).Round(time.Millisecond))
	var state struct {
		Rows, Tagged, Completed int
		Long                    []float64
	}
	run(t, ctx, 10*time.Second, chromedp.Evaluate(`(() => {
		const rows = [...document.querySelectorAll('article.task')];
		return {rows: rows.length, tagged: rows.filter(el => el.__tag === 1).length,
			completed: rows.filter(el => el.dataset.status === 'completed').length, long: window.__long};
	})()`, &state))
	if state.Rows != n || state.Tagged != n || state.Completed != 200 {
		t.Errorf("after the updates: %d rows, %d of them the same nodes as before, %d completed; want %d, %d, 200", state.Rows, state.Tagged, state.Completed, n, n)
	}
	var longest float64
	for _, d := range state.Long {
		longest = max(longest, d)
	}
	t.Logf("long tasks (> 50 ms) on the main thread while 200 tasks finished: %d, longest %.0f ms", len(state.Long), longest)
	r := row(t, ctx, tasks[0].ID)
	if r == nil || r.Status != "completed" || r.Calls != "1 tool call" || r.Text != "done" {
		t.Errorf("a finished row = %+v", r)
	}
}

// With a token, the page without a login says how to sign in; a login link opens it
// once: the page goes live, its address and history hold no code, and the cookie holds
// neither the code nor the token. The same link fails the second time. Without a token,
// the page needs no login and a link works all the same.
//
// S-2: the status page has its own credential: a single-use login link traded for an
// expiring server-side session, distinct from the bridge's token.
func TestBrowserLoginLinkWorksOnce(t *testing.T) {
	chromium(t)
	const token = "tok/en+with space"
	e := newEnv(t, held(), dashboard.WithToken(token))
	task := e.launch(t, e.caller, "signed in", "x", false)
	ctx := browser(t, 1280, 900)
	var notice, loc string
	run(t, ctx, 30*time.Second,
		chromedp.Navigate(e.srv.URL+"/"),
		chromedp.WaitVisible(`#notice p`, chromedp.ByQuery),
		chromedp.Text(`#notice p span`, &notice, chromedp.ByQuery))
	if !strings.Contains(notice, "login link") || strings.Contains(notice, "token=") {
		t.Errorf("notice without a login = %q", notice)
	}

	link := e.srv.URL + "/" + e.h.LoginLink()
	code := link[strings.Index(link, "=")+1:]
	run(t, ctx, 30*time.Second,
		chromedp.Navigate(link),
		chromedp.WaitVisible(`#conn[data-state="live"]`, chromedp.ByQuery),
		chromedp.Location(&loc))
	if loc != e.srv.URL+"/" {
		t.Errorf("address after the login = %s", loc)
	}
	waitRow(t, ctx, task.ID, 10*time.Second, "the task", func(r *rowState) bool { return r.Status == "running" })
	var hidden bool
	run(t, ctx, 5*time.Second, chromedp.Evaluate(`document.getElementById('notice').hidden`, &hidden))
	if !hidden {
		t.Error("the sign-in notice stayed after the login")
	}
	var history []*page.NavigationEntry
	var cookies, pageCookies []*network.Cookie
	run(t, ctx, 10*time.Second, chromedp.ActionFunc(func(ctx context.Context) error {
		var err error
		if _, history, err = page.GetNavigationHistory().Do(ctx); err != nil {
			return err
		}
		if cookies, err = network.GetCookies().WithURLs([]string{e.srv.URL + "/api/events"}).Do(ctx); err != nil {
			return err
		}
		pageCookies, err = network.GetCookies().WithURLs([]string{e.srv.URL + "/"}).Do(ctx)
		return err
	}))
	for _, h := range history {
		if strings.Contains(h.URL, code) || strings.Contains(h.URL, "login=") {
			t.Errorf("history holds the code: %s", h.URL)
		}
	}
	_, port, _ := strings.Cut(strings.TrimPrefix(e.srv.URL, "http://"), ":")
	if len(cookies) != 1 {
		t.Fatalf("cookies for the API: %+v", cookies)
	}
	c := cookies[0]
	if c.Name != "asyncagents_dashboard_"+port || !c.HTTPOnly || c.SameSite != network.CookieSameSiteStrict || c.Path != "/api/" ||
		strings.Contains(c.Value, code) || strings.Contains(c.Value, token) || strings.Contains(c.Value, url.QueryEscape(token)) {
		t.Errorf("cookie = %+v", c)
	}
	if len(pageCookies) != 0 {
		t.Errorf("cookies sent outside the API: %+v", pageCookies)
	}

	// The same link a second time: refused, though this browser is signed in.
	var h1 string
	run(t, ctx, 30*time.Second,
		chromedp.Navigate(link),
		chromedp.Text(`h1`, &h1, chromedp.ByQuery))
	if h1 != "This login link is not valid" {
		t.Errorf("the link opened again shows %q", h1)
	}
	run(t, ctx, 30*time.Second,
		chromedp.Navigate(e.srv.URL+"/"),
		chromedp.WaitVisible(`#conn[data-state="live"]`, chromedp.ByQuery))

	// Without a token: the page needs nothing, and a link works too.
	open := newEnv(t, held())
	run(t, ctx, 30*time.Second,
		chromedp.Navigate(open.srv.URL+"/"),
		chromedp.WaitVisible(`#conn[data-state="live"]`, chromedp.ByQuery),
		chromedp.Navigate(open.srv.URL+"/"+open.h.LoginLink()),
		chromedp.WaitVisible(`#conn[data-state="live"]`, chromedp.ByQuery),
		chromedp.Location(&loc))
	if loc != open.srv.URL+"/" {
		t.Errorf("address after the login without a token = %s", loc)
	}
}

// A page whose name resolves to 127.0.0.1 (DNS rebinding: the browser's host rules
// stand for a DNS answer) gets 403 for the page and for its own script's API requests;
// a name of WithAllowedHosts loads.
//
// S-1: Host is checked on loopback listeners.
func TestBrowserDNSRebindingRefused(t *testing.T) {
	chromium(t)
	e := newEnv(t, held())
	allowed := newEnv(t, held(), dashboard.WithAllowedHosts("dev.test"))
	ctx := browser(t, 1280, 900, chromedp.Flag("host-resolver-rules", "MAP rebind.test 127.0.0.1, MAP dev.test 127.0.0.1"))
	_, port, _ := strings.Cut(strings.TrimPrefix(e.srv.URL, "http://"), ":")
	_, allowedPort, _ := strings.Cut(strings.TrimPrefix(allowed.srv.URL, "http://"), ":")
	var body string
	var status int
	run(t, ctx, 30*time.Second,
		chromedp.Navigate("http://rebind.test:"+port+"/"),
		chromedp.Text(`body`, &body, chromedp.ByQuery),
		chromedp.Evaluate(`fetch('/api/tasks').then(r => r.status)`, &status, func(p *runtime.EvaluateParams) *runtime.EvaluateParams {
			return p.WithAwaitPromise(true)
		}))
	if !strings.Contains(body, "host not allowed") || status != 403 {
		t.Errorf("the page at rebind.test: %q; its fetch of /api/tasks: %d", body, status)
	}
	run(t, ctx, 30*time.Second,
		chromedp.Navigate("http://localhost:"+port+"/"),
		chromedp.WaitVisible(`#conn[data-state="live"]`, chromedp.ByQuery),
		chromedp.Navigate("http://dev.test:"+allowedPort+"/"),
		chromedp.WaitVisible(`#conn[data-state="live"]`, chromedp.ByQuery))
}

// TestBrowserScreenshot saves a picture of the page with tasks in every state when
// ASYNCAGENTS_SCREENSHOT names a file (make the README's docs/dashboard.png with it).
func TestBrowserScreenshot(t *testing.T) {
	path := os.Getenv("ASYNCAGENTS_SCREENSHOT")
	if path == "" {
		t.Skip("set ASYNCAGENTS_SCREENSHOT=path.png to save a screenshot of the page")
	}
	width := 1280
	if w, err := strconv.Atoi(os.Getenv("ASYNCAGENTS_SCREENSHOT_WIDTH")); err == nil && w > 0 {
		width = w
	}
	chromium(t)
	model := opencodetest.NewModel()
	t.Cleanup(model.Close)
	model.SetScript(demoScript)
	srv := opencodetest.Start(t, opencodetest.WithModel(model))
	e := newRealEnv(t, srv, []asyncagents.Option{asyncagents.WithConcurrency(asyncagents.Limits{Default: 3}),
		asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply)})
	c := srv.Client()
	ctx := context.Background()
	// The first parent did some work that its forked task inherits.
	if _, err := c.Prompt(ctx, e.caller.SessionID, opencode.PromptRequest{Parts: []opencode.TextPartInput{
		opencode.NewText("RUN:ls ||| echo go test ./... ||| git status --short")}}); err != nil {
		t.Fatal(err)
	}
	review := asyncagents.Caller{SessionID: newSession(t, c, "review"), Agent: "plan"}

	wait := func(id string, st asyncagents.Status) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			got, _ := e.m.Get(id)
			if got.Status == st {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("task %s is %s, want %s", id, got.Status, st)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	todo := e.launch(t, asyncagents.LaunchInput{Description: "Find TODO comments", Prompt: "[todo] List the TODO comments in the files we looked at.", Fork: true})
	api := e.launch(t, asyncagents.LaunchInput{Caller: review, Description: "Summarize the public API", Agent: "explore", Prompt: "[api] Summarize the exported API of the root package."})
	wait(todo.ID, asyncagents.StatusCompleted)
	wait(api.ID, asyncagents.StatusCompleted)
	flaky := e.launch(t, asyncagents.LaunchInput{Description: "Fetch the upstream changelog", Prompt: "[fail] Fetch the changelog."})
	wait(flaky.ID, asyncagents.StatusError)
	stale := e.launch(t, asyncagents.LaunchInput{Caller: review, Description: "Refactor the config loader", Prompt: "[slow] Refactor the config loader."})
	wait(stale.ID, asyncagents.StatusRunning)
	time.Sleep(1500 * time.Millisecond)
	if _, err := e.m.Cancel(ctx, review, stale.ID); err != nil {
		t.Fatal(err)
	}
	tests := e.launch(t, asyncagents.LaunchInput{Description: "Run the test suite", Prompt: "[tests] Run the tests and report failures.", Fork: true})
	lint := e.launch(t, asyncagents.LaunchInput{Caller: review, Description: "Lint every package", Prompt: "[lint] Run the linters."})
	bench := e.launch(t, asyncagents.LaunchInput{Description: "Benchmark the fork pipeline", Prompt: "[bench] Run the benchmarks."})
	queued := e.launch(t, asyncagents.LaunchInput{Caller: review, Description: "Check third-party licenses", Prompt: "[lint] Check the licenses."})
	if queued.Status != asyncagents.StatusQueued {
		t.Errorf("fourth running task is %s, want queued", queued.Status)
	}
	// Let the running tasks make a few tool calls.
	for _, id := range []string{tests.ID, lint.ID, bench.ID} {
		deadline := time.Now().Add(30 * time.Second)
		for got, _ := e.m.Get(id); got.Progress.ToolCalls < 2 && time.Now().Before(deadline); got, _ = e.m.Get(id) {
			time.Sleep(100 * time.Millisecond)
		}
	}

	bctx := browser(t, width, 900)
	var (
		png    []byte
		height int64
	)
	run(t, bctx, 60*time.Second,
		chromedp.EmulateViewport(int64(width), 900),
		chromedp.Navigate(e.url),
		chromedp.WaitVisible(`#conn[data-state="live"]`, chromedp.ByQuery),
		chromedp.Poll(`document.querySelectorAll('article.task').length === 8`, nil, chromedp.WithPollingTimeout(20*time.Second)),
		chromedp.Evaluate(`document.documentElement.scrollHeight`, &height))
	// The whole page in the viewport (rows off screen are not painted), at twice the pixels.
	run(t, bctx, 60*time.Second,
		chromedp.EmulateViewport(int64(width), height, chromedp.EmulateScale(2)),
		chromedp.Sleep(1200*time.Millisecond), // durations tick once
		chromedp.CaptureScreenshot(&png))
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("saved %s (%d bytes)", path, len(png))
}

func newSession(t *testing.T, c opencode.Client, title string) string {
	t.Helper()
	s, err := c.CreateSession(context.Background(), opencode.CreateSessionRequest{Title: title})
	if err != nil {
		t.Fatal(err)
	}
	return s.ID
}

// demoScript answers the screenshot's tasks by the tag in their prompt: a few tool calls,
// then a plausible reply; the running ones keep a long command going.
func demoScript(r *opencodetest.Request) (opencodetest.Reply, bool) {
	_, text := r.LastUser()
	done := len(r.ToolResultsSinceUser())
	steps := func(calls []opencodetest.Reply, reply string) (opencodetest.Reply, bool) {
		if done < len(calls) {
			return calls[done], true
		}
		return opencodetest.Text(reply), true
	}
	switch {
	case strings.Contains(text, "[todo]"):
		return steps([]opencodetest.Reply{
			opencodetest.CallTool("grep", `{"pattern":"TODO"}`),
			opencodetest.CallTool("read", `{"filePath":"manager.go"}`),
			opencodetest.Bash("sleep 2 && echo checked"),
		}, "Found 3 TODO comments in the files we looked at:\n"+
			"- manager.go:412 — retry the abort once when the server answers 5xx\n"+
			"- fork/pipeline.go:88 — keep the newest tool result whole even past the budget\n"+
			"- notify.go:151 — make the horizon configurable per parent")
	case strings.Contains(text, "[api]"):
		return steps([]opencodetest.Reply{
			opencodetest.CallTool("glob", `{"pattern":"*.go"}`),
			opencodetest.CallTool("read", `{"filePath":"doc.go"}`),
			opencodetest.Bash("sleep 3 && go doc ."),
			opencodetest.CallTool("read", `{"filePath":"manager.go"}`),
		}, "The root package exports Manager (Launch, Output, Resume, Cancel, List, Clear, Subscribe), "+
			"Task and its Status, the options With… and the five LLM tools returned by Tools.")
	case strings.Contains(text, "[fail]"):
		return opencodetest.Fail(400), true
	case strings.Contains(text, "[slow]"):
		return steps([]opencodetest.Reply{opencodetest.Bash("sleep 120")}, "done")
	case strings.Contains(text, "[tests]"):
		return steps([]opencodetest.Reply{
			opencodetest.CallTool("glob", `{"pattern":"**/*_test.go"}`),
			opencodetest.Bash("echo ok"),
			opencodetest.CallTool("read", `{"filePath":"go.mod"}`),
			opencodetest.Bash("sleep 300"),
		}, "done")
	case strings.Contains(text, "[lint]"):
		return steps([]opencodetest.Reply{
			opencodetest.Bash("echo vet"),
			opencodetest.CallTool("grep", `{"pattern":"nolint"}`),
			opencodetest.Bash("sleep 300"),
		}, "done")
	case strings.Contains(text, "[bench]"):
		return steps([]opencodetest.Reply{
			opencodetest.CallTool("list", `{"path":"."}`),
			opencodetest.Bash("echo bench"),
			opencodetest.Bash("sleep 300"),
		}, "done")
	}
	return opencodetest.Reply{}, false
}
