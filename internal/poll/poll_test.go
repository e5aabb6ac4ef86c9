package poll_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents/internal/poll"
	"github.com/asyncagents/asyncagents/internal/testmain"
)

func TestMain(m *testing.M) { testmain.Run(m) }

// Until returns true once cond holds and false after d, and checks less often as it waits:
// not every 20 ms for 2 s (100 checks), but about a dozen times.
func TestUntil(t *testing.T) {
	if !poll.Until(time.Second, time.Millisecond, func() bool { return true }) {
		t.Error("Until of a condition that holds = false")
	}
	var checks atomic.Int32
	start := time.Now()
	if poll.Until(2*time.Second, 20*time.Millisecond, func() bool { checks.Add(1); return false }) {
		t.Error("Until of a condition that never holds = true")
	}
	if took := time.Since(start); took < 2*time.Second {
		t.Errorf("Until gave up after %v, want 2 s", took)
	}
	if n := checks.Load(); n > 20 {
		t.Errorf("Until checked %d times in 2 s, want at most 20", n)
	}
	flip := time.Now().Add(300 * time.Millisecond)
	if !poll.Until(5*time.Second, 20*time.Millisecond, func() bool { return time.Now().After(flip) }) {
		t.Error("Until did not see a condition that held after 300 ms")
	}
}
