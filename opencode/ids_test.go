package opencode_test

import (
	"fmt"
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
	// The first id OpenCode makes in the same millisecond (counter 1) sorts after ours, so a
	// reply to a prompt sent with ours does too.
	server := fmt.Sprintf("msg_%012x", (uint64(now.UnixMilli())<<12|1)&(1<<48-1)) + "00000000000000"
	for range 100 {
		if id := opencode.NewMessageID(now, ""); id >= server {
			t.Fatalf("id %q does not sort before %q, OpenCode's first id of the same millisecond", id, server)
		}
	}
}
