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
	"strings"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/dashboard"
	"github.com/asyncagents/asyncagents/mcpserver"
	"github.com/asyncagents/asyncagents/opencode"
)

const serveHelp = `Runs the asyncagents Manager for the OpenCode server at -url, with its tasks in -store, and
serves on -listen (loopback only):
  /mcp  the MCP bridge: the tools <prefix>_task, _output, _cancel, _list and _clear for
        OpenCode's agents (streamable HTTP, bearer token from -token-file)
  /     the status page and its API (same token)
For each -dir it registers the bridge with that project's OpenCode instance (POST /mcp,
or a reconnect when the project's opencode.json has the entry already); without -dir it
prints the opencode.json entry to add (or run asyncagents install).
SIGINT or SIGTERM stops it: the Manager and the store are closed, tasks go on running on
the server and are picked up by the next serve.
The server's password comes from OPENCODE_SERVER_PASSWORD (user OPENCODE_SERVER_USERNAME,
default "opencode").`

// DefaultListen is the address serve listens on by default: beside OpenCode's 4096.
const DefaultListen = "127.0.0.1:4097"

// multiFlag is a flag that may be given more than once.
type multiFlag []string

func (f *multiFlag) String() string     { return strings.Join(*f, ",") }
func (f *multiFlag) Set(v string) error { *f = append(*f, v); return nil }

type serveConfig struct {
	url, listen, store, tokenFile, prefix, logLevel string
	dirs                                            multiFlag
	register, readOnly                              bool
	shutdown                                        time.Duration
}

func runServe(ctx context.Context, fs *flag.FlagSet, args []string, out, errOut io.Writer) error {
	var c serveConfig
	fs.StringVar(&c.url, "url", envOr("OPENCODE_URL", "http://127.0.0.1:4096"), "the OpenCode server (default $OPENCODE_URL)")
	fs.StringVar(&c.listen, "listen", DefaultListen, "loopback address to serve the bridge and the status page on")
	fs.StringVar(&c.store, "store", defaultPath("tasks.jsonl"), "the task store file")
	fs.StringVar(&c.tokenFile, "token-file", defaultPath("token"), "the bearer token file (created when missing)")
	fs.StringVar(&c.prefix, "prefix", "asyncagents", "the MCP server name and tool prefix")
	fs.Var(&c.dirs, "dir", "a project `directory` to register the bridge with and find callers in (repeatable)")
	fs.BoolVar(&c.register, "register", true, "register the bridge with each -dir's OpenCode instance")
	fs.BoolVar(&c.readOnly, "read-only", false, "the status page cannot cancel tasks")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.DurationVar(&c.shutdown, "shutdown-timeout", 10*time.Second, "how long to wait for calls in flight on stop")
	if err := parse(fs, args, serveHelp); err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.logLevel)); err != nil {
		fmt.Fprintf(errOut, "%s: bad -log-level %q\n", fs.Name(), c.logLevel)
		return errUsage
	}
	log := slog.New(slog.NewTextHandler(errOut, &slog.HandlerOptions{Level: level}))
	return serve(ctx, c, out, log)
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
	if pw := os.Getenv("OPENCODE_SERVER_PASSWORD"); pw != "" {
		opts = append(opts, opencode.WithBasicAuth(envOr("OPENCODE_SERVER_USERNAME", "opencode"), pw))
	}
	return opencode.NewHTTPClient(url, opts...)
}

func serve(ctx context.Context, c serveConfig, out io.Writer, log *slog.Logger) (err error) {
	client, err := newClient(c.url)
	if err != nil {
		return err
	}
	version, err := client.Health(ctx)
	if err != nil {
		return fmt.Errorf("OpenCode at %s: %w", c.url, err)
	}
	token, err := loadToken(c.tokenFile, true)
	if err != nil {
		return err
	}
	ln, err := listenLoopback(c.listen)
	if err != nil {
		return err
	}
	defer ln.Close()
	if c.store == "" {
		return errors.New("no store path: set -store")
	}
	store, err := asyncagents.NewFileStore(c.store)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, store.Close()) }()
	m, err := asyncagents.New(client, asyncagents.WithStore(store), asyncagents.WithLogger(log), asyncagents.WithToolPrefix(c.prefix))
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), c.shutdown)
		defer cancel()
		err = errors.Join(err, m.Close(cctx))
	}()
	bridge, err := mcpserver.New(m, client, mcpserver.WithToken(token), mcpserver.WithDirectories(c.dirs...), mcpserver.WithLogger(log))
	if err != nil {
		return err
	}
	defer bridge.Close()
	dopts := []dashboard.Option{dashboard.WithToken(token), dashboard.WithLogger(log)}
	if c.readOnly {
		dopts = append(dopts, dashboard.WithReadOnly())
	}
	dash, err := dashboard.New(m, dopts...)
	if err != nil {
		return err
	}
	defer dash.Close()

	mux := http.NewServeMux()
	mux.Handle("/mcp", bridge)
	mux.Handle("/", dash)
	// Calls in flight (a blocking output waits up to 10 minutes) end when serving stops.
	callCtx, endCalls := context.WithCancel(context.Background())
	defer endCalls()
	srv := &http.Server{Handler: mux, BaseContext: func(net.Listener) context.Context { return callCtx }, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	base := "http://" + ln.Addr().String()
	mcpURL := base + "/mcp"
	fmt.Fprintf(out, "asyncagents serve: OpenCode %s at %s\n", version, c.url)
	fmt.Fprintf(out, "  MCP bridge:   %s (server name %q)\n", mcpURL, c.prefix)
	fmt.Fprintf(out, "  status page:  %s\n", base+"/?token="+token)
	fmt.Fprintf(out, "  task store:   %s\n", c.store)
	if len(c.dirs) == 0 || !c.register {
		snippet, _ := json.MarshalIndent(map[string]any{"mcp": map[string]any{c.prefix: projectEntry(mcpURL, c.tokenFile)}}, "  ", "  ")
		fmt.Fprintf(out, "Add to your project's opencode.json (or run `asyncagents install`):\n  %s\n", snippet)
	}
	if c.register {
		for _, dir := range c.dirs {
			st, err := register(ctx, client, dir, c.prefix, mcpURL, token)
			if err != nil {
				log.Warn("asyncagents: register the bridge", "dir", dir, "err", err)
				fmt.Fprintf(out, "  %s: not registered: %v\n", dir, err)
				continue
			}
			fmt.Fprintf(out, "  %s: %s\n", dir, st)
		}
	}
	fmt.Fprintln(out, "Ready. Stop with Ctrl-C.")

	select {
	case err = <-served:
		return err
	case <-ctx.Done():
	}
	log.Info("asyncagents: stopping; tasks go on running on the server")
	endCalls()
	sctx, cancel := context.WithTimeout(context.Background(), c.shutdown)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	return nil
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

// register makes dir's OpenCode instance connect to the bridge: a reconnect when the
// instance has an entry of that name (from its opencode.json), else POST /mcp. It returns
// the instance's state of the entry.
func register(ctx context.Context, client *opencode.HTTPClient, dir, name, url, token string) (string, error) {
	sts, err := client.MCPStatus(ctx, dir)
	if err != nil {
		return "", err
	}
	if st, ok := sts[name]; ok {
		if st.Status == opencode.MCPConnected {
			return "connected (from its config)", nil
		}
		if err := client.ConnectMCP(ctx, dir, name); err != nil {
			return "", err
		}
		return "reconnected (entry from its config)", nil
	}
	cfg := opencode.MCPConfig{Type: "remote", URL: url, OAuth: json.RawMessage("false"), Headers: map[string]string{"Authorization": "Bearer " + token}}
	st, err := client.AddMCP(ctx, dir, name, cfg)
	if err != nil {
		return "", err
	}
	if st.Status != opencode.MCPConnected {
		return "", fmt.Errorf("OpenCode says %s: %s", st.Status, st.Error)
	}
	return "registered (POST /mcp; until OpenCode restarts)", nil
}
