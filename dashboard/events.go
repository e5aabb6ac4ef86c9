package dashboard

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// serveEvents streams the changes as server-sent events (see the package documentation).
func (h *Handler) serveEvents(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodGet) {
		return
	}
	h.mu.Lock()
	if h.closing || h.ended {
		msg := "dashboard closed"
		if !h.closing {
			msg = "manager closed"
		}
		h.mu.Unlock()
		writeError(w, http.StatusServiceUnavailable, msg)
		return
	}
	if h.nstreams >= h.cfg.maxStreams {
		h.mu.Unlock()
		w.Header().Set("Retry-After", retryAfter)
		writeError(w, http.StatusServiceUnavailable, "too many event streams; retry later")
		return
	}
	h.nstreams++
	h.streams.Add(1)
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.nstreams--
		h.mu.Unlock()
		h.streams.Done()
	}()
	sess := sessionOf(r)
	var gone <-chan struct{} // nil (never ready) without a session
	if sess != nil {
		gone = sess.gone
	}

	rc := http.NewResponseController(w)
	defer func() { _ = rc.SetWriteDeadline(time.Time{}) }() // the connection may serve another request
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)

	last := r.Header.Get("Last-Event-ID")
	if last == "" {
		last = r.URL.Query().Get("lastEventId")
	}
	epoch, n := parseEventID(last)
	// buf gathers the small frames (changes, heartbeats); a snapshot is written from its
	// own encoding and not copied, and a buffer grown by a burst is dropped once written,
	// so that an idle stream holds little.
	var buf bytes.Buffer
	buf.WriteString("retry: 2000\n\n")
	heartbeat := time.NewTicker(h.cfg.heartbeat)
	defer heartbeat.Stop()
	for {
		h.mu.Lock()
		wake, ended := h.wake, h.ended
		var snap *snapshotJSON
		if stored := min(h.last, uint64(len(h.ring))); epoch != h.epoch || n > h.last || n+stored < h.last {
			snap = &snapshotJSON{Time: time.Now(), ReadOnly: h.cfg.readOnly, Tasks: make([]taskJSON, 0, len(h.tasks))}
			for _, t := range h.tasks {
				snap.Tasks = append(snap.Tasks, view(t))
			}
			epoch, n = h.epoch, h.last
		} else {
			for ; n < h.last; n++ {
				rec := h.ring[n%uint64(len(h.ring))]
				writeEvent(&buf, "change", epoch, rec.n, rec.data)
			}
		}
		h.mu.Unlock()
		var data []byte
		if snap != nil {
			sort.Slice(snap.Tasks, func(i, j int) bool { return snap.Tasks[i].ID > snap.Tasks[j].ID })
			var err error
			if data, err = json.Marshal(snap); err != nil {
				return
			}
			writeEventHead(&buf, "snapshot", epoch, n)
		}
		if buf.Len() > 0 {
			if !h.write(w, rc, buf.Bytes(), data, eventEnd(data)) {
				return
			}
			if buf.Cap() > maxKeptBuffer {
				buf = bytes.Buffer{}
			} else {
				buf.Reset()
			}
		}
		if ended {
			return
		}
		select {
		case <-wake:
		case <-heartbeat.C:
			if sess != nil && !h.sessions.touch(sess) {
				return
			}
			buf.WriteString(": heartbeat\n\n")
		case <-gone:
			return
		case <-r.Context().Done():
			return
		case <-h.stop:
			return
		}
	}
}

// maxKeptBuffer is the largest buffer an event stream keeps between writes.
const maxKeptBuffer = 64 << 10

// write sends ps and flushes them within the write timeout (10 s); false when the client
// is gone.
func (h *Handler) write(w http.ResponseWriter, rc *http.ResponseController, ps ...[]byte) bool {
	if err := rc.SetWriteDeadline(time.Now().Add(h.cfg.writeTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return false
	}
	for _, p := range ps {
		if len(p) == 0 {
			continue
		}
		if _, err := w.Write(p); err != nil {
			h.cfg.logger.Debug("dashboard: event stream ended", "err", err)
			return false
		}
	}
	if err := rc.Flush(); err != nil {
		if errors.Is(err, http.ErrNotSupported) {
			h.cfg.logger.Error("dashboard: the ResponseWriter cannot flush; event streams will not work")
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
