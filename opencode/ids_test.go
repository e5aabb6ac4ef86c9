package opencode_test

import (
	"regexp"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents/opencode"
)

// Ids minted in the same millisecond, each after the previous one, sort after it; so do
// ids minted with an "after" from a clock ahead of ours, and the form is OpenCode's.
func TestNewMessageIDSortsAfter(t *testing.T) {
	form := regexp.MustCompile(`^msg_[0-9a-f]{12}[0-9A-Za-z]{14}$`)
	now := time.UnixMilli(1_763_800_000_000)
	prev := ""
	for i := range 5000 {
		id := opencode.NewMessageID(now, prev)
		if !form.MatchString(id) {
			t.Fatalf("id %d = %q: not OpenCode's form", i, id)
		}
		if prev != "" && id <= prev {
			t.Fatalf("id %d = %q does not sort after %q", i, id, prev)
		}
		prev = id
	}
	ahead := opencode.NewMessageID(now.Add(time.Hour), "")
	if id := opencode.NewMessageID(now, ahead); id <= ahead {
		t.Errorf("id %q does not sort after %q from a clock an hour ahead", id, ahead)
	}
	if a, b := opencode.NewMessageID(now, ""), opencode.NewMessageID(now.Add(time.Millisecond), ""); a[:16] >= b[:16] {
		t.Errorf("an id a millisecond later, %q, does not sort after %q", b, a)
	}
}
