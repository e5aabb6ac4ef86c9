package asyncagents

import (
	"fmt"
)

// DefaultSubscriptionBuffer is the number of changes a [Subscription] holds for its reader
// when [Manager.Subscribe] is given 0.
const DefaultSubscriptionBuffer = 256

// MaxSubscriptionBuffer bounds the buffer of one [Subscription].
const MaxSubscriptionBuffer = 1 << 16

// Change is one change of one task, as a [Subscription] delivers it.
type Change struct {
	// Seq numbers the Manager's changes from 1 in the order they happened, without gaps; it
	// starts again at 1 in a new Manager.
	Seq uint64 `json:"seq"`
	// Task is the task after the change; for a removal, the task as it was.
	Task Task `json:"task"`
	// Removed reports that the task was cleared (Manager.Clear, Manager.ClearAll).
	Removed bool `json:"removed,omitempty"`
	// Remote reports, in a [Subscription], that the task is another host's: the change was
	// read from the store, as a summary. A [HandoffStore] leaves it false.
	Remote bool `json:"remote,omitempty"`
}

// Subscription receives the changes of a Manager's tasks: a new task, a status change, a
// counted tool call, a permission request or answer, a follow-up, a notification's
// progress, a removal. With a [HandoffStore] it also receives the changes of the tasks other
// hosts hold, as summaries (their prompts, results, follow-ups and notifications left out),
// read from the store every second. Create one with [Manager.Subscribe]; it is safe for concurrent use.
type Subscription struct {
	m   *Manager
	c   chan Change
	err error // set, under m.mu, before c is closed
}

// Changes returns the channel the changes arrive on, in Seq order. It is closed when the
// subscription ends; Err then says why.
func (s *Subscription) Changes() <-chan Change { return s.c }

// Err returns nil while the subscription runs; after its channel is closed, [ErrLagged]
// (the reader fell a whole buffer behind), [ErrClosed] (the Manager was closed) or nil (the
// subscription was closed by its owner).
func (s *Subscription) Err() error {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	return s.err
}

// Close ends the subscription and closes its channel. It may be called more than once.
func (s *Subscription) Close() {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	s.m.feed.end(s, nil)
}

// Subscribe returns every task of the Manager (with a [HandoffStore], other hosts' tasks
// too) as it is at this moment, newest first, and a
// subscription to every change from this moment on. buffer is how many changes the
// subscription holds before its reader takes them (0: [DefaultSubscriptionBuffer]; at most
// [MaxSubscriptionBuffer]). The Manager never waits for a reader: one that falls a whole
// buffer behind is dropped, its channel closed and Err set to [ErrLagged]. It returns
// [ErrInvalidInput] for a bad buffer and [ErrClosed] after Close.
func (m *Manager) Subscribe(buffer int) (*Subscription, []Task, error) {
	if buffer < 0 || buffer > MaxSubscriptionBuffer {
		return nil, nil, fmt.Errorf("%w: subscription buffer %d outside 0..%d", ErrInvalidInput, buffer, MaxSubscriptionBuffer)
	}
	if buffer == 0 {
		buffer = DefaultSubscriptionBuffer
	}
	remote := m.hosts.remote("")
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.tasks.closed {
		return nil, nil, ErrClosed
	}
	s := &Subscription{m: m, c: make(chan Change, buffer)}
	m.feed.add(s)
	return s, withRemote(m.allLocked(""), remote, ""), nil
}

// feed is the part of the Manager behind Subscribe: the number of changes so far
// (Change.Seq) and the live subscriptions, and what it last published of other hosts' tasks.
// Guarded by Manager.mu.
type feed struct {
	seq  uint64
	subs map[*Subscription]struct{}
}

// add starts sending changes to s.
func (f *feed) add(s *Subscription) {
	if f.subs == nil {
		f.subs = map[*Subscription]struct{}{}
	}
	f.subs[s] = struct{}{}
}

// publish sends a change of task t (another host's, when remote) to every subscriber that
// has room, and drops those that have none.
func (f *feed) publish(t Task, removed, remote bool) {
	f.seq++
	c := Change{Seq: f.seq, Task: t, Removed: removed, Remote: remote}
	for s := range f.subs {
		select {
		case s.c <- c:
		default:
			f.end(s, ErrLagged)
		}
	}
}

// end ends s with err unless it has ended already.
func (f *feed) end(s *Subscription, err error) {
	if _, ok := f.subs[s]; !ok {
		return
	}
	delete(f.subs, s)
	s.err = err
	close(s.c)
}
