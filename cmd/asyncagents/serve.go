package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/dashboard"
	"github.com/asyncagents/asyncagents/mcpserver"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/pgstore"
)

const serveHelp = `Runs the asyncagents Manager for the OpenCode server at -url, with its tasks in -store, and
serves on -listen (loopback only):
  /mcp  the MCP bridge: the tools <prefix>_task, _output, _cancel, _list and _clear for
        OpenCode's agents (streamable HTTP, bearer token from -token-file)
  /     the status page and its API, with a credential of their own, made anew at each
        start and kept in memory only: the bridge's token does not open them (on Windows
        they take the bridge's token, which asyncagents tasks sends there). A browser
        signs in with the login link printed at start (asyncagents login prints another):
        it works once, within 5 minutes, and becomes a session cookie that ends with serve
On Unix it also listens on the socket -socket, for asyncagents tasks: its folder must be
yours alone (mode 0700, made when missing), the socket is 0600, and on Linux, macOS and
FreeBSD a connection from another user is refused. (Windows has no socket: tasks asks
over TCP with the token.)
For each -dir it registers the bridge with that project's OpenCode instance: a reconnect
when the project's opencode.json has the entry (for this serve's URL), else POST /mcp with
the current token, which lasts until OpenCode restarts and replaces an entry an earlier
serve added. Without -dir it prints the opencode.json entry to add (or run asyncagents
install), and finds callers in the OpenCode server's own directory.
What models can start: at most -max-running tasks run at once (more wait queued; -limit
sets a provider's or a model's own), at most -max-per-parent of one session's tasks are
active (more is an error its model reads), a run is aborted after -deadline, or after
-stale-timeout without activity, or once it used -task-budget-tokens or -task-budget-cost; a
session whose tasks, with theirs, used -tree-budget-tokens or -tree-budget-cost cannot start
more; the task tool's description tells the model these limits.
Connections: a request must send its headers within 10 s and its body within 30 s; an
idle keep-alive connection is closed after 60 s; headers are limited to 64 KiB; at most
-max-conns connections are open at once on -listen (more wait until one closes). Answers
are not limited: the status page's event stream and a tool call that streams its answer
(a blocking output, up to 600 s) last as long as they need.
Notifications: each run end is posted to its parent session at once without reply, and the
parent's model is asked for one turn for all it has not seen (-notify wave): when the session
has no task running, or -wave-window after the last run end while some still run.
Several serves can share one PostgreSQL -store (postgres://…), on one machine or several,
in front of one OpenCode server: each task is acted on by one serve at a time, under a lease
it renews every third of -lease; the tasks of a serve that stops (or loses the database) are
claimed by another once their leases expire. Serves in front of different OpenCode servers
that share a database give each server a -server-name of its own.
SIGINT or SIGTERM stops it: the Manager and the store are closed, tasks go on running on
the server and are picked up by the next serve (with PostgreSQL, by another serve at once).
The server's password comes from OPENCODE_SERVER_PASSWORD (user OPENCODE_SERVER_USERNAME,
default "opencode"). Started before OpenCode, serve waits until OpenCode answers at -url.`

// DefaultListen is the address serve listens on by default: beside OpenCode's 4096.
const DefaultListen = "127.0.0.1:4097"

// multiFlag is a flag that may be given more than once.
type multiFlag []string

func (f *multiFlag) String() string     { return strings.Join(*f, ",") }
func (f *multiFlag) Set(v string) error { *f = append(*f, v); return nil }

type serveConfig struct {
	url, listen, socket, store, tokenFile, prefix, logLevel string
	dirs                                                    multiFlag
	register, readOnly                                      bool
	shutdown                                                time.Duration
	http                                                    httpLimits
	bounds                                                  taskBounds
	notify                                                  asyncagents.NotifyPolicy
	waveWindow                                              time.Duration
	lease                                                   time.Duration
	serverName                                              string
	forkMode                                                string
	isolation                                               string
	digestAfter, digestEvery                                time.Duration
	budgetPause                                             bool
	recordKeyFile                                           string
	worktreeRoot                                            string
}

// taskBounds is what serve lets the models start: the Manager's concurrency limits, its cap
// on one parent session's active tasks, and its watchdogs.
type taskBounds struct {
	maxRunning, perParent  int
	limits                 multiFlag // "provider=N" or "provider/model=N"
	deadline, stale        time.Duration
	taskBudget, treeBudget asyncagents.Budget
}

// The defaults of serve's task bounds: enough for a model that fans work out, few enough
// that a model launching in a loop (say 300 calls in a second) cannot start hundreds of
// agents, and no run left going for hours unseen.
const (
	defaultMaxRunning = 8
	defaultPerParent  = 20
	defaultDeadline   = 2 * time.Hour
	defaultStale      = 30 * time.Minute
)

// options returns the Manager options of b, or a usage message.
func (b taskBounds) options() ([]asyncagents.Option, error) {
	l := asyncagents.Limits{Default: b.maxRunning, Providers: map[string]int{}, Models: map[string]int{}}
	for _, kv := range b.limits {
		key, v, ok := strings.Cut(kv, "=")
		n, err := strconv.Atoi(v)
		if !ok || err != nil || n < 0 || key == "" {
			return nil, fmt.Errorf("bad -limit %s: want provider=N or provider/model=N, N ≥ 0", quote(kv))
		}
		if strings.Contains(key, "/") {
			l.Models[key] = n
		} else {
			l.Providers[key] = n
		}
	}
	switch {
	case b.maxRunning < 0:
		return nil, fmt.Errorf("bad -max-running %d: must not be negative", b.maxRunning)
	case b.perParent < 0 || b.perParent > asyncagents.MaxActivePerParent:
		return nil, fmt.Errorf("bad -max-per-parent %d: 0 to %d", b.perParent, asyncagents.MaxActivePerParent)
	case b.deadline < 0 || b.stale < 0:
		return nil, errors.New("bad -deadline or -stale-timeout: must not be negative")
	}
	for _, f := range []struct {
		name string
		bad  bool
	}{{"task-budget-tokens", b.taskBudget.Tokens < 0}, {"task-budget-cost", b.taskBudget.Cost < 0},
		{"tree-budget-tokens", b.treeBudget.Tokens < 0}, {"tree-budget-cost", b.treeBudget.Cost < 0}} {
		if f.bad {
			return nil, fmt.Errorf("bad -%s: must not be negative", f.name)
		}
	}
	return []asyncagents.Option{asyncagents.WithConcurrency(l), asyncagents.WithMaxActivePerParent(b.perParent),
		asyncagents.WithDeadline(b.deadline), asyncagents.WithStaleTimeout(b.stale),
		asyncagents.WithTaskBudget(b.taskBudget), asyncagents.WithTreeBudget(b.treeBudget)}, nil
}

func runServe(ctx context.Context, fs *flag.FlagSet, args []string, out, errOut io.Writer) error {
	c, log, err := parseServe(fs, args, errOut)
	if err != nil {
		return err
	}
	return serve(ctx, c, out, log)
}

// parseServe parses serve's command line into a config and a logger writing to errOut.
func parseServe(fs *flag.FlagSet, args []string, errOut io.Writer) (serveConfig, *slog.Logger, error) {
	c := serveConfig{http: defaultHTTPLimits(), bounds: taskBounds{maxRunning: defaultMaxRunning, perParent: defaultPerParent,
		deadline: defaultDeadline, stale: defaultStale}}
	fs.StringVar(&c.url, "url", envOr("OPENCODE_URL", "http://127.0.0.1:4096"), "the OpenCode server (default $OPENCODE_URL)")
	fs.StringVar(&c.listen, "listen", DefaultListen, "loopback address to serve the bridge and the status page on")
	if socketSupported {
		fs.StringVar(&c.socket, "socket", defaultPath("serve.sock"), "the Unix `socket` for asyncagents tasks (\"\": none)")
	}
	fs.StringVar(&c.store, "store", defaultPath("tasks.jsonl"),
		"the task store: a file, or a PostgreSQL URL (postgres://user@host/db; the password from PGPASSWORD or ~/.pgpass) shared by several serves")
	fs.StringVar(&c.serverName, "server-name", "",
		"with a PostgreSQL -store shared by serves in front of several OpenCode servers: the name of this one's (each serve claims only its server's tasks)")
	fs.DurationVar(&c.lease, "lease", pgstore.DefaultLease, "with a PostgreSQL -store: how long a task's lease lasts unrenewed (another serve claims the tasks of one that stopped after it)")
	fs.StringVar(&c.tokenFile, "token-file", defaultPath("token"), "the bridge's bearer token file (created when missing)")
	fs.StringVar(&c.prefix, "prefix", asyncagents.DefaultToolPrefix, "the MCP server name and tool prefix: 1 to 40 letters, digits, _ or -")
	fs.Var(&c.dirs, "dir", "a project `directory` to register the bridge with and find callers in (repeatable)")
	fs.BoolVar(&c.register, "register", true, "register the bridge with each -dir's OpenCode instance")
	fs.BoolVar(&c.readOnly, "read-only", false, "the status page cannot cancel tasks")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.DurationVar(&c.shutdown, "shutdown-timeout", 10*time.Second, "how long to wait for calls in flight on stop")
	fs.IntVar(&c.http.maxConns, "max-conns", defaultMaxConns, fmt.Sprintf("connections open at once on -listen: 1 to %d", maxMaxConns))
	fs.IntVar(&c.bounds.maxRunning, "max-running", c.bounds.maxRunning, "tasks running at once, of all sessions; more wait queued (0: no limit)")
	fs.Var(&c.bounds.limits, "limit", "a concurrency limit of one provider or model, `provider=N or provider/model=N` (repeatable; beats -max-running)")
	fs.IntVar(&c.bounds.perParent, "max-per-parent", c.bounds.perParent, "active (queued, running, resumed) tasks of one session; more is an error for its model (0: no cap)")
	fs.DurationVar(&c.bounds.deadline, "deadline", c.bounds.deadline, "how long a run may take before it is aborted (0: no limit)")
	fs.DurationVar(&c.bounds.stale, "stale-timeout", c.bounds.stale, "how long a run may show no activity before it is aborted (0: no limit)")
	fs.Int64Var(&c.bounds.taskBudget.Tokens, "task-budget-tokens", 0, "tokens a run may use before it is aborted (0: no limit)")
	fs.Float64Var(&c.bounds.taskBudget.Cost, "task-budget-cost", 0, "USD a run may cost before it is aborted (0: no limit)")
	fs.Int64Var(&c.bounds.treeBudget.Tokens, "tree-budget-tokens", 0, "tokens a session's tasks, with theirs, may use before no more can start (0: no limit)")
	fs.Float64Var(&c.bounds.treeBudget.Cost, "tree-budget-cost", 0, "USD a session's tasks, with theirs, may cost before no more can start (0: no limit)")
	fs.TextVar(&c.notify, "notify", asyncagents.NotifyPerWave,
		"how a session's notifications ask for its model's turn: wave (one turn for the run ends of a wave), run (one per run end) or none")
	fs.DurationVar(&c.waveWindow, "wave-window", asyncagents.DefaultWaveWindow,
		fmt.Sprintf("with -notify wave, how long a turn waits for more runs to end while some still run: 0 to %v", asyncagents.MaxWaveWindow))
	fs.StringVar(&c.forkMode, "fork-mode", string(asyncagents.ForkDigest),
		"how forked tasks get the context when the model does not say: digest (one text, cut to fit) or native (OpenCode's copy of the session, which keeps the prompt cache)")
	fs.StringVar(&c.isolation, "isolation", string(asyncagents.IsolationNone),
		"where tasks work when the model does not say: none (in the parent's directory) or worktree (in a git worktree of their own; the model merges their changes with asyncagents_merge). Worktrees are made with git on this machine: the OpenCode server must see the same files")
	fs.StringVar(&c.recordKeyFile, "record-key-file", "",
		"a file holding the key that seals task records (one line of at least 32 characters, mode 0600): every serve of a shared store must have the same one, and a record not sealed with it is refused")
	fs.BoolVar(&c.budgetPause, "budget-pause", false,
		"a run that reaches its budget pauses (cancelled, with what it did so far; a resume goes on) rather than fails")
	fs.DurationVar(&c.digestAfter, "digest-after", asyncagents.DefaultDigestAfter,
		"show a session's model the progress of its tasks running longer than this, at its next turn (0: never)")
	fs.DurationVar(&c.digestEvery, "digest-every", asyncagents.DefaultDigestEvery, "the least time between two progress digests to one session")
	fs.StringVar(&c.worktreeRoot, "worktree-root", "",
		"the folder isolated tasks' worktrees are made in (default: each repository's .git/asyncagents/worktrees)")
	if err := parse(fs, args, serveHelp); err != nil {
		return c, nil, err
	}
	if i := asyncagents.Isolation(c.isolation); i != asyncagents.IsolationNone && i != asyncagents.IsolationWorktree {
		fmt.Fprintf(errOut, "%s: bad -isolation %q: none or worktree\n", fs.Name(), c.isolation)
		return c, nil, errUsage
	}
	if m := asyncagents.ForkMode(c.forkMode); m != asyncagents.ForkDigest && m != asyncagents.ForkNative {
		fmt.Fprintf(errOut, "%s: bad -fork-mode %q: digest or native\n", fs.Name(), c.forkMode)
		return c, nil, errUsage
	}
	if c.waveWindow < 0 || c.waveWindow > asyncagents.MaxWaveWindow {
		fmt.Fprintf(errOut, "%s: bad -wave-window %v: 0 to %v\n", fs.Name(), c.waveWindow, asyncagents.MaxWaveWindow)
		return c, nil, errUsage
	}
	if c.lease < time.Second || c.lease > time.Hour {
		fmt.Fprintf(errOut, "%s: bad -lease %v: 1s to 1h\n", fs.Name(), c.lease)
		return c, nil, errUsage
	}
	if _, err := c.bounds.options(); err != nil {
		fmt.Fprintf(errOut, "%s: %v\n", fs.Name(), err)
		return c, nil, errUsage
	}
	if err := checkPrefix(fs, c.prefix); err != nil {
		return c, nil, err
	}
	if c.http.maxConns < 1 || c.http.maxConns > maxMaxConns {
		fmt.Fprintf(errOut, "%s: bad -max-conns %d: 1 to %d\n", fs.Name(), c.http.maxConns, maxMaxConns)
		return c, nil, errUsage
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.logLevel)); err != nil {
		fmt.Fprintf(errOut, "%s: bad -log-level %q\n", fs.Name(), c.logLevel)
		return c, nil, errUsage
	}
	return c, slog.New(slog.NewTextHandler(errOut, &slog.HandlerOptions{Level: level})), nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// newClient returns a client for the server at url with the password of the environment.
func newClient(url string) (*opencode.HTTPClient, error) {
	var opts []opencode.ClientOption
	if pw := os.Getenv(passwordVar); pw != "" {
		opts = append(opts, opencode.WithBasicAuth(envOr(userVar, "opencode"), pw))
	}
	return opencode.NewHTTPClient(url, opts...)
}

// serve runs the Manager, the bridge and the status page for c until ctx is done or a
// listener fails: it reads the token, listens, opens the store, connects to OpenCode
// (waiting until it answers), starts the Manager and the log of its tasks' launches, ends
// and notifications, builds the bridge and the status page, prints what it serves,
// registers the bridge with each -dir, and serves; then it stops serving and closes what it
// opened, the last first.
func serve(ctx context.Context, c serveConfig, out io.Writer, log *slog.Logger) (err error) {
	if w := storePasswordWarning(c.store); w != "" {
		log.Warn("asyncagents serve: "+w, "store", storeName(c.store))
	}
	token, dashToken, err := serveTokens(c.tokenFile)
	if err != nil {
		return err
	}
	ln, err := listenLoopback(c.listen)
	if err != nil {
		return err
	}
	defer ln.Close()
	store, err := openStore(c)
	if err != nil {
		return err
	}
	client, version, err := connect(ctx, c.url, log)
	if err != nil {
		return errors.Join(err, store.Close())
	}
	m, closeManager, err := openManager(client, store, c, log)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, closeManager()) }()
	stopLog, err := logActivity(m, log, nil)
	if err != nil {
		return err
	}
	defer stopLog()
	bridge, err := newBridge(m, client, c.dirs, token, log)
	if err != nil {
		return err
	}
	defer bridge.Close()
	dash, err := newDashboard(m, c.readOnly, dashToken, log)
	if err != nil {
		return err
	}
	defer dash.Close()
	local, err := listenLocal(c.socket, log)
	if err != nil {
		return err
	}
	if local != nil {
		defer local.Close()
	}

	mux := http.NewServeMux()
	mux.Handle("/mcp", bridge)
	mux.Handle("/", dash)
	srv := startHTTP(mux, withCredential(dash, dashToken), c.http, log, ln, local)
	base := "http://" + ln.Addr().String()
	printServing(out, c, version, base, dash.LoginLink(), local != nil)
	registerBridge(ctx, client, c, base+"/mcp", token, out, log)
	fmt.Fprintln(out, "Ready. Stop with Ctrl-C.")
	return srv.run(ctx, c.shutdown, log)
}

// connect returns a client for the OpenCode server at url and the server's version
// (GET /global/health). While nothing listens at url it waits, trying every second, until
// ctx is done — serve may be started before OpenCode — and logs once what it waits for. A
// server that asks for a password serve was not given, or refuses the one it was, is an error
// naming OPENCODE_SERVER_PASSWORD; one that answers without the password serve was given is
// a warning, since anyone on the machine can then reach it.
func connect(ctx context.Context, url string, log *slog.Logger) (*opencode.HTTPClient, string, error) {
	client, err := newClient(url)
	if err != nil {
		return nil, "", err
	}
	for waiting := false; ; {
		version, err := client.Health(ctx)
		switch {
		case err == nil:
			warnWithoutPassword(ctx, url, log)
			return client, version, nil
		case errors.Is(err, opencode.ErrUnauthorized):
			if os.Getenv(passwordVar) == "" {
				return nil, "", fmt.Errorf("OpenCode at %s asks for a password: set %s (and %s, when OpenCode's is not \"opencode\") in serve's environment to the one OpenCode was started with", url, passwordVar, userVar)
			}
			return nil, "", fmt.Errorf("OpenCode at %s refuses the password in %s (user %q from %s): it is not the one OpenCode was started with", url, passwordVar, envOr(userVar, "opencode"), userVar)
		case !notListening(err):
			return nil, "", fmt.Errorf("OpenCode at %s: %w", url, err)
		}
		if !waiting {
			waiting = true
			log.Warn("asyncagents serve: nothing answers at the OpenCode URL yet; waiting for OpenCode to start there "+
				"(opencode serve --port N, or the TUI with opencode --port N, and serve -url http://127.0.0.1:N)", "url", url)
		}
		select {
		case <-ctx.Done():
			return nil, "", fmt.Errorf("stopped while waiting for OpenCode at %s", url)
		case <-time.After(time.Second):
		}
	}
}

// The environment variables that give serve OpenCode's password, as OpenCode reads them.
const (
	passwordVar = "OPENCODE_SERVER_PASSWORD"
	userVar     = "OPENCODE_SERVER_USERNAME"
)

// notListening reports whether err is a failure to connect: nothing listens at the address
// (yet).
func notListening(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// warnWithoutPassword logs a warning when serve was given a password and the server at url
// answers GET /global/health without one.
func warnWithoutPassword(ctx context.Context, url string, log *slog.Logger) {
	if os.Getenv(passwordVar) == "" {
		return
	}
	open, err := opencode.NewHTTPClient(url)
	if err != nil {
		return
	}
	if _, err := open.Health(ctx); err == nil {
		log.Warn("asyncagents serve: OpenCode answers without a password, although "+passwordVar+" is set for serve: "+
			"start OpenCode with the same "+passwordVar+", or anyone on this machine can use it", "url", url)
	}
}

// serveTokens returns the bridge's token, read from tokenFile (created when missing), and
// the status page's credential: on Unix made for this run and kept in memory only (the
// socket adds it for asyncagents tasks). Windows has no socket: tasks asks over TCP with
// the token file's token, so there the page shares the bridge's token.
func serveTokens(tokenFile string) (token, dashToken string, err error) {
	if token, err = loadToken(tokenFile, true); err != nil {
		return "", "", err
	}
	if !socketSupported {
		return token, token, nil
	}
	if dashToken, err = randomToken(); err != nil {
		return "", "", err
	}
	return token, dashToken, nil
}

// openManager starts the Manager on store (c.store, opened), with c's task bounds, logger
// and tool prefix; on failure it closes store. closeManager closes the Manager, waiting at
// most c.shutdown, then the store, and returns their errors joined.
//
// extra options come after those of c.
func openManager(client opencode.Client, store closingStore, c serveConfig, log *slog.Logger, extra ...asyncagents.Option) (m *asyncagents.Manager, closeManager func() error, err error) {
	bounds, err := c.bounds.options()
	if err == nil && c.recordKeyFile != "" {
		var key []byte
		if key, err = loadRecordKey(c.recordKeyFile); err == nil {
			bounds = append(bounds, asyncagents.WithRecordKey(key))
		}
	}
	if err != nil {
		return nil, nil, errors.Join(err, store.Close())
	}
	opts := append(bounds, asyncagents.WithStore(store), asyncagents.WithLogger(log),
		asyncagents.WithToolPrefix(c.prefix), asyncagents.WithNotifyPolicy(c.notify), asyncagents.WithWaveWindow(c.waveWindow),
		asyncagents.WithForkMode(asyncagents.ForkMode(c.forkMode)), asyncagents.WithIsolation(asyncagents.Isolation(c.isolation)),
		asyncagents.WithWorktreeRoot(c.worktreeRoot), asyncagents.WithProgressDigest(c.digestAfter, c.digestEvery),
		asyncagents.WithBudgetPause(c.budgetPause))
	m, err = asyncagents.New(client, append(opts, extra...)...)
	if err != nil {
		return nil, nil, errors.Join(err, store.Close())
	}
	return m, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), c.shutdown)
		defer cancel()
		return errors.Join(m.Close(ctx), store.Close())
	}, nil
}

// closingStore is a Store that is closed after the Manager.
type closingStore interface {
	asyncagents.Store
	Close() error
}

// openStore opens c.store: a pgstore for a postgres:// or postgresql:// URL, else a file.
func openStore(c serveConfig) (closingStore, error) {
	if c.store == "" {
		return nil, errors.New("no store: set -store")
	}
	if isPostgresURL(c.store) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return pgstore.Open(ctx, c.store, pgstore.Options{Lease: c.lease, Server: c.serverName})
	}
	return asyncagents.NewFileStore(c.store)
}

// newBridge returns the MCP bridge of m, which asks for token and finds callers in dirs
// (none: in the OpenCode server's own directory).
func newBridge(m *asyncagents.Manager, client opencode.Client, dirs []string, token string, log *slog.Logger) (*mcpserver.Server, error) {
	opts := []mcpserver.Option{mcpserver.WithToken(token), mcpserver.WithLogger(log)}
	if len(dirs) > 0 {
		opts = append(opts, mcpserver.WithDirectories(dirs...))
	}
	return mcpserver.New(m, client, opts...)
}

// newDashboard returns the status page of m, which asks for token.
func newDashboard(m *asyncagents.Manager, readOnly bool, token string, log *slog.Logger) (*dashboard.Handler, error) {
	opts := []dashboard.Option{dashboard.WithToken(token), dashboard.WithLogger(log)}
	if readOnly {
		opts = append(opts, dashboard.WithReadOnly())
	}
	return dashboard.New(m, opts...)
}

// listenLocal listens on the Unix socket at path for asyncagents tasks (listenSocket); it
// returns a nil listener for the path "" (no socket).
func listenLocal(path string, log *slog.Logger) (net.Listener, error) {
	if path == "" {
		return nil, nil
	}
	return listenSocket(path, log)
}

// printServing tells the user what serve serves at base (http://host:port): the OpenCode
// server, the bridge, the status page's login link, the socket when it has one, the store,
// and, unless it registers the bridge with each -dir, the entry to add to opencode.json.
func printServing(out io.Writer, c serveConfig, version, base, loginLink string, socket bool) {
	mcpURL := base + "/mcp"
	fmt.Fprintf(out, "asyncagents serve: OpenCode %s at %s\n", quote(version), quote(c.url))
	fmt.Fprintf(out, "  MCP bridge:   %s (server name %q)\n", mcpURL, c.prefix)
	fmt.Fprintf(out, "  status page:  %s (works once, within %v; asyncagents login prints another)\n", base+"/"+loginLink, dashboard.DefaultLoginTTL)
	if socket {
		fmt.Fprintf(out, "  socket:       %s (for asyncagents tasks)\n", quote(c.socket))
	}
	fmt.Fprintf(out, "  task store:   %s\n", quote(storeName(c.store)))
	if len(c.dirs) == 0 || !c.register {
		tokenFile, _ := filepath.Abs(c.tokenFile)
		snippet, _ := json.MarshalIndent(map[string]any{"mcp": map[string]any{c.prefix: projectEntry(mcpURL, tokenFile)}}, "  ", "  ")
		fmt.Fprintf(out, "Add to your project's opencode.json (or run `asyncagents install`):\n  %s\n", escapeJSON(snippet))
	}
}

// registerBridge registers the bridge at mcpURL with the OpenCode instance of each of
// c.dirs (register), unless -register=false, and prints what it did for each. A directory
// that fails is printed and logged, and serve goes on.
func registerBridge(ctx context.Context, client *opencode.HTTPClient, c serveConfig, mcpURL, token string, out io.Writer, log *slog.Logger) {
	if !c.register {
		return
	}
	for _, dir := range c.dirs {
		st, err := register(ctx, client, dir, c.prefix, mcpURL, token)
		if err != nil {
			log.Warn("asyncagents: register the bridge", "dir", dir, "err", err)
			fmt.Fprintf(out, "  %s: not registered: %s\n", quote(dir), quote(err.Error()))
			continue
		}
		fmt.Fprintf(out, "  %s: %s\n", quote(dir), quote(st))
	}
}

// listenLoopback listens on addr, which must name a loopback host.
func listenLoopback(addr string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("-listen %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("-listen %q: the bridge serves loopback only (127.0.0.1, ::1 or localhost)", addr)
	}
	return net.Listen("tcp", addr)
}

// projectEntry is the bridge's entry for a project's opencode.json: the token is read from
// tokenFile by OpenCode ({file:…}), so the project file holds no secret.
func projectEntry(url, tokenFile string) opencode.MCPConfig {
	return opencode.MCPConfig{
		Type:    "remote",
		URL:     url,
		OAuth:   json.RawMessage("false"),
		Headers: map[string]string{"Authorization": "Bearer {file:" + tokenFile + "}"},
	}
}
