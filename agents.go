package asyncagents

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/asyncagents/asyncagents/opencode"
	"golang.org/x/sync/singleflight"
)

// agentsTTL is how long the server's agent list is trusted; an agent not in it is checked
// against a fresh list before it is refused.
const agentsTTL = 30 * time.Second

// maxAgentLists bounds the directories whose agent lists are cached; past it the cache
// starts over.
const maxAgentLists = 64

// agentCache is the part of the Manager that knows the servers' agents: per directory, the
// visible agents as of a moment, and the one request in flight per directory. Guarded by mu,
// not Manager.mu.
type agentCache struct {
	mu    sync.Mutex
	lists map[string]agentList
	once  singleflight.Group
}

// agentList is the visible agents of one instance, sorted, as of at.
type agentList struct {
	names []string
	at    time.Time
}

// check verifies the agent name against GET /agent of dir's instance, as client answers it
// (hidden agents do not count; a project may define its own). Each directory's list is cached
// for agentsTTL by clock; concurrent launches share one request. It returns an error matching
// ErrUnknownAgent, which names the known agents, or the client's error.
func (ac *agentCache) check(ctx context.Context, client opencode.Client, clock Clock, dir, name string) error {
	ac.mu.Lock()
	l := ac.lists[dir]
	ac.mu.Unlock()
	if clock.Now().Sub(l.at) < agentsTTL && slices.Contains(l.names, name) {
		return nil
	}
	v, err, _ := ac.once.Do(dir, func() (any, error) {
		agents, err := client.Agents(ctx, dir)
		if err != nil {
			return nil, err
		}
		var names []string
		for _, a := range agents {
			if !a.Hidden {
				names = append(names, a.Name)
			}
		}
		sort.Strings(names)
		ac.mu.Lock()
		if ac.lists == nil || len(ac.lists) >= maxAgentLists {
			ac.lists = map[string]agentList{}
		}
		ac.lists[dir] = agentList{names: names, at: clock.Now()}
		ac.mu.Unlock()
		return names, nil
	})
	if err != nil {
		return fmt.Errorf("asyncagents: list agents: %w", err)
	}
	known := v.([]string)
	if slices.Contains(known, name) {
		return nil
	}
	return fmt.Errorf("%w: %s (known agents: %s)", ErrUnknownAgent, echo(name), strings.Join(known, ", "))
}
