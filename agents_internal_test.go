package asyncagents

import (
	"errors"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents/internal/fakeclock"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// An agent is checked against the directory's visible agents, cached for agentsTTL; an
// unknown agent is refused with the known ones named.
func TestAgentCache(t *testing.T) {
	f := opencodetest.NewFakeClient()
	defer f.Close()
	clock := fakeclock.New(time.Unix(1000, 0))
	var ac agentCache
	ctx := t.Context()
	if a, err := ac.check(ctx, f, clock, "/p", "general"); err != nil || a.Name != "general" {
		t.Fatal(a, err)
	}
	_, err := ac.check(ctx, f, clock, "/p", "nope")
	if !errors.Is(err, ErrUnknownAgent) {
		t.Fatalf("unknown agent: %v", err)
	}
	if len(ac.lists) != 1 || len(ac.lists["/p"].byName) == 0 {
		t.Errorf("cached lists: %+v", ac.lists)
	}
}
