// Command forkcontext prints what a forked background task would inherit from a saved
// session: it runs the fork-context pipeline of package fork — the one a Manager runs for
// a task launched with Fork — on the session's messages.
//
//	go run ./examples/forkcontext [-budget N] [-tail-aware] [-json] FILE
//
// FILE (or - for standard input) is a JSON array of messages as GET /session/{id}/message
// returns them, or an `opencode export` document ({"info": …, "messages": […]}).
//
// The pipeline keeps what follows the session's latest compaction summary, cuts older tool
// results (by default the newest 5 stay whole, the next 10 are cut to 3,000 characters and
// the rest to 500) and drops the oldest messages until the context fits the budget.
// -budget sets the budget in characters (default 200,000, at least 1,000); -tail-aware
// keeps the messages a compaction left in place, in the order OpenCode shows them to the
// model ([fork.WithTailAware]).
//
// The output is the preamble (the note that tells the child what was cut), a blank line
// and the context. With -json it is one object {"preamble", "context", "stats"}, where
// stats is a [fork.Stats] with its JSON keys: original_messages, final_messages,
// compaction_detected, compaction_index, tier1, tier2, tier3, truncated_results,
// head_tail_applied, removed_messages, total_chars and budget_clipped. Unreadable or
// invalid input exits with status 2 and a one-line error.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/asyncagents/asyncagents/fork"
	"github.com/asyncagents/asyncagents/opencode"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("forkcontext", flag.ContinueOnError)
	fs.SetOutput(stderr)
	budget := fs.Int("budget", fork.DefaultBudget, "character budget of the context (at least 1000)")
	tailAware := fs.Bool("tail-aware", false, "keep the messages a compaction left in place, as OpenCode shows them to the model")
	asJSON := fs.Bool("json", false, `print {"preamble", "context", "stats"} as JSON`)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: forkcontext [-budget N] [-tail-aware] [-json] FILE|-")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintln(stderr, "forkcontext:", oneLine(err))
		return 2
	}
	p, err := fork.New(fork.WithBudget(*budget), fork.WithTailAware(*tailAware))
	if err != nil {
		return fail(err)
	}
	data, err := read(fs.Arg(0), stdin)
	if err != nil {
		return fail(err)
	}
	msgs, err := decode(data)
	if err != nil {
		return fail(err)
	}
	r := p.Run(msgs)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			Preamble string     `json:"preamble"`
			Context  string     `json:"context"`
			Stats    fork.Stats `json:"stats"`
		}{r.Preamble, r.Context, r.Stats}); err != nil {
			return fail(err)
		}
		return 0
	}
	fmt.Fprintf(stdout, "%s\n\n%s\n", r.Preamble, r.Context)
	return 0
}

func read(name string, stdin io.Reader) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(stdin)
	}
	return os.ReadFile(name)
}

// decode accepts a message array or an export document.
func decode(data []byte) ([]opencode.Message, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, errors.New("empty input: want a JSON array of messages or an opencode export document")
	}
	var msgs []opencode.Message
	switch data[0] {
	case '[':
		if err := json.Unmarshal(data, &msgs); err != nil {
			return nil, fmt.Errorf("invalid message array: %w", err)
		}
	case '{':
		var doc struct {
			Messages *[]opencode.Message `json:"messages"`
		}
		if err := json.Unmarshal(data, &doc); err != nil {
			return nil, fmt.Errorf("invalid export document: %w", err)
		}
		if doc.Messages == nil {
			return nil, errors.New(`invalid export document: no "messages" array`)
		}
		msgs = *doc.Messages
	default:
		return nil, errors.New("not JSON: want a JSON array of messages or an opencode export document")
	}
	return msgs, nil
}

func oneLine(err error) string {
	return string(bytes.ReplaceAll([]byte(err.Error()), []byte("\n"), []byte(" ")))
}
