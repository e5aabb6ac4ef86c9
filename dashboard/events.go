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
	h.streams.Add(1)
	h.mu.Unlock()
	defer h.streams.Done()

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
		if snap != nil {
			sort.Slice(snap.Tasks, func(i, j int) bool { return snap.Tasks[i].ID > snap.Tasks[j].ID })
			data, err := json.Marshal(snap)
			if err != nil {
				return
			}
			writeEvent(&buf, "snapshot", epoch, n, data)
		}
		if buf.Len() > 0 {
			if !h.write(w, rc, buf.Bytes()) {
				return
			}
			buf.Reset()
		}
		if ended {
			return
		}
		select {
		case <-wake:
		case <-heartbeat.C:
			buf.WriteString(": heartbeat\n\n")
		case <-r.Context().Done():
			return
		case <-h.stop:
			return
		}
	}
}

// write sends p and flushes it within the write timeout (10 s); false when the client is gone.
func (h *Handler) write(w http.ResponseWriter, rc *http.ResponseController, p []byte) bool {
	if err := rc.SetWriteDeadline(time.Now().Add(h.cfg.writeTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return false
	}
	if _, err := w.Write(p); err != nil {
		h.cfg.logger.Debug("dashboard: event stream ended", "err", err)
		return false
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
	buf.WriteString("id: ")
	buf.WriteString(eventID(epoch, n))
	buf.WriteString("\nevent: ")
	buf.WriteString(name)
	buf.WriteString("\ndata: ")
	buf.Write(data)
	buf.WriteString("\n\n")
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
