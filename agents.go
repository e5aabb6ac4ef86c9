package asyncagents

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/asyncagents/asyncagents/opencode"
)

// agentsTTL is how long the server's agent list is trusted; an agent not in it is checked
// against a fresh list before it is refused.
const agentsTTL = 30 * time.Second

// maxAgentLists bounds the directories whose agent lists are cached; past it the cache
// starts over.
const maxAgentLists = 64

// agentCache is the part of the Manager that knows the servers' agents: per directory, the
// agents as of a moment (with their modes and permission rules), and the one request in
// flight per directory. Guarded by mu, not Manager.mu.
type agentCache struct {
	mu    sync.Mutex
	lists map[string]agentList
	once  singleflight.Group
}

// agentList is the agents of one instance, by name, as of at.
type agentList struct {
	byName map[string]opencode.Agent
	at     time.Time
}

// get returns the agent name of dir's instance (GET /agent, as client answers it) and
// whether the instance has it. Each directory's list is cached for agentsTTL by clock; a name
// not in the cached list is looked up in a fresh one; concurrent callers share one request.
func (ac *agentCache) get(ctx context.Context, client opencode.Client, clock Clock, dir, name string) (opencode.Agent, bool, error) {
	ac.mu.Lock()
	l := ac.lists[dir]
	ac.mu.Unlock()
	if a, ok := l.byName[name]; ok && clock.Now().Sub(l.at) < agentsTTL {
		return a, true, nil
	}
	v, err, _ := ac.once.Do(dir, func() (any, error) {
		agents, err := client.Agents(ctx, dir)
		if err != nil {
			return nil, err
		}
		l := agentList{byName: make(map[string]opencode.Agent, len(agents)), at: clock.Now()}
		for _, a := range agents {
			l.byName[a.Name] = a
		}
		ac.mu.Lock()
		if ac.lists == nil || len(ac.lists) >= maxAgentLists {
			ac.lists = map[string]agentList{}
		}
		ac.lists[dir] = l
		ac.mu.Unlock()
		return l, nil
	})
	if err != nil {
		return opencode.Agent{}, false, fmt.Errorf("asyncagents: list agents: %w", err)
	}
	a, ok := v.(agentList).byName[name]
	return a, ok, nil
}

// check returns the visible agent name of dir's instance (hidden agents do not count; a
// project may define its own), or an error matching ErrUnknownAgent that names the visible
// ones, or the client's error.
func (ac *agentCache) check(ctx context.Context, client opencode.Client, clock Clock, dir, name string) (opencode.Agent, error) {
	a, ok, err := ac.get(ctx, client, clock, dir, name)
	if err != nil {
		return opencode.Agent{}, err
	}
	if ok && !a.Hidden {
		return a, nil
	}
	ac.mu.Lock()
	var known []string
	for _, a := range ac.lists[dir].byName {
		if !a.Hidden {
			known = append(known, a.Name)
		}
	}
	ac.mu.Unlock()
	sort.Strings(known)
	return opencode.Agent{}, fmt.Errorf("%w: %s (known agents: %s)", ErrUnknownAgent, echo(name), strings.Join(known, ", "))
}
