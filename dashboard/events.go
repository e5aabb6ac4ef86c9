package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// serveEvents streams the changes as server-sent events (see the package documentation):
// it counts the stream in, sends the headers, then, until the client or the handler goes,
// sends what the stream misses and waits for more.
func (h *Handler) serveEvents(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodGet) || !h.admitStream(w) {
		return
	}
	defer h.endStream()
	s := newEventStream(h, w, r)
	defer func() { _ = s.rc.SetWriteDeadline(time.Time{}) }() // the connection may serve another request
	startEventStream(w)
	heartbeat := time.NewTicker(h.cfg.heartbeat)
	defer heartbeat.Stop()
	for {
		wake, ended, ok := s.send()
		if !ok || ended || !s.wait(r.Context(), wake, heartbeat.C) {
			return
		}
	}
}

// tooManyStreams is the answer to a stream beyond [WithMaxStreams].
const tooManyStreams = "too many event streams; retry later"

// admitStream counts a new event stream in, or answers 503 and returns false when the
// handler is closing, its Manager has closed, or cfg.maxStreams streams are open (then
// with Retry-After). A stream counted in is counted out by endStream.
func (h *Handler) admitStream(w http.ResponseWriter) bool {
	var refusal string
	h.mu.Lock()
	switch {
	case h.closing:
		refusal = "dashboard closed"
	case h.ended:
		refusal = "manager closed"
	case h.nstreams >= h.cfg.maxStreams:
		refusal = tooManyStreams
	default:
		h.nstreams++
		h.streams.Add(1)
	}
	h.mu.Unlock()
	if refusal == "" {
		return true
	}
	if refusal == tooManyStreams {
		w.Header().Set("Retry-After", retryAfter)
	}
	writeError(w, http.StatusServiceUnavailable, refusal)
	return false
}

// endStream counts out a stream that admitStream counted in.
func (h *Handler) endStream() {
	h.mu.Lock()
	h.nstreams--
	h.mu.Unlock()
	h.streams.Done()
}

// startEventStream sends the headers of an event stream.
func startEventStream(w http.ResponseWriter) {
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
}

// eventStream is one open event stream: where its client stands in the handler's changes
// (the epoch and number of the last change it has), and the frames not yet written.
type eventStream struct {
	h     *Handler
	w     http.ResponseWriter
	rc    *http.ResponseController
	sess  *session        // nil without a session (a token, or no credential at all)
	gone  <-chan struct{} // closed when sess ends; nil (never ready) without a session
	epoch string
	n     uint64
	// buf gathers the small frames (changes, heartbeats); a snapshot is written from its
	// own encoding and not copied, and a buffer grown by a burst is dropped once written,
	// so that an idle stream holds little.
	buf bytes.Buffer
}

// newEventStream returns the stream of r, starting after the change that its Last-Event-ID
// header names (which a browser sends when it reconnects), or its lastEventId query
// parameter (which the page sends when it opens a new stream after the browser gave up),
// with the reconnection delay as its first frame.
func newEventStream(h *Handler, w http.ResponseWriter, r *http.Request) *eventStream {
	s := &eventStream{h: h, w: w, rc: http.NewResponseController(w), sess: sessionOf(r)}
	if s.sess != nil {
		s.gone = s.sess.gone
	}
	last := r.Header.Get("Last-Event-ID")
	if last == "" {
		last = r.URL.Query().Get("lastEventId")
	}
	s.epoch, s.n = parseEventID(last)
	s.buf.WriteString("retry: 2000\n\n")
	return s
}

// send writes what the stream misses (see catchUp) and any frame waiting in buf. It
// returns the channel that is closed at the handler's next change and whether the hub
// has ended; ok is false when the stream must end: the client is gone or the snapshot
// could not be encoded.
func (s *eventStream) send() (wake <-chan struct{}, ended, ok bool) {
	snap, wake, ended := s.catchUp()
	var data []byte
	if snap != nil {
		sort.Slice(snap.Tasks, func(i, j int) bool { return snap.Tasks[i].ID > snap.Tasks[j].ID })
		var err error
		if data, err = json.Marshal(snap); err != nil {
			return nil, false, false
		}
		writeEventHead(&s.buf, "snapshot", s.epoch, s.n)
	}
	if s.buf.Len() == 0 {
		return wake, ended, true
	}
	if !s.write(s.buf.Bytes(), data, eventEnd(data)) {
		return nil, false, false
	}
	if s.buf.Cap() > maxKeptBuffer {
		s.buf = bytes.Buffer{}
	} else {
		s.buf.Reset()
	}
	return wake, ended, true
}

// catchUp brings the stream to the handler's last change, under its lock: it appends the
// changes the stream misses to buf when the handler still keeps them all, else (another
// epoch, a number from the future, or changes no longer kept) returns a snapshot of every
// task, unsorted, for send to encode. It also returns the handler's wake channel and
// whether the hub has ended, as of that change.
func (s *eventStream) catchUp() (snap *snapshotJSON, wake <-chan struct{}, ended bool) {
	h := s.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if stored := min(h.last, uint64(len(h.ring))); s.epoch != h.epoch || s.n > h.last || s.n+stored < h.last {
		snap = &snapshotJSON{Time: time.Now(), ReadOnly: h.cfg.readOnly, Tasks: make([]taskJSON, 0, len(h.tasks))}
		for _, t := range h.tasks {
			snap.Tasks = append(snap.Tasks, view(t))
		}
		s.epoch, s.n = h.epoch, h.last
		return snap, h.wake, h.ended
	}
	for ; s.n < h.last; s.n++ {
		rec := h.ring[s.n%uint64(len(h.ring))]
		writeEvent(&s.buf, "change", s.epoch, rec.n, rec.data)
	}
	return nil, h.wake, h.ended
}

// wait blocks until the handler's next change (wake) or the next heartbeat, which it
// queues in buf and which counts as use of the session. It returns false when the stream
// must end: the session ended or expired, the client went away (ctx), or the handler is
// closing.
func (s *eventStream) wait(ctx context.Context, wake <-chan struct{}, heartbeat <-chan time.Time) bool {
	select {
	case <-wake:
		return true
	case <-heartbeat:
		if s.sess != nil && !s.h.sessions.touch(s.sess) {
			return false
		}
		s.buf.WriteString(": heartbeat\n\n")
		return true
	case <-s.gone:
		return false
	case <-ctx.Done():
		return false
	case <-s.h.stop:
		return false
	}
}

// maxKeptBuffer is the largest buffer an event stream keeps between writes.
const maxKeptBuffer = 64 << 10

// write sends ps and flushes them within the write timeout (10 s); false when the client
// is gone.
func (s *eventStream) write(ps ...[]byte) bool {
	if err := s.rc.SetWriteDeadline(time.Now().Add(s.h.cfg.writeTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return false
	}
	for _, p := range ps {
		if len(p) == 0 {
			continue
		}
		if _, err := s.w.Write(p); err != nil {
			s.h.cfg.logger.Debug("dashboard: event stream ended", "err", err)
			return false
		}
	}
	if err := s.rc.Flush(); err != nil {
		if errors.Is(err, http.ErrNotSupported) {
			s.h.cfg.logger.Error("dashboard: the ResponseWriter cannot flush; event streams will not work")
		}
		return false
	}
	return true
}

// writeEvent appends one event; data is one line of JSON.
func writeEvent(buf *bytes.Buffer, name, epoch string, n uint64, data []byte) {
	writeEventHead(buf, name, epoch, n)
	buf.Write(data)
	buf.WriteString("\n\n")
}

// writeEventHead appends an event up to its data, which the caller writes, then eventEnd.
func writeEventHead(buf *bytes.Buffer, name, epoch string, n uint64) {
	buf.WriteString("id: ")
	buf.WriteString(eventID(epoch, n))
	buf.WriteString("\nevent: ")
	buf.WriteString(name)
	buf.WriteString("\ndata: ")
}

var eventTail = []byte("\n\n")

// eventEnd ends an event whose data was written apart: nothing without data.
func eventEnd(data []byte) []byte {
	if data == nil {
		return nil
	}
	return eventTail
}

// eventID is "<epoch>-<n>": the epoch names the handler's current subscription, n counts
// its changes from 1 (0: the state before the first).
func eventID(epoch string, n uint64) string {
	return epoch + "-" + strconv.FormatUint(n, 10)
}

// parseEventID reads an eventID; anything else gives an epoch no handler has.
func parseEventID(s string) (string, uint64) {
	epoch, num, ok := strings.Cut(s, "-")
	if !ok || len(s) > 64 {
		return "", 0
	}
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil {
		return "", 0
	}
	return epoch, n
}
