package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/asyncagents/asyncagents"
)

const tasksHelp = `Lists the tasks: what runs, for which parent session, since when, and how it ended.
It asks the serve listening on -listen, and reads -store when none answers (a running
serve holds the store's lock). -json prints the tasks as a JSON array (asyncagents.Task).`

type tasksConfig struct {
	listen, store, tokenFile, parent, status string
	json                                     bool
}

func runTasks(ctx context.Context, fs *flag.FlagSet, args []string, out, _ io.Writer) error {
	var c tasksConfig
	fs.StringVar(&c.listen, "listen", DefaultListen, "the address of a running asyncagents serve")
	fs.StringVar(&c.store, "store", defaultPath("tasks.jsonl"), "the task store file, read when no serve answers")
	fs.StringVar(&c.tokenFile, "token-file", defaultPath("token"), "the bearer token file of the serve")
	fs.StringVar(&c.parent, "parent", "", "only the tasks of this parent `session` (ses_…)")
	fs.StringVar(&c.status, "status", "", "only tasks in this status: queued, running, completed, error, cancelled or resumed")
	fs.BoolVar(&c.json, "json", false, "print JSON")
	if err := parse(fs, args, tasksHelp); err != nil {
		return err
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
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if kept == nil {
			kept = []asyncagents.Task{}
		}
		return enc.Encode(kept)
	}
	printTasks(out, kept, from, time.Now())
	return nil
}

// loadTasks asks the serve at c.listen for the tasks, and reads the store when nothing
// listens there. It returns where the tasks came from.
func loadTasks(ctx context.Context, c tasksConfig) ([]asyncagents.Task, string, error) {
	if c.status != "" && !validStatus(c.status) {
		return nil, "", fmt.Errorf("unknown status %q", c.status)
	}
	tasks, err := fetchTasks(ctx, c)
	if err == nil {
		return tasks, "asyncagents serve at " + c.listen, nil
	}
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "dial" {
		return nil, "", err
	}
	if c.store == "" {
		return nil, "", errors.New("no serve answers and no store: set -store")
	}
	store, err := asyncagents.NewFileStore(c.store)
	if err != nil {
		return nil, "", err
	}
	defer store.Close()
	tasks, err = store.Load(ctx)
	sort.Slice(tasks, func(i, j int) bool { return tasks[i].ID > tasks[j].ID })
	return tasks, c.store, err
}

func validStatus(s string) bool {
	switch asyncagents.Status(s) {
	case asyncagents.StatusQueued, asyncagents.StatusRunning, asyncagents.StatusCompleted, asyncagents.StatusError,
		asyncagents.StatusCancelled, asyncagents.StatusResumed:
		return true
	}
	return false
}

// fetchTasks reads GET /api/tasks of the serve at c.listen (package dashboard).
func fetchTasks(ctx context.Context, c tasksConfig) ([]asyncagents.Task, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	u := url.URL{Scheme: "http", Host: c.listen, Path: "/api/tasks"}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	if tok, err := loadToken(c.tokenFile, false); err == nil {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		_ = json.NewDecoder(io.LimitReader(resp.Body, 4096)).Decode(&e)
		return nil, fmt.Errorf("asyncagents serve at %s: %s %s", c.listen, resp.Status, e.Error)
	}
	var body struct {
		Tasks []asyncagents.Task `json:"tasks"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("asyncagents serve at %s: %w", c.listen, err)
	}
	return body.Tasks, nil
}

// printTasks writes one line per task, grouped by parent session.
func printTasks(out io.Writer, tasks []asyncagents.Task, from string, now time.Time) {
	if len(tasks) == 0 {
		fmt.Fprintf(out, "No tasks (%s).\n", from)
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
	fmt.Fprintf(out, "%d task(s) from %s\n", len(tasks), from)
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	for _, p := range parents {
		fmt.Fprintf(w, "\nparent %s\n", p)
		fmt.Fprintln(w, "  TASK\tSTATUS\tTIME\tTOOLS\tDESCRIPTION")
		for _, t := range byParent[p] {
			desc := t.Description
			if mk := t.Markers(); mk != "" {
				desc += mk
			}
			if t.Error != "" {
				desc += " — " + firstLine(t.Error, 60)
			}
			fmt.Fprintf(w, "  %s\t%s\t%s\t%d\t%s\n", t.ID, t.Status, t.Duration(now).Round(time.Second), t.Progress.ToolCalls, desc)
		}
	}
	_ = w.Flush()
}

func firstLine(s string, n int) string {
	s, _, _ = strings.Cut(s, "\n")
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}
