package opencodetest

import (
	"bytes"
	"encoding/json"
	"net/http"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/asyncagents/asyncagents/opencode"
)

// events serves GET /global/event: the backing client's stream as Server-Sent Events.
//
// A goroutine (the pump) ranges over the backing stream and appends each event's frame to a
// queue; the handler writes what the queue holds and flushes it once. So a burst of events
// goes out in a few large writes instead of a write and a flush each, and a quiet stream's
// event still goes out at once. The queue holds at most about frameQueueMax bytes: a pump
// ahead of the client waits, and the events wait in the backing stream. The handler stops
// the pump (Close of the backing stream ends its range) and waits for it before it returns.
func (s *HTTPServer) events(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	st, err := s.c.Events(ctx)
	if err != nil {
		writeErr(w, err)
		return
	}
	q := &frameQueue{wake: make(chan struct{}, 1), space: make(chan struct{}, 1)}
	pumped, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(pumped)
		defer q.finish()
		for ev, err := range st.All() {
			if err != nil || !q.push(ev, done) {
				return
			}
		}
	}()
	defer func() {
		close(done)
		_ = st.Close()
		<-pumped
	}()

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache, no-transform")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	if rc.Flush() != nil {
		return
	}
	beat := time.NewTicker(s.cfg.heartbeat)
	defer beat.Stop()
	var frames []byte
	for {
		select {
		case <-q.wake:
		case <-beat.C:
			q.push(opencode.Event{Type: opencode.EventServerHeartbeat, Properties: json.RawMessage(`{}`)}, nil)
		case <-ctx.Done():
			return
		}
		var end bool
		frames, end = q.take(frames)
		if len(frames) > 0 {
			if _, err := w.Write(frames); err != nil || rc.Flush() != nil {
				return
			}
		}
		if end {
			return
		}
		if cap(frames) > 2*frameQueueMax { // a large tool output: do not keep its buffer
			frames = nil
		}
	}
}

// frameQueueMax bounds the frames an event stream holds for its client; a frame is added
// while the queue holds less.
const frameQueueMax = 64 << 10

// frameQueue holds the frames of one event stream between the pump and the handler.
type frameQueue struct {
	wake  chan struct{} // one pending wake-up of the handler
	space chan struct{} // one pending wake-up of a pump waiting for room

	mu     sync.Mutex
	frames []byte
	end    bool // the backing stream ended
}

// push queues ev's frame, first waiting while the queue is full, unless done is nil (the
// handler's own heartbeat). It reports false when done was closed meanwhile.
func (q *frameQueue) push(ev opencode.Event, done <-chan struct{}) bool {
	q.mu.Lock()
	for done != nil && len(q.frames) >= frameQueueMax {
		q.mu.Unlock()
		select {
		case <-q.space:
		case <-done:
			return false
		}
		q.mu.Lock()
	}
	q.frames = appendFrame(q.frames, ev)
	q.mu.Unlock()
	q.notify()
	return true
}

func (q *frameQueue) finish() {
	q.mu.Lock()
	q.end = true
	q.mu.Unlock()
	q.notify()
}

func (q *frameQueue) notify() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// take returns the frames queued so far, leaving spare (emptied) in their place, and
// whether the backing stream ended after them.
func (q *frameQueue) take(spare []byte) (frames []byte, end bool) {
	q.mu.Lock()
	frames, q.frames = q.frames, spare[:0]
	end = q.end
	q.mu.Unlock()
	select {
	case q.space <- struct{}{}:
	default:
	}
	return frames, end
}

// appendFrame appends ev as OpenCode frames it on GET /global/event:
//
//	data: {"directory":…,"payload":{"id":…,"type":…,"properties":…}}
//
// followed by a blank line. The properties are copied, not re-encoded; only properties that
// hold a line break (JSON that is not compact) are compacted, since a frame is one line. The
// shape is the one [opencode.HTTPClient.Events] reads; package opencode has no encoder for
// it (a client has no use for one), so it is written here; the conformance test run
// through an HTTPServer holds the two together.
func appendFrame(b []byte, ev opencode.Event) []byte {
	b = append(b, `data: {"directory":`...)
	b = appendJSONString(b, ev.Directory)
	b = append(b, `,"payload":{`...)
	if ev.ID != "" {
		b = append(b, `"id":`...)
		b = appendJSONString(b, ev.ID)
		b = append(b, ',')
	}
	b = append(b, `"type":`...)
	b = appendJSONString(b, ev.Type)
	if p := ev.Properties; len(p) > 0 {
		b = append(b, `,"properties":`...)
		if bytes.IndexByte(p, '\n') >= 0 || bytes.IndexByte(p, '\r') >= 0 { // two vectorized searches, not one byte by byte
			var c bytes.Buffer
			if json.Compact(&c, p) == nil {
				p = c.Bytes()
			}
		}
		b = append(b, p...)
	}
	return append(b, "}}\n\n"...)
}

// appendJSONString appends s as a JSON string: directly when it is printable ASCII with
// nothing to escape (ids, types, paths), through encoding/json otherwise.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c == '"' || c == '\\' || c >= utf8.RuneSelf || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
