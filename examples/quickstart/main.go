// Command quickstart is the Go quick start of asyncagents, whole: it connects to a running
// `opencode serve`, creates the parent session, launches one background task for it,
// waits for the task's result, prints it, and closes.
//
// The server's URL comes from OPENCODE_URL (default http://127.0.0.1:4096), its password
// from OPENCODE_SERVER_PASSWORD (none when unset; user OPENCODE_SERVER_USERNAME, default
// "opencode"). The parent session, and so the task, works in -dir (default: the current
// directory). Tasks are kept in the file -store, so a task still running when the program
// stops (Ctrl-C) is picked up by the next run, which lists it first.
//
//	opencode serve --port 4096          # in another terminal, in your project
//	go run ./examples/quickstart -dir ~/src/myproject
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/opencode"
)

func main() {
	dir := flag.String("dir", ".", "the project `directory` the task works in")
	store := flag.String("store", filepath.Join(os.TempDir(), "asyncagents-quickstart.jsonl"), "the task store `file`")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *dir, *store, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

// run is the quick start: README.md and the package documentation show it, trimmed.
func run(ctx context.Context, dir, storePath string, out io.Writer) error {
	serverURL := cmp.Or(os.Getenv("OPENCODE_URL"), "http://127.0.0.1:4096")
	// Basic auth when the server has a password; the user name defaults to "opencode".
	client, err := opencode.NewHTTPClient(serverURL, opencode.WithBasicAuth(
		os.Getenv("OPENCODE_SERVER_USERNAME"), os.Getenv("OPENCODE_SERVER_PASSWORD")))
	if err != nil {
		return err
	}
	defer client.CloseIdleConnections()

	// The parent: the session the task belongs to. The task works in the parent's project
	// directory, dir (-dir). A host whose agent has a session passes that session's id instead.
	dir, err = filepath.Abs(dir)
	if err != nil {
		return err
	}
	parent, err := client.CreateSession(ctx, opencode.CreateSessionRequest{Title: "quickstart", Directory: dir})
	if err != nil {
		return err
	}

	// A FileStore at storePath (-store) keeps the tasks when the program stops: the next
	// Manager on the file picks them up. (The default, a MemoryStore, forgets them.)
	store, err := asyncagents.NewFileStore(storePath)
	if err != nil {
		return err
	}
	defer store.Close() // after m.Close
	m, err := asyncagents.New(client, asyncagents.WithStore(store))
	if err != nil {
		return err
	}
	defer m.Close(context.Background())

	// Tasks of earlier runs, from the store: one still running is followed to its end.
	earlier, err := m.ListAll("")
	if err != nil {
		return err
	}
	for _, t := range earlier {
		fmt.Fprintf(out, "from an earlier run: %s %q %s\n", t.ID, t.Description, t.Status)
	}

	caller := asyncagents.Caller{SessionID: parent.ID, Agent: "build"}
	task, err := m.Launch(ctx, asyncagents.LaunchInput{
		Caller: caller, Description: "find TODOs", Agent: "general",
		Prompt: "List the TODO comments in this project, one per line with its file.",
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "launched %s for parent %s\n", task.ID, parent.ID)

	// Launch returned at once; the task runs in its own child session. Output with Block
	// waits for it to end (at most the timeout: then TimedOut is set).
	res, err := m.Output(ctx, caller, task.ID, asyncagents.OutputOptions{Block: true, Timeout: 5 * time.Minute})
	if err != nil {
		return err
	}
	fmt.Fprintln(out, res.Task.Status, cmp.Or(res.Task.Result, res.Task.Error)) // running: timed out
	return nil
}
