package poll

import (
	"sync/atomic"
	"testing"
	"time"
)

// Until returns true as soon as cond holds, false after d, and checks less often as it waits:
// no more than about a dozen times in its first second, and then four times a second.
func TestUntil(t *testing.T) {
	if !Until(time.Second, time.Millisecond, func() bool { return true }) {
		t.Error("Until of a condition that holds = false")
	}
	var checks atomic.Int32
	start := time.Now()
	if Until(2*time.Second, 20*time.Millisecond, func() bool { checks.Add(1); return false }) {
		t.Error("Until of a condition that never holds = true")
	}
	if took := time.Since(start); took < 2*time.Second || took > 3*time.Second {
		t.Errorf("Until took %v, want about 2 s", took)
	}
	if n := checks.Load(); n < 8 || n > 20 {
		t.Errorf("Until checked %d times in 2 s, want between 8 and 20", n)
	}
	flip := time.Now().Add(300 * time.Millisecond)
	if !Until(5*time.Second, 20*time.Millisecond, func() bool { return time.Now().After(flip) }) || time.Since(flip) > MaxInterval+100*time.Millisecond {
		t.Errorf("Until saw a condition that held after 300 ms %v late", time.Since(flip))
	}
}
