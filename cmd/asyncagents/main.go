// Command asyncagents lets the agents of OpenCode run background tasks.
//
// Usage:
//
//	asyncagents install [flags]   set OpenCode up, once per user (with -dir: one project for serve)
//	asyncagents uninstall         undo install
//	asyncagents daemon [flags]    the per-user daemon the plugin starts (-stop stops it)
//	asyncagents serve [flags]     run the Manager, the MCP bridge and the status page beside `opencode serve`
//	asyncagents tasks [flags]     list serve's tasks, for a person at a terminal
//	asyncagents login [flags]     print a new login link for serve's status page
//	asyncagents help [command]    show the help of a command
//
// An OpenCode user runs `asyncagents install` once, then `opencode` in any project as always:
// the plugin install writes to OpenCode's global plugin folder gives every OpenCode's agents
// the tools asyncagents_task, asyncagents_output, asyncagents_cancel, asyncagents_list,
// asyncagents_clear and asyncagents_merge, and starts the daemon, one per user, which runs
// the tasks of every OpenCode the user starts (see docs/opencode.md).
//
// The server-side path: run `asyncagents install -dir <project>` in each project (once),
// start `asyncagents serve` beside a fixed `opencode serve`, and open the status page it
// prints; several serves may share tasks on PostgreSQL.
//
// Files (STATE is $XDG_STATE_HOME/asyncagents, else ~/.local/state/asyncagents; on Windows
// and macOS the user's config directory):
//
//   - STATE/tasks.jsonl, the task store (an asyncagents.FileStore, locked by the serve that
//     has it open through STATE/tasks.jsonl.lock; both are made or tightened to mode 0600).
//     `asyncagents tasks` reads it, when no serve answers, without creating or locking it.
//   - STATE/token, the bearer token of the MCP bridge (created on first use, mode 0600). The
//     project's opencode.json names the file rather than holding the token. On Unix it is
//     checked as ssh checks a private key: a symbolic link, a file that group or others may
//     read, or a file in a directory they may write (bar a sticky one, such as /tmp) is
//     refused with the command that fixes it.
//   - STATE/serve.sock (Unix), the socket on which serve answers `asyncagents tasks`: mode
//     0600 in a directory that must be the user's alone (0700); on Linux, macOS and FreeBSD
//     serve and tasks also check that the process at the other end is the same user. tasks
//     sends no token: serve adds the status page's credential to what arrives there. On
//     Windows there is no socket: tasks asks serve over TCP loopback with the token, and
//     the status page takes the bridge's token.
//
// The status page has a credential of its own, made anew by each serve and kept in memory;
// the bridge's token does not open it (Windows aside, as above). A browser signs in with a
// login link: serve prints one when it starts and `asyncagents login` asks it for another;
// each works once, within 5 minutes, and becomes a session cookie that ends with serve.
//
// Text that models and servers wrote (task ids, descriptions, errors) is printed with
// control and bidirectional characters escaped, so that it cannot drive the terminal.
//
// Exit codes: 0 success; 1 failure (the error is printed); 2 a usage error (bad flags or
// arguments). serve exits 0 after SIGINT or SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

// command is one subcommand.
type command struct {
	name, summary string
	// run parses args with fs (already holding the common flags) and does the work.
	run func(ctx context.Context, fs *flag.FlagSet, args []string, out, errOut io.Writer) error
}

var commands = []command{
	{"serve", "run the Manager, the MCP bridge and the status page beside `opencode serve`", runServe},
	{"install", "set OpenCode up for asyncagents, once per user (or, with -dir, one project for serve)", runInstall},
	{"uninstall", "undo install", runUninstall},
	{"daemon", "the per-user daemon the plugin starts; -stop stops it", runDaemon},
	{"tasks", "list the tasks (from a running serve, else from the store)", runTasks},
	{"login", "print a new login link for the running serve's status page", runLogin},
}

// errUsage marks errors that exit with exitUsage; the message has been printed.
var errUsage = errors.New("usage")

// run runs the command line args and returns the exit code.
func run(ctx context.Context, args []string, out, errOut io.Writer) int {
	if len(args) == 0 {
		usage(errOut)
		return exitUsage
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(rest) == 0 {
			usage(out)
			return exitOK
		}
		name, rest = rest[0], []string{"-h"}
	}
	for _, c := range commands {
		if c.name != name {
			continue
		}
		fs := flag.NewFlagSet("asyncagents "+c.name, flag.ContinueOnError)
		fs.SetOutput(errOut)
		err := c.run(ctx, fs, rest, out, errOut)
		switch {
		case err == nil, errors.Is(err, flag.ErrHelp):
			return exitOK
		case errors.Is(err, errUsage):
			return exitUsage
		default:
			fmt.Fprintf(errOut, "asyncagents %s: %s\n", c.name, quoteLines(err.Error()))
			return exitFail
		}
	}
	fmt.Fprintf(errOut, "asyncagents: unknown command %q\n\n", name)
	usage(errOut)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "asyncagents runs background tasks for the agents of an OpenCode server.")
	fmt.Fprintln(w, "\nUsage:\n  asyncagents <command> [flags]\n\nCommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun `asyncagents help <command>` for a command's flags.")
	fmt.Fprintln(w, "Exit codes: 0 success, 1 failure, 2 usage error.")
}

// parse parses args with fs; a bad flag or a stray argument is errUsage (fs has printed
// why), -h is flag.ErrHelp.
func parse(fs *flag.FlagSet, args []string, help string) error {
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: %s [flags]\n\n%s\n\nFlags:\n", fs.Name(), help)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		fs.Usage()
		return errUsage
	}
	return nil
}

// prefixRE is the rule of asyncagents.WithToolPrefix, which the package checks only in
// asyncagents.New and exports no check of: 1 to 40 letters, digits, _ or -.
// TestPrefixChecked keeps the two equal.
var prefixRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,40}$`)

// checkPrefix returns errUsage, after saying why, unless p is a tool prefix that
// asyncagents.WithToolPrefix takes. A prefix names a file (install) and the MCP server.
func checkPrefix(fs *flag.FlagSet, p string) error {
	if prefixRE.MatchString(p) {
		return nil
	}
	fmt.Fprintf(fs.Output(), "%s: bad -prefix %s: want 1 to 40 letters, digits, _ or -\n", fs.Name(), strconv.Quote(p))
	return errUsage
}
