// Package hints writes the two texts of the message a parent session receives when one of
// its background tasks ends or a resume of one finishes: the visible part a person reads
// ([Visible]: outcome, duration, batch progress), and the hidden part, sent as a synthetic
// text part, that guides the parent's model ([Hidden]: wait for the tasks still running,
// or read the results). What a task's child or its provider wrote (an error, a permission
// request's patterns, a tool's name) enters them only quoted, on one line and cut ([Quote],
// [Permission]), as the tools' replies show it too. Its functions are pure and safe for
// concurrent use.
package hints
