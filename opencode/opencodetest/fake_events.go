package opencodetest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"net"
	"net/http"
	"sync"

	"github.com/asyncagents/asyncagents/opencode"
)

// fakeStream is the opencode.EventStream of a FakeClient: an unbounded queue of events the
// fake appends to, read by one goroutine. It starts no goroutine.
type fakeStream struct {
	f    *FakeClient
	ctx  context.Context
	wake chan struct{} // one pending wake-up

	mu     sync.Mutex
	queue  []opencode.Event
	end    error // set when the fake ended the stream; queued events are delivered first
	closed bool
}

var _ opencode.EventStream = (*fakeStream)(nil)

func (s *fakeStream) push(ev opencode.Event) {
	s.mu.Lock()
	if s.end == nil && !s.closed {
		s.queue = append(s.queue, ev)
	}
	s.mu.Unlock()
	s.notify()
}

// finish ends the stream with err after the events already queued.
func (s *fakeStream) finish(err error) {
	s.mu.Lock()
	if s.end == nil {
		s.end = err
	}
	s.mu.Unlock()
	s.notify()
}

func (s *fakeStream) notify() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// All yields the queued events as they come and ends as opencode.EventStream says: io.EOF
// when the fake dropped the stream or was closed, net.ErrClosed after Close, or the
// context's error.
func (s *fakeStream) All() iter.Seq2[opencode.Event, error] {
	return func(yield func(opencode.Event, error) bool) {
		for {
			s.mu.Lock()
			switch {
			case s.closed:
				s.mu.Unlock()
				yield(opencode.Event{}, fmt.Errorf("opencodetest: event stream: %w", net.ErrClosed))
				return
			case len(s.queue) > 0:
				ev := s.queue[0]
				s.queue = s.queue[1:]
				s.mu.Unlock()
				if !yield(ev, nil) {
					return
				}
				continue
			case s.end != nil:
				err := s.end
				s.mu.Unlock()
				yield(opencode.Event{}, err)
				return
			}
			s.mu.Unlock()
			select {
			case <-s.wake:
			case <-s.ctx.Done():
				s.f.removeStream(s)
				yield(opencode.Event{}, fmt.Errorf("opencodetest: event stream: %w", context.Cause(s.ctx)))
				return
			}
		}
	}
}

// Close ends the stream; a range in progress ends with an error matching net.ErrClosed. It
// is idempotent.
func (s *fakeStream) Close() error {
	s.mu.Lock()
	s.closed = true
	s.queue = nil
	s.mu.Unlock()
	s.notify()
	s.f.removeStream(s)
	return nil
}

func (f *FakeClient) removeStream(s *fakeStream) {
	f.mu.Lock()
	delete(f.streams, s)
	f.mu.Unlock()
}

// emit sends an event to every open stream, with the directory of the session it names (the
// fake's directory when it names none). f.mu must be held.
func (f *FakeClient) emit(typ string, props any) {
	b, err := json.Marshal(props)
	if err != nil {
		panic(fmt.Sprintf("opencodetest: encode %s event: %v", typ, err)) // the fake's own types
	}
	ev := opencode.Event{ID: f.ids.next("evt", false, f.now()), Type: typ, Properties: b}
	ev.Directory = f.dirOf(ev.SessionID())
	for s := range f.streams {
		s.push(ev)
	}
}

// dropStreams ends every open stream with io.EOF, as when the server closes its connections.
// f.mu must be held.
func (f *FakeClient) dropStreams() {
	for s := range f.streams {
		s.finish(io.EOF)
		delete(f.streams, s)
	}
}

// Streams returns the number of open event streams (Events). A test waits for its client's
// subscription with it before it scripts events the client must see.
func (f *FakeClient) Streams() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.streams)
}

// Events opens an event stream, as GET /global/event does: it starts with server.connected
// and carries every later event of the fake, each with Directory set to the directory of the
// session it concerns (the fake's directory for events of no session).
// It follows the [opencode.EventStream] contract; it never stalls (the fake sends no
// heartbeats). [FakeClient.DropEvents] and Close end it with io.EOF.
func (f *FakeClient) Events(ctx context.Context) (opencode.EventStream, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter(ctx, "Events", http.MethodGet, "/global/event"); err != nil {
		return nil, err
	}
	s := &fakeStream{f: f, ctx: ctx, wake: make(chan struct{}, 1)}
	f.streams[s] = struct{}{}
	s.push(opencode.Event{ID: f.ids.next("evt", false, f.now()), Type: opencode.EventServerConnected, Properties: json.RawMessage(`{}`)})
	return s, nil
}
