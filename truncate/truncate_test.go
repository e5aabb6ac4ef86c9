package truncate_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/truncate"
)

func TestMain(m *testing.M) { testmain.Run(m) }

// Limits at n = L and n = L+1, both strategies, multi-byte text at the cut.
//
// F-9: head-only keeps the first L characters and appends the marker; head+tail keeps
// ⌊0.8·L⌋ head and ⌊0.2·L⌋ tail characters around it; a text of n ≤ L characters is
// unchanged.
func TestCutAtLimitEdges(t *testing.T) {
	cases := []struct {
		name     string
		text     string
		limit    int
		strategy truncate.Strategy
		want     string
		cut      bool
	}{
		{"n=L head", strings.Repeat("a", 10), 10, truncate.HeadOnly, strings.Repeat("a", 10), false},
		{"n=L+1 head", strings.Repeat("a", 11), 10, truncate.HeadOnly, strings.Repeat("a", 10) + "\n...[truncated 1 chars]...", true},
		{"n=L headtail", strings.Repeat("a", 10), 10, truncate.HeadTail, strings.Repeat("a", 10), false},
		{"n=L+1 headtail", "0123456789X", 10, truncate.HeadTail, "01234567\n...[truncated 1 chars]...\n9X", true},
		{"headtail floors", strings.Repeat("x", 20), 7, truncate.HeadTail, "xxxxx\n...[truncated 14 chars]...\nx", true},
		{"multibyte head", strings.Repeat("한", 5), 3, truncate.HeadOnly, "한한한\n...[truncated 2 chars]...", true},
		{"multibyte n=L", "✓✓✓", 3, truncate.HeadOnly, "✓✓✓", false},
		{"emoji headtail", strings.Repeat("😀", 12) + "末", 10, truncate.HeadTail, strings.Repeat("😀", 8) + "\n...[truncated 3 chars]...\n😀末", true},
		{"limit 0", "abc", 0, truncate.HeadOnly, "\n...[truncated 3 chars]...", true},
		{"negative limit", "abc", -5, truncate.HeadTail, "\n...[truncated 3 chars]...\n", true},
		{"empty", "", 0, truncate.HeadOnly, "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, cut := truncate.Cut(tc.text, tc.limit, tc.strategy)
			if got != tc.want || cut != tc.cut {
				t.Errorf("Cut(%q, %d, %v) = %q, %v; want %q, %v", tc.text, tc.limit, tc.strategy, got, cut, tc.want, tc.cut)
			}
			if !utf8.ValidString(got) {
				t.Errorf("invalid UTF-8: %q", got)
			}
		})
	}
}

func TestKeep(t *testing.T) {
	if got := truncate.Keep("abcdefghij", 3, 2); got != "abc\n...[truncated 5 chars]...\nij" {
		t.Errorf("Keep = %q", got)
	}
	if got := truncate.Keep("abc", 2, 1); got != "abc" {
		t.Errorf("Keep(fits) = %q", got)
	}
	if got := truncate.Keep("ééééé", 1, 1); got != "é\n...[truncated 3 chars]...\né" {
		t.Errorf("Keep(multibyte) = %q", got)
	}
}

func TestMarkerLen(t *testing.T) {
	for _, n := range []int{0, 9, 10, 99, 100, 123456} {
		if got, want := truncate.MarkerLen(n), utf8.RuneCountInString(truncate.Marker(n)); got != want {
			t.Errorf("MarkerLen(%d) = %d, want %d", n, got, want)
		}
	}
}

func FuzzCut(f *testing.F) {
	f.Add("héllo wörld ✓ 😀", 5)
	f.Add(strings.Repeat("ab", 100), 17)
	f.Fuzz(func(t *testing.T, s string, limit int) {
		if limit > 1<<20 {
			limit = 1 << 20
		}
		for _, st := range []truncate.Strategy{truncate.HeadOnly, truncate.HeadTail} {
			got, cut := truncate.Cut(s, limit, st)
			n := utf8.RuneCountInString(s)
			if cut != (n > max(limit, 0)) {
				t.Fatalf("cut=%v for n=%d limit=%d", cut, n, limit)
			}
			if utf8.ValidString(s) && !utf8.ValidString(got) {
				t.Fatalf("invalid UTF-8 from valid input: %q", got)
			}
			if !cut && got != s {
				t.Fatalf("uncut text changed")
			}
		}
	})
}
