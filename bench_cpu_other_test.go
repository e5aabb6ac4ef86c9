//go:build !unix

package asyncagents_test

import "time"

// processCPU reports false: there is no getrusage here, and the benchmarks report no CPU
// figures.
func processCPU() (time.Duration, bool) { return 0, false }
