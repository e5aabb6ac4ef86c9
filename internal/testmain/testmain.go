// Package testmain runs a package's tests, then its cleanups (shared servers), then checks
// that no goroutine leaked — in that order, so goroutines owned by shared test servers are
// gone before goleak looks.
package testmain

import (
	"fmt"
	"os"
	"testing"

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
