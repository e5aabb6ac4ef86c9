package asyncagents

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// Text a child or a provider controls is cut to its bound when a task records it.
func TestBoundsCutChildText(t *testing.T) {
	big := strings.Repeat("é", MaxResultChars+1000)
	if r := boundResult(big); utf8.RuneCountInString(r) > MaxResultChars || utf8.RuneCountInString(r) < MaxResultChars-10 || !strings.Contains(r, "\n...[truncated 10") {
		t.Errorf("result of %d characters kept %d, want %d with the marker: %q", MaxResultChars+1000, utf8.RuneCountInString(r), MaxResultChars, r[len(r)/2-100:len(r)/2+100])
	}
	if r := boundResult(big[:2*MaxResultChars]); r != big[:2*MaxResultChars] {
		t.Errorf("a result of %d characters was cut", MaxResultChars)
	}
	if e := boundError(strings.Repeat("x", 10*MaxErrorChars)); utf8.RuneCountInString(e) > MaxErrorChars {
		t.Errorf("error kept %d characters, want at most %d", utf8.RuneCountInString(e), MaxErrorChars)
	}
	p := boundPermission(PendingPermission{Permission: "read", Patterns: make([]string, 50)})
	p.Patterns[0] = strings.Repeat("/a", MaxPatternChars)
	p.Patterns[1] = strings.Repeat("b", MaxPatternChars)
	p = boundPermission(p)
	if len(p.Patterns) != MaxPermissionPatterns || utf8.RuneCountInString(p.Patterns[0]) != MaxPatternChars ||
		!strings.HasSuffix(p.Patterns[0], "/…") || p.Patterns[1] != strings.Repeat("b", MaxPatternChars) {
		t.Errorf("permission kept %d patterns, the first %d characters ending %q (want %d ending with a cut's …), the second %d",
			len(p.Patterns), utf8.RuneCountInString(p.Patterns[0]), p.Patterns[0][len(p.Patterns[0])-5:], MaxPatternChars, len(p.Patterns[1]))
	}
}

// A caller's description and prompt are refused when empty, too long or (a description) not
// one line.
func TestBoundsRefuseCallerText(t *testing.T) {
	for _, c := range []struct {
		s       string
		limit   int
		oneLine bool
		ok      bool
	}{
		{"scan", 10, true, true},
		{" ", 10, true, false},
		{"0123456789a", 10, true, false},
		{"two\nlines", 20, true, false},
		{"two\nlines", 20, false, true},
	} {
		err := checkText("field", c.s, c.limit, c.oneLine)
		if ok := err == nil; ok != c.ok || !ok && !errors.Is(err, ErrInvalidInput) {
			t.Errorf("checkText(%q, %d, %v) = %v", c.s, c.limit, c.oneLine, err)
		}
	}
}
