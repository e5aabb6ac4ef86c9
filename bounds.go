package asyncagents

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/asyncagents/asyncagents/truncate"
)

// Bounds, in characters (Unicode code points), of what a task keeps and accepts. Text a
// child or a provider controls (a result, an error, a permission request's patterns) is cut
// to them when the task records it, so no record, save or text shown to a model carries more;
// what a caller gives (a description, a prompt) longer than them is refused with
// ErrInvalidInput.
const (
	// MaxDescriptionChars bounds LaunchInput.Description: a label of a few words, on one line.
	MaxDescriptionChars = 200
	// MaxPromptChars bounds a task's prompt and a follow-up's.
	MaxPromptChars = 100_000
	// MaxResultChars bounds Task.Result: a longer reply keeps its first 80% and last 20%
	// around a marker saying how much was cut; the whole reply stays in the task's session
	// (Output with FullSession reads it).
	MaxResultChars = 100_000
	// MaxErrorChars bounds Task.Error.
	MaxErrorChars = 4_000
	// MaxPermissionPatterns bounds the patterns a task shows of a pending permission
	// request, and MaxPatternChars each of them.
	MaxPermissionPatterns = 10
	MaxPatternChars       = 200
)

// maxAgentName bounds an agent's name as a caller gives it.
const maxAgentName = 100

// boundResult cuts a run's reply to MaxResultChars.
func boundResult(s string) string { return cutAround(s, MaxResultChars) }

// boundError cuts an error message to MaxErrorChars.
func boundError(s string) string { return cutAround(s, MaxErrorChars) }

// cutAround cuts s to at most limit characters, the marker of the cut and its newlines
// included: its head and tail around the marker (truncate.HeadTail).
func cutAround(s string, limit int) string {
	n := utf8.RuneCountInString(s)
	if n <= limit {
		return s
	}
	out, _ := truncate.Cut(s, limit-2-truncate.MarkerLen(n), truncate.HeadTail) // no more is cut than n
	return out
}

// boundLabel cuts s to at most MaxPatternChars characters, its last one "…" when it was
// cut (a later quote, hints.Quote, keeps it whole and so would not mark the cut).
func boundLabel(s string) string {
	if _, cut := truncate.Prefix(s, MaxPatternChars); !cut {
		return s
	}
	p, _ := truncate.Prefix(s, MaxPatternChars-1)
	return p + "…"
}

// boundPermission cuts a permission request as a task keeps it: at most
// MaxPermissionPatterns patterns of at most MaxPatternChars characters, and its permission
// name to MaxPatternChars.
func boundPermission(p PendingPermission) PendingPermission {
	p.Permission = boundLabel(p.Permission)
	if len(p.Patterns) > MaxPermissionPatterns {
		p.Patterns = p.Patterns[:MaxPermissionPatterns:MaxPermissionPatterns]
	}
	out := make([]string, len(p.Patterns))
	for i, pat := range p.Patterns {
		out[i] = boundLabel(pat)
	}
	p.Patterns = out
	return p
}

// checkText returns an error matching ErrInvalidInput when s, the field name of a caller's
// input, is empty, longer than limit characters, or (with oneLine) holds a line break.
func checkText(name, s string, limit int, oneLine bool) error {
	switch n := utf8.RuneCountInString(s); {
	case strings.TrimSpace(s) == "":
		return fmt.Errorf("%w: %s is required", ErrInvalidInput, name)
	case n > limit:
		return fmt.Errorf("%w: %s has %d characters, at most %d", ErrInvalidInput, name, n, limit)
	case oneLine && strings.ContainsAny(s, "\r\n"):
		return fmt.Errorf("%w: %s must be one line", ErrInvalidInput, name)
	}
	return nil
}
