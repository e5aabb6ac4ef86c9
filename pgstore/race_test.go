//go:build race

package pgstore_test

// raceEnabled reports whether the tests run under the race detector, whose costs make
// measurements of time and allocations meaningless.
const raceEnabled = true
