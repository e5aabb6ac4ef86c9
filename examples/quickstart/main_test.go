package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

func TestMain(m *testing.M) { testmain.Run(m) }

// The quick start on a real server that has a password, run twice on one task file: each run
// creates its parent session, launches a task and prints the task's result, and the second
// run's Manager finds the first run's task in the file.
func TestQuickstart(t *testing.T) {
	const password = "quickstart-password"
	srv := opencodetest.Start(t, opencodetest.WithPassword(password))
	t.Setenv("OPENCODE_URL", srv.URL)
	t.Setenv("OPENCODE_SERVER_USERNAME", "")
	t.Setenv("OPENCODE_SERVER_PASSWORD", password)
	store := filepath.Join(t.TempDir(), "tasks.jsonl")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The scripted model answers a prompt without directives with "reply to <prompt>".
	const result = "completed reply to List the TODO comments in this project"
	var first bytes.Buffer
	if err := run(ctx, srv.Directory, store, &first); err != nil {
		t.Fatalf("first run: %v\n%s", err, first.String())
	}
	launched := regexp.MustCompile(`launched (tsk_\w+) for parent ses_\w+`).FindStringSubmatch(first.String())
	if launched == nil || !strings.Contains(first.String(), result) || strings.Contains(first.String(), "earlier run") {
		t.Fatalf("first run printed:\n%s\nwant a launch, no earlier task, and %q", first.String(), result)
	}

	var second bytes.Buffer
	if err := run(ctx, srv.Directory, store, &second); err != nil {
		t.Fatalf("second run: %v\n%s", err, second.String())
	}
	earlier := `from an earlier run: ` + launched[1] + ` "find TODOs" completed`
	if !strings.Contains(second.String(), earlier) || !strings.Contains(second.String(), result) {
		t.Fatalf("second run printed:\n%s\nwant %q and %q", second.String(), earlier, result)
	}
}

// README.md's Go quick start and the package documentation's example are this program with
// its error checks left out: every line of theirs is a line of run, in the same order, so
// neither can drift from the code this package's test runs.
func TestReadmeAndPackageDocShowThisProgram(t *testing.T) {
	program := lines(t, "main.go", func(l string) (string, bool) { return l, true })
	readme := lines(t, "../../README.md", fencedGo())
	doc := lines(t, "../../doc.go", func(l string) (string, bool) { return strings.CutPrefix(l, "//\t") })
	for name, excerpt := range map[string][]string{"README.md": readme, "doc.go": doc} {
		if len(excerpt) < 10 {
			t.Errorf("%s: quick start has %d lines, want the program's", name, len(excerpt))
			continue
		}
		rest := program
		for _, l := range excerpt {
			i := slices.Index(rest, l)
			if i < 0 {
				t.Errorf("%s: quick start line %q is not a line of main.go (after the line before it)", name, l)
				break
			}
			rest = rest[i+1:]
		}
	}
}

// lines returns the trimmed, non-blank lines of file that keep selects, up to the end of
// the first run of selected lines.
func lines(t *testing.T, file string, keep func(string) (string, bool)) []string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	started := false
	for _, l := range strings.Split(string(data), "\n") {
		kept, ok := keep(l)
		if !ok {
			if started && strings.TrimSpace(l) != "//" && strings.TrimSpace(l) != "" {
				break
			}
			continue
		}
		started = true
		if kept = strings.TrimSpace(kept); kept != "" {
			out = append(out, kept)
		}
	}
	return out
}

// fencedGo selects the lines of a Markdown file's first ```go block.
func fencedGo() func(string) (string, bool) {
	in, done := false, false
	return func(l string) (string, bool) {
		switch {
		case done:
			return "", false
		case l == "```go":
			in = true
			return "", false
		case in && l == "```":
			in, done = false, true
			return "", false
		}
		return l, in
	}
}
