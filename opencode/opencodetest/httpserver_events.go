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
func (s *HTTPServer) events(w http.ResponseWriter, r *http.Request) {
	st, err := s.c.Events(r.Context())
	if err != nil {
		writeErr(w, err)
		return
	}
	defer st.Close()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache, no-transform")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fw := &frameWriter{w: w, rc: http.NewResponseController(w)}
	if !fw.flush() {
		return
	}
	// The heartbeat runs on a timer, not a goroutine of its own, and stops before the handler
	// returns (a beat that fires meanwhile finds the writer stopped).
	fw.mu.Lock()
	fw.beat = time.AfterFunc(s.cfg.heartbeat, func() {
		if fw.write(opencode.Event{Type: opencode.EventServerHeartbeat, Properties: json.RawMessage(`{}`)}) {
			fw.mu.Lock()
			if !fw.stopped {
				fw.beat.Reset(s.cfg.heartbeat)
			}
			fw.mu.Unlock()
		}
	})
	fw.mu.Unlock()
	defer fw.stop()
	for ev, err := range st.All() {
		if err != nil || !fw.write(ev) {
			return
		}
	}
}

// frameWriter writes the frames of one event stream; the handler and the heartbeat share it.
type frameWriter struct {
	w    http.ResponseWriter
	rc   *http.ResponseController
	beat *time.Timer

	mu      sync.Mutex
	buf     []byte
	stopped bool // the handler is returning: nothing more is written
	failed  bool // a write failed: the client is gone
}

// write writes ev as one frame and flushes it; it reports false once the stream is done.
func (fw *frameWriter) write(ev opencode.Event) bool {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if fw.stopped || fw.failed {
		return false
	}
	fw.buf = appendFrame(fw.buf[:0], ev)
	if _, err := fw.w.Write(fw.buf); err != nil {
		fw.failed = true
		return false
	}
	if cap(fw.buf) > 64<<10 { // a large tool output: do not keep its buffer
		fw.buf = nil
	}
	return fw.flushLocked()
}

func (fw *frameWriter) flush() bool {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	return fw.flushLocked()
}

func (fw *frameWriter) flushLocked() bool {
	if err := fw.rc.Flush(); err != nil {
		fw.failed = true
	}
	return !fw.failed
}

// stop ends the heartbeat; after it returns nothing writes to the response.
func (fw *frameWriter) stop() {
	fw.mu.Lock()
	fw.stopped = true
	fw.mu.Unlock()
	fw.beat.Stop()
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
		if bytes.ContainsAny(p, "\r\n") {
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
