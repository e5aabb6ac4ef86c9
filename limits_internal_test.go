package asyncagents

import "testing"

// T-21 (model beats provider beats default): a model limit wins over a provider limit, which wins over the default; a task
// without a model counts against the default.
func TestLimitKeyPrecedence(t *testing.T) {
	l := Limits{Default: 1, Providers: map[string]int{"p": 2}, Models: map[string]int{"p/m": 3}}
	for model, want := range map[string]struct {
		key   string
		limit int
	}{
		"p/m":   {"model p/m", 3},
		"p/n":   {"provider p", 2},
		"q/m":   {"default", 1},
		"":      {"default", 1},
		"p/m/x": {"provider p", 2},
	} {
		if key, limit := l.keyOf(model); key != want.key || limit != want.limit {
			t.Errorf("keyOf(%q) = %q %d, want %q %d", model, key, limit, want.key, want.limit)
		}
	}
}
