package asyncagents

import (
	"context"
	"errors"
)

// hosts is the part of the Manager that several Managers sharing one store need: leases on
// the tasks (a Manager acts on a task only while its store holds the task's lease), hand-overs
// to the host that asks for a task, and the tasks the other hosts hold. New chooses it once,
// from the store: a plain [Store] has one host (oneHost: nothing is leased, taken over or held
// elsewhere); a [LeaseStore] has several (sharedHosts, shared.go). The rest of the Manager
// asks it and never looks at the store's kind again. (A [SlotStore]'s slots are the slots
// part's.)
type hosts interface {
	// server names the OpenCode server of the Managers on the store (Task.Server).
	server() string
	// act checks that the Manager may act on tasks ids now and counts each as acted on
	// (hold.acting) until the caller releases the entries it returns (releaseLocked); the
	// context it returns ends when the first lease could lapse. It returns an error matching
	// ErrLeaseLost when the store does not hold one of them, or it is being handed over.
	act(ctx context.Context, ids []string) (context.Context, context.CancelFunc, []*entry, error)
	// start starts the part's goroutines.
	start()
	// pull takes over the caller's task id (a full id or a prefix) from the host holding it,
	// when the Manager does not have it.
	pull(ctx context.Context, caller Caller, id string)
	// pullAll takes over every task of the caller that a host of the same server holds.
	pullAll(ctx context.Context, caller Caller)
	// remote returns the stored tasks of parent ("" for all) that other hosts hold, with
	// their DisplayID set.
	remote(parent string) []Task
	// other returns the summary of the task that runs in session id when another host holds
	// it, as last read; under Manager.mu.
	other(session string) (Task, bool)
	// launched returns the summary, as last read, of a task of parent that another host
	// holds and that was launched with the idempotency key key; under Manager.mu.
	launched(parent, key string) (Task, bool)
	// tree reads from the store, now rather than as last read, where session s (whose
	// parent session is parent, "" for none) stands in the task tree: the task it is, when
	// a host stored it as one, and whether it is the parent of stored tasks. Not under
	// Manager.mu.
	tree(ctx context.Context, s, parent string) (task Task, isTask, hasTasks bool, err error)
}

// newHosts returns the hosts part for m's store.
func newHosts(m *Manager) hosts {
	ls, ok := m.cfg.store.(LeaseStore)
	if !ok {
		return oneHost{}
	}
	hs, _ := ls.(HandoffStore)
	return &sharedHosts{m: m, ls: ls, hs: hs}
}

// oneHost is the hosts part of a Manager whose store no other Manager shares.
type oneHost struct{}

func (oneHost) server() string { return "" }
func (oneHost) act(ctx context.Context, _ []string) (context.Context, context.CancelFunc, []*entry, error) {
	ctx, cancel := context.WithCancel(ctx)
	return ctx, cancel, nil, nil
}
func (oneHost) start()                               {}
func (oneHost) pull(context.Context, Caller, string) {}
func (oneHost) pullAll(context.Context, Caller)      {}
func (oneHost) remote(string) []Task                 { return nil }
func (oneHost) other(string) (Task, bool)            { return Task{}, false }
func (oneHost) launched(string, string) (Task, bool) { return Task{}, false }
func (oneHost) tree(context.Context, string, string) (Task, bool, bool, error) {
	return Task{}, false, false, nil
}

// leaseCtx bounds ctx by the leases on tasks ids, for a request that acts on them: it fails
// with ErrLeaseLost when the Manager does not hold one of them (or is handing it over), and
// otherwise ends when the first could lapse. The request counts as in flight on the tasks
// until cancel is called (a handover waits for it).
func (m *Manager) leaseCtx(ctx context.Context, ids ...string) (context.Context, context.CancelFunc, error) {
	ctx, cancel, acting, err := m.hosts.act(ctx, ids)
	if err != nil {
		return nil, nil, err
	}
	return ctx, func() {
		cancel()
		m.mu.Lock()
		releaseLocked(acting)
		m.mu.Unlock()
	}, nil
}

// postCtx is leaseCtx for a post whose outcome the caller sets on the tasks afterwards
// (a notification delivered, a turn asked): the tasks stay counted as acted on after cancel,
// in *held, until the caller has set the outcome on them and calls releaseLocked(*held). A
// handover then stores them with the outcome, never as posted but still pending.
func (m *Manager) postCtx(ctx context.Context, held *[]*entry, ids ...string) (context.Context, context.CancelFunc, error) {
	ctx, cancel, acting, err := m.hosts.act(ctx, ids)
	if err != nil {
		return nil, nil, err
	}
	*held = append(*held, acting...)
	return ctx, cancel, nil
}

// releaseLocked ends the count of entries as acted on, taken by hosts.act.
func releaseLocked(acting []*entry) {
	for _, e := range acting {
		e.hold.acting--
	}
}

// lostLease reports whether err says the store no longer holds a task's lease.
func lostLease(err error) bool { return errors.Is(err, ErrLeaseLost) }

// dropLost forgets tasks whose leases another host now holds: it stops acting on them and
// leaves their records to that host. A blocked Output on one returns [ErrTaskNotFound].
func (m *Manager) dropLost(ids ...string) {
	m.mu.Lock()
	var start []*entry
	for _, id := range ids {
		e := m.tasks.byID[id]
		if e == nil {
			continue
		}
		m.cfg.logger.Info("asyncagents: task lease lost to another host", "task", id)
		e.hold.lost = true
		usage := e.task.Usage
		e.task.Usage = Usage{} // not cleared: counted by its new holder
		start = append(start, m.removeLocked(e)...)
		e.task.Usage = usage
	}
	m.mu.Unlock()
	m.startQueued(start)
}

// adopt takes in tasks claimed from hosts that stopped renewing, as New takes in stored
// ones: active ones are read at once, pending notifications queued, queued tasks started
// when their limits allow, follow-ups sent.
func (m *Manager) adopt(tasks []Task) {
	tasks = m.acceptRecords(m.bg.ctx, tasks, true)
	m.mu.Lock()
	if m.tasks.closed {
		m.mu.Unlock()
		return
	}
	start, followUps, interrupted := m.restore(tasks)
	m.recon.wakeOne()
	m.slots.wakeGranter()
	m.mu.Unlock()
	m.interruptStarts(interrupted)
	m.startQueued(start)
	for _, e := range followUps {
		m.sendFollowUp(e)
	}
}
