package truncate

import (
	"strconv"
	"unicode/utf8"
)

// Strategy selects which part of a text survives a cut by [Cut].
type Strategy int

const (
	// HeadOnly keeps the first limit characters, for output whose start matters most:
	// files, listings, search results.
	HeadOnly Strategy = iota
	// HeadTail keeps ⌊0.8·limit⌋ characters from the start and ⌊0.2·limit⌋ from the end,
	// for output whose end matters: shell commands, errors, tracebacks.
	HeadTail
)

// String returns "head-only", "head+tail", or "Strategy(n)" for an unknown value.
func (s Strategy) String() string {
	switch s {
	case HeadOnly:
		return "head-only"
	case HeadTail:
		return "head+tail"
	}
	return "Strategy(" + strconv.Itoa(int(s)) + ")"
}

// Marker returns the text that stands for n removed characters, without the newlines around
// it: "...[truncated n chars]..." with n in decimal.
func Marker(n int) string { return "...[truncated " + strconv.Itoa(n) + " chars]..." }

// MarkerLen returns the length in characters of [Marker](n) without building it. n must
// not be negative.
func MarkerLen(n int) int { return len("...[truncated  chars]...") + digits(n) }

func digits(n int) int {
	d := 1
	for n >= 10 {
		n /= 10
		d++
	}
	return d
}

// Cut cuts text to limit characters (runes) with strategy s and reports whether it did.
// A text of at most limit characters is returned unchanged. A negative limit counts as 0.
// For a text of n > limit characters the result is, never splitting a UTF-8 sequence:
//
//	HeadOnly: first limit characters + "\n...[truncated N chars]..."           N = n − limit
//	HeadTail: head + "\n...[truncated N chars]...\n" + tail, with head ⌊0.8·limit⌋ and tail
//	          ⌊0.2·limit⌋ characters, N = n − head − tail
//
// The newlines and the marker are not counted in limit: a cut result is longer than limit
// characters.
func Cut(text string, limit int, s Strategy) (string, bool) {
	limit = max(limit, 0)
	if len(text) <= limit { // bytes ≥ characters
		return text, false
	}
	n := utf8.RuneCountInString(text)
	if n <= limit {
		return text, false
	}
	if s == HeadTail {
		head := limit * 8 / 10
		tail := limit * 2 / 10
		return keep(text, n, head, tail), true
	}
	head, _ := Prefix(text, limit)
	return head + "\n" + Marker(n-limit), true
}

// Prefix returns the first n characters of text and whether anything was left out. A
// negative n counts as 0.
func Prefix(text string, n int) (string, bool) {
	n = max(n, 0)
	if len(text) <= n {
		return text, false
	}
	h := byteOffset(text, n)
	return text[:h], h < len(text)
}

// Keep returns the first head and the last tail characters of text joined by
// "\n...[truncated N chars]...\n", N being the number of characters left out: the cut of
// [HeadTail] with counts of the caller's choosing. When head+tail is at least the length of
// text in characters, text is returned unchanged. Negative counts count as 0.
func Keep(text string, head, tail int) string {
	head, tail = max(head, 0), max(tail, 0)
	if len(text) <= head+tail {
		return text
	}
	return keep(text, utf8.RuneCountInString(text), head, tail)
}

// keep is Keep for a text of n characters.
func keep(text string, n, head, tail int) string {
	if head+tail >= n {
		return text
	}
	h := byteOffset(text, head)
	t := len(text)
	for range tail {
		_, size := utf8.DecodeLastRuneInString(text[:t])
		t -= size
	}
	return text[:h] + "\n" + Marker(n-head-tail) + "\n" + text[t:]
}

// byteOffset returns the byte offset of the k-th character of s (len(s) when s is shorter).
func byteOffset(s string, k int) int {
	// ASCII prefixes are common: skip them a byte at a time without decoding.
	i := 0
	for i < len(s) && k > 0 && s[i] < utf8.RuneSelf {
		i++
		k--
	}
	for k > 0 && i < len(s) {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
		k--
	}
	return i
}
