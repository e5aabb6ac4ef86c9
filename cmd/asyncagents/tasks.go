package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/pgstore"
)

const tasksHelp = `Lists the tasks: what runs, for which parent session, since when, and how it ended.
On Unix it asks the serve on the Unix socket -socket, sending no token: the socket's folder
is yours alone, and on Linux, macOS and FreeBSD a socket served by another user is refused.
When no serve listens there (no socket, or nothing accepts on it) it reads -store without
creating, locking or changing it; no store means no tasks. With a PostgreSQL -store
(postgres://…, shared by several serves) it reads the database at once: every serve's tasks.
On Windows, which has no
socket, it asks the serve at -listen over TCP with the token of -token-file, which goes to
whatever process holds that port.
Text from models and servers (ids, descriptions, errors) is printed with control and
bidirectional characters escaped (\x1b, \u202e), so it cannot move the cursor, retitle the
terminal or reorder the line. -json prints the tasks as a JSON array (asyncagents.Task),
with those characters as \u escapes in its strings.`

type tasksConfig struct {
	serveAddr
	store, parent, status string
	json                  bool
}

func runTasks(ctx context.Context, fs *flag.FlagSet, args []string, out, errOut io.Writer) error {
	var c tasksConfig
	c.serveAddr.flags(fs)
	fs.StringVar(&c.store, "store", defaultPath("tasks.jsonl"), "the task store file, read when no serve answers, or a PostgreSQL URL, read at once")
	fs.StringVar(&c.parent, "parent", "", "only the tasks of this parent `session` (ses_…)")
	fs.StringVar(&c.status, "status", "", "only tasks in this status: queued, running, completed, error, cancelled or resumed")
	fs.BoolVar(&c.json, "json", false, "print JSON")
	if err := parse(fs, args, tasksHelp); err != nil {
		return err
	}
	if w := storePasswordWarning(c.store); w != "" {
		fmt.Fprintf(errOut, "%s: %s\n", fs.Name(), w)
	}
	tasks, from, err := loadTasks(ctx, c)
	if err != nil {
		return err
	}
	var kept []asyncagents.Task
	for _, t := range tasks {
		if (c.parent == "" || t.ParentSessionID == c.parent) && (c.status == "" || string(t.Status) == c.status) {
			kept = append(kept, t)
		}
	}
	if c.json {
		if kept == nil {
			kept = []asyncagents.Task{}
		}
		js, err := json.MarshalIndent(kept, "", "  ")
		if err != nil {
			return err
		}
		_, err = out.Write(append(escapeJSON(js), '\n'))
		return err
	}
	printTasks(out, kept, from, time.Now())
	return nil
}

// loadTasks asks the running serve for the tasks, and reads the store when none listens.
// It returns where the tasks came from.
func loadTasks(ctx context.Context, c tasksConfig) ([]asyncagents.Task, string, error) {
	if c.status != "" && !validStatus(c.status) {
		return nil, "", fmt.Errorf("unknown status %q", c.status)
	}
	if isPostgresURL(c.store) {
		tasks, err := pgstore.ReadTasks(ctx, c.store)
		sort.Slice(tasks, func(i, j int) bool { return tasks[i].ID > tasks[j].ID })
		return tasks, storeName(c.store), err
	}
	tasks, from, err := fetchTasks(ctx, c)
	if err == nil {
		return tasks, from, nil
	}
	if !noServe(err) {
		return nil, "", err
	}
	if c.store == "" {
		return nil, "", errors.New("no serve answers and no store: set -store")
	}
	tasks, err = asyncagents.ReadFileStore(ctx, c.store)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "no serve answers, no store at " + c.store, nil
	}
	sort.Slice(tasks, func(i, j int) bool { return tasks[i].ID > tasks[j].ID })
	return tasks, c.store, err
}

// noServe reports whether err, from fetchTasks, says that no serve listens.
func noServe(err error) bool {
	if socketSupported {
		return socketAbsent(err)
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func validStatus(s string) bool {
	switch asyncagents.Status(s) {
	case asyncagents.StatusQueued, asyncagents.StatusRunning, asyncagents.StatusCompleted, asyncagents.StatusError,
		asyncagents.StatusCancelled, asyncagents.StatusResumed:
		return true
	}
	return false
}

// fetchTasks reads GET /api/tasks of the running serve (package dashboard). It returns where
// the tasks came from.
func fetchTasks(ctx context.Context, c tasksConfig) ([]asyncagents.Task, string, error) {
	var body struct {
		Tasks []asyncagents.Task `json:"tasks"`
	}
	from, err := c.ask(ctx, http.MethodGet, "/api/tasks", &body)
	return body.Tasks, from, err
}

// serveAddr is how the commands reach a running serve: on Unix its socket (the peer is
// checked; no token is sent, the serve adds the status page's credential itself); elsewhere
// its TCP address with the token of the token file.
type serveAddr struct {
	listen, socket, tokenFile string
}

// flags registers -socket, or -listen and -token-file where there is no socket.
func (a *serveAddr) flags(fs *flag.FlagSet) {
	if socketSupported {
		fs.StringVar(&a.socket, "socket", defaultPath("serve.sock"), "the Unix `socket` of a running asyncagents serve")
		return
	}
	fs.StringVar(&a.listen, "listen", DefaultListen, "the address of a running asyncagents serve")
	fs.StringVar(&a.tokenFile, "token-file", defaultPath("token"), "the bearer token file of the serve")
}

// ask sends method path to the running serve and decodes its JSON answer into out. It
// returns the serve it asked.
func (a serveAddr) ask(ctx context.Context, method, path string, out any) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	u := url.URL{Scheme: "http", Host: a.listen, Path: path}
	from := "asyncagents serve at " + a.listen
	if socketSupported {
		if a.socket == "" {
			return "", errors.New("no socket: set -socket")
		}
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) { return dialSocket(ctx, a.socket) }
		u.Host, from = "localhost", "asyncagents serve at "+a.socket
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), nil)
	if err != nil {
		return "", err
	}
	if !socketSupported {
		if tok, err := loadToken(a.tokenFile, false); err == nil {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		_ = json.NewDecoder(io.LimitReader(resp.Body, 4096)).Decode(&e)
		return "", fmt.Errorf("%s: %s %s", from, resp.Status, e.Error)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return "", fmt.Errorf("%s: %w", from, err)
	}
	return from, nil
}

// printTasks writes one line per task, grouped by parent session; every text it prints is
// quoted (quote).
func printTasks(out io.Writer, tasks []asyncagents.Task, from string, now time.Time) {
	if len(tasks) == 0 {
		fmt.Fprintf(out, "No tasks (%s).\n", quote(from))
		return
	}
	byParent := map[string][]asyncagents.Task{}
	var parents []string
	for _, t := range tasks {
		if _, ok := byParent[t.ParentSessionID]; !ok {
			parents = append(parents, t.ParentSessionID)
		}
		byParent[t.ParentSessionID] = append(byParent[t.ParentSessionID], t)
	}
	sort.Strings(parents)
	fmt.Fprintf(out, "%d task(s) from %s\n", len(tasks), quote(from))
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	for _, p := range parents {
		fmt.Fprintf(w, "\nparent %s", quote(p))
		if u := asyncagents.TreeUsage(tasks, p); !u.IsZero() {
			fmt.Fprintf(w, " — %s in all", u)
		}
		fmt.Fprintln(w)
		fmt.Fprintln(w, "  TASK\tSTATUS\tTIME\tTOOLS\tUSED\tDESCRIPTION")
		for _, t := range byParent[p] {
			desc := t.Description
			if mk := t.Markers(); mk != "" {
				desc += mk
			}
			if t.Error != "" {
				desc += " — " + firstLine(t.Error, 60)
			}
			if t.Worktree != nil {
				desc += " — " + t.Worktree.Summary()
			}
			used := "-"
			if !t.Usage.IsZero() {
				used = t.Usage.String()
			}
			status := string(t.Status)
			if t.Starting && !t.Status.Terminal() {
				status = "starting"
			}
			fmt.Fprintf(w, "  %s\t%s\t%s\t%d\t%s\t%s\n", quote(t.ID), quote(status), t.Duration(now).Round(time.Second),
				t.Progress.ToolCalls, used, quote(desc))
		}
	}
	_ = w.Flush()
}

// firstLine returns the first line of s, cut to n runes.
func firstLine(s string, n int) string {
	s, _, _ = strings.Cut(s, "\n")
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}
