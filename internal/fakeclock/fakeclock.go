// Package fakeclock is a manual clock for tests: time moves only when the test calls
// Advance, and timers created with After fire when it passes their deadline.
package fakeclock

import (
	"slices"
	"sync"
	"time"
)

// Clock is a manual clock. The zero value is not ready: use New.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []waiter
	added   chan struct{}
}

type waiter struct {
	at time.Time
	d  time.Duration
	ch chan time.Time
}

// New returns a clock set to start.
func New(start time.Time) *Clock { return &Clock{now: start, added: make(chan struct{}, 1)} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After returns a channel that receives the time once Advance has moved the clock d past now.
func (c *Clock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, waiter{at: c.now.Add(d), d: d, ch: ch})
	select {
	case c.added <- struct{}{}:
	default:
	}
	return ch
}

// Advance moves the clock by d and fires the timers that are due.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.waiters = slices.DeleteFunc(c.waiters, func(w waiter) bool {
		if w.at.After(c.now) {
			return false
		}
		w.ch <- c.now
		return true
	})
}

// Waiting returns the durations of the timers that have not fired, in creation order.
func (c *Clock) Waiting() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]time.Duration, len(c.waiters))
	for i, w := range c.waiters {
		out[i] = w.d
	}
	return out
}

// WaitFor blocks until a timer of duration d is waiting, or done is closed (false).
func (c *Clock) WaitFor(d time.Duration, done <-chan struct{}) bool {
	for {
		if slices.Contains(c.Waiting(), d) {
			return true
		}
		select {
		case <-c.added:
		case <-done:
			return false
		}
	}
}
