package opencode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"sync"
	"time"

	sse "github.com/tmaxmax/go-sse"
)

// Event types the Manager reacts to. The stream carries many more; they are delivered too.
const (
	EventServerConnected   = "server.connected"
	EventServerHeartbeat   = "server.heartbeat"
	EventSessionStatus     = "session.status"
	EventSessionIdle       = "session.idle"
	EventSessionError      = "session.error"
	EventSessionDeleted    = "session.deleted"
	EventSessionCompacted  = "session.compacted"
	EventMessageUpdated    = "message.updated"
	EventMessagePartUpdate = "message.part.updated"
	EventPermissionAsked   = "permission.asked"
	EventPermissionReplied = "permission.replied"
)

// ErrStreamStalled is returned by EventStream.Next when no frame (not even a heartbeat)
// arrived within the stall timeout; the connection is closed and should be re-opened.
var ErrStreamStalled = errors.New("opencode: event stream stalled")

// Event is one event of the stream. Directory names the instance it came from (empty for
// server.* events). Properties is kept as received; the accessors decode common shapes.
type Event struct {
	ID         string          `json:"id,omitempty"`
	Directory  string          `json:"-"`
	Type       string          `json:"type"`
	Properties json.RawMessage `json:"properties,omitempty"`
}

// EventProperties holds the fields that session, message and permission events share.
// Which are set depends on the event type.
type EventProperties struct {
	SessionID string          `json:"sessionID"`
	Status    *SessionStatus  `json:"status,omitempty"` // session.status
	Error     *Error          `json:"error,omitempty"`  // session.error
	Part      *Part           `json:"part,omitempty"`   // message.part.updated
	Info      json.RawMessage `json:"info,omitempty"`   // message.updated, session.*
	// permission.asked
	ID         string   `json:"id,omitempty"`
	Permission string   `json:"permission,omitempty"`
	Patterns   []string `json:"patterns,omitempty"`
}

// Decode decodes the event's properties.
func (e *Event) Decode() (EventProperties, error) {
	var p EventProperties
	if len(e.Properties) == 0 {
		return p, nil
	}
	if err := json.Unmarshal(e.Properties, &p); err != nil {
		return p, fmt.Errorf("opencode: decode %s event: %w", e.Type, err)
	}
	return p, nil
}

// maxEventSize bounds one SSE frame. Part updates carry whole tool outputs (OpenCode keeps
// up to 50 KB of output plus a 30,000-character preview), so the bound is generous.
const maxEventSize = 32 << 20

// EventStream reads events from GET /global/event. One goroutine ranges over All; Close may
// be called from any goroutine and ends that range.
type EventStream struct {
	body   io.ReadCloser
	cancel context.CancelFunc
	timer  *time.Timer
	stall  time.Duration

	mu      sync.Mutex
	stalled bool
	closed  bool
}

// Events opens the server-wide event stream (GET /global/event), which carries the events of
// every directory instance. The stream ends when ctx is cancelled or Close is called; it
// fails with ErrStreamStalled after the client's stall timeout without a frame.
func (c *HTTPClient) Events(ctx context.Context) (*EventStream, error) {
	ctx, cancel := context.WithCancel(ctx)
	req, err := c.newRequest(ctx, http.MethodGet, "/global/event", nil, nil)
	if err != nil {
		cancel()
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Del("x-opencode-directory")
	resp, err := c.hc.Do(req)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("opencode: GET /global/event: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		cancel()
		return nil, newAPIError(http.MethodGet, "/global/event", resp.StatusCode, b)
	}
	s := &EventStream{body: resp.Body, cancel: cancel, stall: c.stall}
	s.timer = time.AfterFunc(c.stall, func() {
		s.mu.Lock()
		s.stalled = true
		s.mu.Unlock()
		cancel()
	})
	return s, nil
}

// All yields the stream's events in order, skipping OpenCode's "sync" frames and frames that
// are not JSON. It ends with exactly one error: io.EOF when the server closed the stream,
// ErrStreamStalled after a silence longer than the stall timeout, or the read error (a
// closed stream or a cancelled context). Range over it once.
func (s *EventStream) All() iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		for raw, err := range sse.Read(s.body, &sse.ReadConfig{MaxEventSize: maxEventSize}) {
			if s.isStalled() {
				yield(Event{}, ErrStreamStalled)
				return
			}
			if err != nil {
				yield(Event{}, fmt.Errorf("opencode: event stream: %w", err))
				return
			}
			s.timer.Reset(s.stall)
			ev, skip, err := decodeFrame([]byte(raw.Data))
			if err != nil || skip {
				continue
			}
			if !yield(ev, nil) {
				return
			}
		}
		if s.isStalled() {
			yield(Event{}, ErrStreamStalled)
			return
		}
		yield(Event{}, io.EOF)
	}
}

func (s *EventStream) isStalled() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stalled
}

// Close ends the stream and releases the connection. It is idempotent.
func (s *EventStream) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.timer.Stop()
	s.cancel()
	return s.body.Close()
}

// decodeFrame decodes one data payload of /global/event ({"directory", "payload": Event})
// or of /event (a bare Event). skip is true for frames that carry no event of interest.
func decodeFrame(data []byte) (ev Event, skip bool, err error) {
	if len(data) == 0 {
		return Event{}, true, nil
	}
	var f struct {
		Directory string          `json:"directory"`
		Payload   json.RawMessage `json:"payload"`
		Type      string          `json:"type"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		return Event{}, false, fmt.Errorf("opencode: event frame: %w", err)
	}
	body := data
	if len(f.Payload) > 0 {
		body = f.Payload
	}
	if err := json.Unmarshal(body, &ev); err != nil {
		return Event{}, false, fmt.Errorf("opencode: event frame: %w", err)
	}
	ev.Directory = f.Directory
	return ev, ev.Type == "" || ev.Type == "sync", nil
}
