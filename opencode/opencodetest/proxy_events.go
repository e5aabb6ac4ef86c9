package opencodetest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/asyncagents/asyncagents/opencode"
)

// EventStreams returns how many event streams (GET /global/event, GET /event) are open
// through the proxy: a test can wait for a client to subscribe before it sends or cuts.
func (p *Proxy) EventStreams() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.streams)
}

// CutEvents ends every open event stream by closing its connection in the middle of the
// stream, as a server that dies does: the client's read fails. Streams opened later are
// not affected. It returns how many streams it cut.
func (p *Proxy) CutEvents() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for s := range p.streams {
		s.cutOnce.Do(func() { close(s.cut) })
	}
	return len(p.streams)
}

// SendEvent sends ev on every open event stream as the server frames it: {"directory":
// directory, "payload": ev} on GET /global/event, the bare event on GET /event. Directory is
// the instance the event claims to come from (the project folder; "" for server.* events).
// The frame goes out at once, between two of the server's frames, never inside one (ahead
// of a frame the proxy has only received in part). It returns how many streams it was
// queued on.
func (p *Proxy) SendEvent(directory string, ev opencode.Event) int {
	bare, err := json.Marshal(ev)
	if err != nil {
		panic(fmt.Sprintf("opencodetest: encode event: %v", err)) // only invalid Properties JSON gets here
	}
	global, _ := json.Marshal(struct {
		Directory string          `json:"directory"`
		Payload   json.RawMessage `json:"payload"`
	}{directory, bare})
	p.mu.Lock()
	defer p.mu.Unlock()
	for s := range p.streams {
		data := bare
		if s.global {
			data = global
		}
		s.push(append(append([]byte("data: "), data...), '\n', '\n'))
	}
	return len(p.streams)
}

// relayEvents wraps the body of an event stream so that it can be cut and fed events.
func (p *Proxy) relayEvents(res *http.Response) error {
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		return nil
	}
	s := &eventBody{
		p: p, upstream: res.Body, global: strings.HasSuffix(res.Request.URL.Path, "/global/event"),
		frames: make(chan chunk), wake: make(chan struct{}, 1), cut: make(chan struct{}), done: make(chan struct{}),
	}
	p.mu.Lock()
	p.streams[s] = struct{}{}
	p.mu.Unlock()
	p.pumps.Add(1)
	go s.pump()
	res.Body = s
	return nil
}

// errCut ends a stream cut by CutEvents or Close.
var errCut = errors.New("opencodetest: event stream cut by the proxy")

// chunk is what the pump hands to Read: whole frames, or the end of the upstream stream.
type chunk struct {
	data []byte
	err  error
}

// eventBody is the body of a relayed event stream: the server's frames, whole, with
// injected frames between them.
type eventBody struct {
	p        *Proxy
	upstream io.ReadCloser
	global   bool
	frames   chan chunk    // from pump
	wake     chan struct{} // an injected frame is queued
	cut      chan struct{} // closed by CutEvents
	cutOnce  sync.Once
	done     chan struct{} // closed by Close
	close1   sync.Once

	mu       sync.Mutex
	injected [][]byte

	pending []byte // the rest of what Read returns next; only Read's goroutine uses it
	end     error
}

func (s *eventBody) push(frame []byte) {
	s.mu.Lock()
	s.injected = append(s.injected, frame)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// pump reads the server's stream and hands it on in whole frames (ending in a blank line),
// so that injected frames never land inside one.
func (s *eventBody) pump() {
	defer s.p.pumps.Done()
	var buf []byte
	tmp := make([]byte, 32<<10)
	for {
		n, err := s.upstream.Read(tmp)
		buf = append(buf, tmp[:n]...)
		if end := lastFrameEnd(buf); end > 0 {
			c := chunk{data: bytes.Clone(buf[:end])}
			buf = append(buf[:0], buf[end:]...)
			select {
			case s.frames <- c:
			case <-s.done:
				return
			}
		}
		if err != nil {
			select {
			case s.frames <- chunk{data: buf, err: err}:
			case <-s.done:
			}
			return
		}
	}
}

// lastFrameEnd returns the length of the longest prefix of b made of whole SSE frames: up
// to the end of the last empty line ("\n\n" or "\n\r\n"), or 0.
func lastFrameEnd(b []byte) int {
	for i := len(b) - 1; i >= 1; i-- {
		if b[i] != '\n' {
			continue
		}
		if b[i-1] == '\n' || (i >= 2 && b[i-1] == '\r' && b[i-2] == '\n') {
			return i + 1
		}
	}
	return 0
}

// Read returns the server's frames and the injected ones, in the order they became ready.
func (s *eventBody) Read(b []byte) (int, error) {
	for len(s.pending) == 0 {
		if s.end != nil {
			return 0, s.end
		}
		s.mu.Lock()
		if len(s.injected) > 0 {
			s.pending, s.injected = s.injected[0], s.injected[1:]
			s.mu.Unlock()
			break
		}
		s.mu.Unlock()
		select {
		case c := <-s.frames:
			s.pending, s.end = c.data, c.err
		case <-s.wake:
		case <-s.cut:
			return 0, errCut
		case <-s.done:
			return 0, errCut
		}
	}
	n := copy(b, s.pending)
	s.pending = s.pending[n:]
	return n, nil
}

// Close releases the server's stream (ending the pump) and forgets the stream.
func (s *eventBody) Close() error {
	var err error
	s.close1.Do(func() {
		close(s.done)
		err = s.upstream.Close()
		s.p.mu.Lock()
		delete(s.p.streams, s)
		s.p.mu.Unlock()
	})
	return err
}
