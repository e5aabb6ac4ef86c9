package hints

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/asyncagents/asyncagents/truncate"
)

// maxQuoted bounds, in characters, the text [Quote] keeps.
const maxQuoted = 200

// maxShownPatterns is how many patterns of a permission request [Permission] shows.
const maxShownPatterns = 3

// Quote returns text a task's child or its provider wrote (a tool or permission name, a
// pattern, an error's line) as it stands in a line a model reads: its first 200 characters
// ("…" marks a cut), quoted as a Go string ([strconv.Quote]), so that it stays on one line
// and cannot pass for the words around it: a quote, a line break or a control character in
// it is escaped.
func Quote(s string) string {
	if p, cut := truncate.Prefix(s, maxQuoted); cut {
		s = p + "…"
	}
	return strconv.Quote(s)
}

// Permission returns a pending permission request as one line: the permission (or tool)
// name and up to 3 of its patterns, each by [Quote], then how many more there are:
//
//	"bash" for "git push", "git status", "ls" and 2 more
//
// With no patterns it is the quoted name alone.
func Permission(name string, patterns []string) string {
	var b strings.Builder
	b.WriteString(Quote(name))
	for i, p := range patterns {
		switch {
		case i == maxShownPatterns:
			fmt.Fprintf(&b, " and %d more", len(patterns)-i)
			return b.String()
		case i == 0:
			b.WriteString(" for ")
		default:
			b.WriteString(", ")
		}
		b.WriteString(Quote(p))
	}
	return b.String()
}

// firstLine returns the first line of s with surrounding spaces trimmed, and " …" after it
// when other lines follow.
func firstLine(s string) string {
	line, rest, more := strings.Cut(strings.TrimSpace(s), "\n")
	line = strings.TrimSpace(line)
	if more && strings.TrimSpace(rest) != "" {
		line += " …"
	}
	return line
}
