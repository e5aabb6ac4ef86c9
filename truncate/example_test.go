package truncate_test

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/asyncagents/asyncagents/truncate"
)

// A long command output cut to 40 characters, keeping its end (the exit status line).
func ExampleCut_headTail() {
	out := strings.Repeat("compiling…\n", 20) + "FAILED: exit 2"
	cut, ok := truncate.Cut(out, 40, truncate.HeadTail)
	fmt.Println(utf8.RuneCountInString(out), "characters before, cut:", ok)
	fmt.Println(cut)
	// Output:
	// 234 characters before, cut: true
	// compiling…
	// compiling…
	// compiling…
	// ...[truncated 194 chars]...
	// : exit 2
}

// A file read cut to 12 characters, keeping its start.
func ExampleCut_headOnly() {
	cut, _ := truncate.Cut("package main\n\nfunc main() {}\n", 12, truncate.HeadOnly)
	fmt.Println(cut)
	// Output:
	// package main
	// ...[truncated 17 chars]...
}
