package leanserver

import (
	"strconv"
	"testing"
)

// appendQuote writes what strconv.AppendQuote writes, on the texts the events carry and on
// the ones it hands to strconv.
func TestAppendQuote(t *testing.T) {
	for _, s := range []string{
		"", "plain", `say "hi" \ bye`, "two\nlines\n", "✓ Agent \"scan\" finished in 3m 4s.\nTask Progress: 1/2",
		"tab\there", "bell\a", "del\x7f", "bad \xff utf-8", "\ufffd", "zero\u200bwidth", "emoji 🙂",
	} {
		if got, want := string(appendQuote([]byte("x"), s)), string(strconv.AppendQuote([]byte("x"), s)); got != want {
			t.Errorf("appendQuote(%q) = %s, want %s", s, got, want)
		}
	}
}
