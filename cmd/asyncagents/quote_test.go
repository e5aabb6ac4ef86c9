package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/storetest"
)

func TestQuote(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain text", "plain text"},
		{"Grüße, 日本語, emoji 🎉, zero-width joiner 👩\u200d💻", "Grüße, 日本語, emoji 🎉, zero-width joiner 👩\u200d💻"},
		{"\x1b]0;pwned\x07title", `\x1b]0;pwned\x07title`},
		{"\x1b[2J\x1b[Hclear", `\x1b[2J\x1b[Hclear`},
		{"one\ntwo\r\tthree", `one\ntwo\r\tthree`},
		{"del\x7f", `del\x7f`},
		{"c1 csi \u009b31m and nel \u0085", `c1 csi \u009b31m and nel \u0085`},
		{"stray byte \x9b31m", `stray byte \x9b31m`},
		{"bidi \u202eevil\u202c \u2066x\u2069 \u200e\u200f \u061c", `bidi \u202eevil\u202c \u2066x\u2069 \u200e\u200f \u061c`},
		{"separators \u2028 \u2029", `separators \u2028 \u2029`},
	} {
		if got := quote(tc.in); got != tc.want {
			t.Errorf("quote(%q) = %q; want %q", tc.in, got, tc.want)
		}
	}
	if got := quoteLines("first \x1b[1m\nsecond"); got != "first \\x1b[1m\nsecond" {
		t.Errorf("quoteLines = %q", got)
	}
}

// noServeFlags returns the flags with which `tasks` finds no serve: a socket path where none
// is, or (without sockets) a closed port.
func noServeFlags(dir string) []string {
	if socketSupported {
		return []string{"-socket", filepath.Join(dir, "none.sock")}
	}
	return []string{"-listen", "127.0.0.1:1", "-token-file", filepath.Join(dir, "token")}
}

// hostile is text a model could put in a task to take over a terminal: OSC and CSI
// sequences (retitle, clear, move up), C1 controls, a stray byte, bidi overrides, and
// newlines and separators that fake lines.
const hostile = "\x1b]0;owned\x07\x1b[2J\x1b[1A\rfake line\n\u2028ses_fake  completed\u202egnp.exe\u2066\u0085\u009b\x9b\x7f"

// rawUnsafe returns the unsafe runes and stray bytes in s, other than the newlines and
// spaces that the output's own layout uses.
func rawUnsafe(s string, layout string) []string {
	var bad []string
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || unsafeRune(r) && !strings.ContainsRune(layout, r) {
			bad = append(bad, fmt.Sprintf("%q", s[max(0, i-10):i+n]))
		}
		i += n
	}
	return bad
}

// hostileTasks returns tasks whose every printed field holds hostile text.
func hostileTasks() []asyncagents.Task {
	a := storetest.FullTask("ses_a"+hostile, 1)
	a.ParentSessionID = "ses_p" + hostile
	a.Description = "describe " + hostile
	a.Error = "failed: " + hostile
	a.Status = asyncagents.StatusError
	b := storetest.FullTask("ses_b", 2)
	b.Description = "ordinary Grüße 日本語"
	b.Status = asyncagents.StatusCompleted
	return []asyncagents.Task{a, b}
}

// Issue 15: `asyncagents tasks` quotes control and bidi characters in every field it prints
// (ids, parents, descriptions, errors, where from), keeps ordinary Unicode, and its -json
// output escapes them too and still decodes to the same tasks.
func TestTasksQuotesHostileText(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "tasks\x1b]0;owned\x07.jsonl")
	tasks := hostileTasks()
	writeStore(t, store, tasks)
	args := append([]string{"tasks", "-store", store}, noServeFlags(dir)...)

	code, out, errOut := runCmd(t, args...)
	if code != exitOK {
		t.Fatalf("tasks: exit %d\n%s%s", code, out, errOut)
	}
	if bad := rawUnsafe(out, "\n"); len(bad) > 0 {
		t.Errorf("raw control or bidi characters in the output: %q\n%s", bad, out)
	}
	for _, want := range []string{`ses_a\x1b]0;owned\x07`, `ses_p\x1b]0;owned`, `describe \x1b]0;owned`, `failed: \x1b]0;owned`,
		`\u202egnp.exe`, `tasks\x1b]0;owned`, "ordinary Grüße 日本語"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "\n"); n != 9 { // the heading, and per parent: a blank line, "parent", the columns, one task
		t.Errorf("output of %d lines; want 9:\n%s", n, out)
	}

	code, out, errOut = runCmd(t, append(args, "-json")...)
	if code != exitOK {
		t.Fatalf("tasks -json: exit %d\n%s%s", code, out, errOut)
	}
	if bad := rawUnsafe(out, "\n"); len(bad) > 0 {
		t.Errorf("raw control or bidi characters in the JSON: %q", bad)
	}
	var got []asyncagents.Task
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("tasks -json is not JSON: %v", err)
	}
	want, err := asyncagents.ReadFileStore(t.Context(), store) // as stored: a stray byte is U+FFFD
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, cmpopts.SortSlices(func(a, b asyncagents.Task) bool { return a.ID < b.ID })); diff != "" {
		t.Errorf("tasks -json decodes to other tasks (-stored +got):\n%s", diff)
	}
}

// The errors the command prints are quoted too.
func TestErrorsAreQuoted(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "tasks\x1b]0;owned\x07\u202e.jsonl")
	if err := os.WriteFile(store, []byte("not a header\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCmd(t, append([]string{"tasks", "-store", store}, noServeFlags(dir)...)...)
	if code != exitFail || !strings.Contains(errOut, `tasks\x1b]0;owned\x07\u202e.jsonl`) {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	if bad := rawUnsafe(errOut, "\n"); len(bad) > 0 {
		t.Errorf("raw control or bidi characters in the error: %q", bad)
	}
}

// writeStore saves tasks in a new FileStore at path and closes it.
func writeStore(t *testing.T, path string, tasks []asyncagents.Task) {
	t.Helper()
	s, err := asyncagents.NewFileStore(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		if err := s.Save(t.Context(), task); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}
