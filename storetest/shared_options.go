package storetest

import "time"

// A SharedOption configures a store that [SharedMemory.Open] opens.
type SharedOption interface{ applyShared(*sharedConfig) }

type sharedOptionFunc func(*sharedConfig)

func (f sharedOptionFunc) applyShared(c *sharedConfig) { f(c) }

type sharedConfig struct {
	lease  time.Duration
	server string
}

// defaultLease is the lease of a store without WithLease, pgstore's default.
const defaultLease = 10 * time.Second

func defaultSharedConfig() sharedConfig { return sharedConfig{lease: defaultLease} }

// WithLease sets how long a lease of the store lasts unrenewed
// ([asyncagents.LeaseStore.LeaseDuration]). Defaults to 10 s, as pgstore's; must be positive.
// Tests of takeovers use short ones, such as 300 ms.
func WithLease(d time.Duration) SharedOption {
	return sharedOptionFunc(func(c *sharedConfig) { c.lease = d })
}

// WithServer names the OpenCode server of the store ([asyncagents.LeaseStore.Server]): the
// store claims only the tasks first saved by stores of the same server. Defaults to "".
func WithServer(name string) SharedOption {
	return sharedOptionFunc(func(c *sharedConfig) { c.server = name })
}
