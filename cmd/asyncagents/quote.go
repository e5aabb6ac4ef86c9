package main

import (
	"bytes"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Text from a model or a server (task ids, descriptions, errors, paths) reaches a terminal
// only through quote: a raw ESC starts a sequence that can retitle the terminal or move the
// cursor over earlier lines, a raw bidi control reorders what follows it, and a raw newline
// or tab fakes lines and columns.

// unsafeRune reports whether r must not reach a terminal raw: the C0 controls, DEL, the C1
// controls, the bidirectional controls (U+061C, U+200E, U+200F, U+202A–U+202E,
// U+2066–U+2069) and the line and paragraph separators (U+2028, U+2029).
func unsafeRune(r rune) bool {
	switch {
	case r < 0x20, r >= 0x7f && r <= 0x9f:
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069,
		r == 0x2028, r == 0x2029:
		return true
	}
	return false
}

// quote returns s with every unsafe rune (see unsafeRune) and every byte that is not UTF-8
// written as an escape — \n, \r, \t, \xNN below U+0080 and for stray bytes, \uNNNN above —
// and everything else, ordinary Unicode included, as it is.
func quote(s string) string {
	i := strings.IndexFunc(s, func(r rune) bool { return r == utf8.RuneError || unsafeRune(r) })
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	b.WriteString(s[:i])
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case !unsafeRune(r):
			b.WriteString(s[i : i+n])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		i += n
	}
	return b.String()
}

// quoteLines quotes each line of s and keeps the newlines between them: for messages that
// are several lines by design (errors.Join).
func quoteLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = quote(l)
	}
	return strings.Join(lines, "\n")
}

// escapeJSON returns the JSON text js (from encoding/json) with the unsafe runes that
// encoding/json writes raw — DEL, the C1 controls and the bidirectional controls — written as
// \u escapes. encoding/json escapes the C0 controls and U+2028, U+2029 in strings itself;
// outside strings, \n and spaces are the indentation and stay. The runes escaped here only
// occur inside strings, where an escape stands for the same character: the value is
// unchanged.
func escapeJSON(js []byte) []byte {
	raw := func(r rune) bool { return r >= 0x7f && unsafeRune(r) }
	if !bytes.ContainsFunc(js, raw) {
		return js
	}
	var b bytes.Buffer
	b.Grow(len(js) + 16)
	for len(js) > 0 {
		r, n := utf8.DecodeRune(js)
		if raw(r) {
			fmt.Fprintf(&b, `\u%04x`, r)
		} else {
			b.Write(js[:n])
		}
		js = js[n:]
	}
	return b.Bytes()
}
