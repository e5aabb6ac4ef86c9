// Package hints writes the texts of a parent notification (SPEC §4): the visible part a
// person reads when a background task ends, and the hidden part, sent as a synthetic text
// part, that guides the parent's model (wait for the other tasks, or read the results).
// Its functions are pure and safe for concurrent use.
package hints
