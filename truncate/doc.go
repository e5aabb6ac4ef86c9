// Package truncate cuts text to a limit measured in characters — Unicode code points, Go
// runes — never bytes, so a cut never splits a UTF-8 sequence. It implements the cut of
// SPEC F-9: head-only, or head and tail around a marker that says how many characters were
// removed ("...[truncated N chars]..."). Its functions are pure and safe for concurrent use.
//
// A text that is not valid UTF-8 is measured as Go ranges over it (each invalid byte is one
// character) and its invalid bytes are kept as they are; text decoded from JSON is always
// valid.
package truncate
