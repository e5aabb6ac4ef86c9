// Package truncate cuts text to a limit measured in characters — Unicode code points, Go
// runes — never bytes, so a cut never splits a UTF-8 sequence. A cut keeps the head of the
// text ([HeadOnly]), or its head and tail ([HeadTail]), and puts in place of what it
// removed a marker that says how many characters that was: "...[truncated N chars]..."
// (see [Marker]). Its functions are pure and safe for concurrent use.
//
// A text that is not valid UTF-8 is measured as Go ranges over it (each invalid byte is one
// character) and its invalid bytes are kept as they are; text decoded from JSON is always
// valid.
package truncate
