// Package testmain runs a package's tests, then its cleanups (shared servers), then checks
// that no goroutine leaked — in that order, so goroutines owned by shared test servers are
// gone before goleak looks.
package testmain

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents/internal/poll"
	"go.uber.org/goleak"
)

// Run runs m, calls cleanups in order, verifies no goroutines leaked (goleak) when the tests
// passed, and exits with the result.
func Run(m *testing.M, cleanups ...func()) {
	code := m.Run()
	for _, c := range cleanups {
		c()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// Eventually checks cond until it holds (true) or d has passed (false): the one way the
// tests wait for something another goroutine or process does. It checks every 20 ms at
// first, then less often, up to every 250 ms (see [poll.Until]).
func Eventually(d time.Duration, cond func() bool) bool {
	return poll.Until(d, 20*time.Millisecond, cond)
}
