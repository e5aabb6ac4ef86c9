// Package poll waits for a condition that another goroutine or process makes true, for the
// tests and the test kits of this module.
package poll

import "time"

// MaxInterval bounds the time between two checks of [Until].
const MaxInterval = 250 * time.Millisecond

// Until checks cond until it holds (true) or d has passed (false). It checks after first,
// then less often (the interval grows by half each time, up to [MaxInterval]), so that a
// long wait does not take the CPU from what it waits for: a check may read a file, query a
// database, ask a server or run a process.
func Until(d, first time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for interval := first; !cond(); interval = min(interval*3/2, MaxInterval) {
		next := time.NewTimer(interval)
		select {
		case <-deadline.C:
			next.Stop()
			return false
		case <-next.C:
		}
	}
	return true
}
