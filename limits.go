package asyncagents

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Limits bounds how many tasks run at once. A task counts against the limit of its model
// ("providerID/modelID", from LaunchInput.Model) when Models has one, else against its
// provider's when Providers has one, else against Default; a task launched without a model
// counts against Default. 0 means no limit. A launch over its limit returns at once with the
// task in [StatusQueued]; queued tasks start in launch order as slots free up, which happens
// whenever a run ends however it ends, or a task is cleared. Follow-ups ([Manager.Resume])
// do not wait for a slot.
type Limits struct {
	Default   int
	Providers map[string]int // by provider id
	Models    map[string]int // by "providerID/modelID"
}

func (l Limits) validate() error {
	bad := l.Default < 0
	for _, n := range l.Providers {
		bad = bad || n < 0
	}
	for _, n := range l.Models {
		bad = bad || n < 0
	}
	if bad {
		return fmt.Errorf("%w: concurrency limits must not be negative", ErrInvalidInput)
	}
	return nil
}

// any reports whether l limits anything.
func (l Limits) any() bool {
	return l.Default > 0 || slices.ContainsFunc(slices.Collect(maps.Values(l.Providers)), func(n int) bool { return n > 0 }) ||
		slices.ContainsFunc(slices.Collect(maps.Values(l.Models)), func(n int) bool { return n > 0 })
}

// keyOf returns the limit a task counts against, and its key ("" when unlimited).
func (l Limits) keyOf(model string) (key string, limit int) {
	if n, ok := l.Models[model]; ok && model != "" {
		return "model " + model, n
	}
	if prov, _, ok := strings.Cut(model, "/"); ok {
		if n, ok := l.Providers[prov]; ok {
			return "provider " + prov, n
		}
	}
	return "default", l.Default
}
