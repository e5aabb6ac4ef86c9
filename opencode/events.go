package opencode

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/asyncagents/asyncagents/internal/scan"
	sse "github.com/tmaxmax/go-sse"
)

// Event types (Event.Type) of OpenCode's stream. The stream carries more; they are delivered
// too.
const (
	EventServerConnected    = "server.connected" // first event of every stream
	EventServerHeartbeat    = "server.heartbeat" // every 10 s
	EventSessionCreated     = "session.created"
	EventSessionUpdated     = "session.updated"
	EventSessionDeleted     = "session.deleted"
	EventSessionStatus      = "session.status" // busy, retry or idle
	EventSessionIdle        = "session.idle"
	EventSessionError       = "session.error"
	EventSessionCompacted   = "session.compacted"
	EventMessageUpdated     = "message.updated"
	EventMessageRemoved     = "message.removed" // {sessionID, messageID}
	EventMessagePartUpdate  = "message.part.updated"
	EventMessagePartDelta   = "message.part.delta" // streamed text: {messageID, partID, field, delta}
	EventMessagePartRemoved = "message.part.removed"
	EventPermissionAsked    = "permission.asked"
	EventPermissionReplied  = "permission.replied"
)

// ErrStreamStalled ends an [EventStream] of [HTTPClient] when no frame (not even
// server.heartbeat, which OpenCode sends every 10 s) arrived within the stall timeout; the
// connection is closed and a new stream should be opened.
var ErrStreamStalled = errors.New("opencode: event stream stalled")

// Event is one event of the stream. Directory names the instance it came from (empty for
// server.* events). Properties is kept as received: [HTTPClient] reads the frame's envelope
// and leaves the properties' bytes unchecked, so they are validated where they are decoded
// ([Event.Decode], or json.Unmarshal of a shape of one's own).
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

// SessionID returns the session an event is about — properties.sessionID, or the
// sessionID of properties.part or properties.info — without decoding the rest, so a
// subscriber can drop the events of other sessions cheaply. It returns "" when there is none.
func (e *Event) SessionID() string {
	if sid := scan.LeadingSessionID(e.Properties); sid != nil { // OpenCode writes it first
		return string(sid)
	}
	var p struct {
		SessionID string `json:"sessionID"`
		Part      struct {
			SessionID string `json:"sessionID"`
		} `json:"part"`
		Info struct {
			SessionID string `json:"sessionID"`
		} `json:"info"`
	}
	if len(e.Properties) == 0 || json.Unmarshal(e.Properties, &p) != nil {
		return ""
	}
	switch {
	case p.SessionID != "":
		return p.SessionID
	case p.Part.SessionID != "":
		return p.Part.SessionID
	}
	return p.Info.SessionID
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

// EventStream is a subscription to the server's events, opened by [Client.Events].
//
// One goroutine ranges over All, once. The range yields events in the order the server sent
// them and ends with exactly one error, after which it yields nothing more:
//
//   - [io.EOF] when the server closed the stream;
//   - [ErrStreamStalled] when the stream was silent for longer than its stall timeout;
//   - an error matching [net.ErrClosed] after Close;
//   - an error matching the context's error when the context passed to Events was cancelled;
//   - otherwise the read error.
//
// A consumer that stops the range early gets no error. Close may be called from any goroutine,
// any number of times; it ends a range in progress and releases the connection.
//
// The events yielded are the consumer's: a stream does not change an event's Properties
// afterwards (it does not reuse their bytes for a later event), so a consumer may keep them
// without a copy.
type EventStream interface {
	All() iter.Seq2[Event, error]
	Close() error
}

// sseStream is the EventStream of HTTPClient: Server-Sent Events read from GET /global/event.
type sseStream struct {
	body   io.ReadCloser
	ctx    context.Context // the caller's context, to report its cancellation
	cancel context.CancelFunc
	stall  time.Duration
	opened time.Time    // when the stream opened: the clock of last
	last   atomic.Int64 // when the last frame was read, in nanoseconds since opened

	mu      sync.Mutex
	timer   *time.Timer // fires when the stream may have stalled: see checkStall
	stalled bool
	closed  bool
}

// readBuffer is how much of the stream one read takes from the connection: a burst of
// frames costs a read per 64 KiB, not one per 4 KiB as go-sse's own buffer would.
const readBuffer = 64 << 10

// Events opens the server-wide event stream (GET /global/event), which carries the events of
// every directory instance; [Event.Directory] names the instance. The first event is
// server.connected. The stream follows the [EventStream] contract and ends with
// [ErrStreamStalled] after the client's stall timeout without a frame (see
// [WithStallTimeout]). Opening it fails with an [*APIError] for a non-200 answer.
//
// OpenCode 1.18.33 sends server.connected before the subscription is live: events of the next
// few tens of milliseconds can be missed. Read the state that matters (GET /session/status,
// the messages) after subscribing, or wait for an event you caused (Abort of an unknown
// session id emits session.idle for it) before relying on the stream.
func (c *HTTPClient) Events(ctx context.Context) (EventStream, error) {
	sctx, cancel := context.WithCancel(ctx)
	req, err := c.newRequest(sctx, http.MethodGet, "/global/event", nil, nil)
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
	s := &sseStream{body: resp.Body, ctx: ctx, cancel: cancel, stall: c.stall, opened: time.Now()}
	s.mu.Lock()
	s.timer = time.AfterFunc(c.stall, s.checkStall)
	s.mu.Unlock()
	return s, nil
}

// checkStall ends the stream when no frame came for the stall timeout, and otherwise sets
// the timer for when that would be: a frame costs a clock read, not a timer reset.
func (s *sseStream) checkStall() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.stalled {
		return
	}
	if left := s.stall - (time.Since(s.opened) - time.Duration(s.last.Load())); left > 0 {
		s.timer.Reset(left)
		return
	}
	s.stalled = true
	s.cancel()
}

// All yields the stream's events, skipping OpenCode's "sync" frames and frames whose envelope
// is not JSON; see [EventStream] for how it ends.
func (s *sseStream) All() iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		dir := "" // the last frame's directory, shared by the next frames that name it
		body := bufio.NewReaderSize(s.body, readBuffer)
		for raw, err := range sse.Read(body, &sse.ReadConfig{MaxEventSize: maxEventSize}) {
			if err != nil || s.ended() {
				yield(Event{}, s.endError(err))
				return
			}
			s.last.Store(int64(time.Since(s.opened)))
			// go-sse builds each event's data in a strings.Builder of its own, which it drops
			// once the event is yielded: nothing writes those bytes again, so the event's
			// properties keep them without a copy.
			ev, skip, err := decodeFrame(unsafe.Slice(unsafe.StringData(raw.Data), len(raw.Data)), dir)
			if err != nil || skip {
				continue
			}
			dir = ev.Directory
			if !yield(ev, nil) {
				return
			}
		}
		yield(Event{}, s.endError(io.EOF))
	}
}

// ended reports whether the stream was closed or stalled while a frame was being read.
func (s *sseStream) ended() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed || s.stalled
}

// endError names why the stream ended: Close and a stall take precedence over what the read
// returned (a closed body or a cancelled request), then the caller's cancelled context.
func (s *sseStream) endError(readErr error) error {
	s.mu.Lock()
	closed, stalled := s.closed, s.stalled
	s.mu.Unlock()
	switch {
	case closed:
		return fmt.Errorf("opencode: event stream: %w", net.ErrClosed)
	case stalled:
		return ErrStreamStalled
	case s.ctx.Err() != nil:
		return fmt.Errorf("opencode: event stream: %w", context.Cause(s.ctx))
	case readErr == nil || errors.Is(readErr, io.EOF):
		return io.EOF
	}
	return fmt.Errorf("opencode: event stream: %w", readErr)
}

// Close ends the stream and releases the connection. It is idempotent.
func (s *sseStream) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.timer.Stop()
	s.mu.Unlock()
	s.cancel()
	return s.body.Close()
}

// decodeFrame decodes one data payload of /global/event ({"directory", "payload": Event})
// or of /event (a bare Event) in one pass; the properties stay raw. skip is true for frames
// that carry no event of interest.
func decodeFrame(data []byte, lastDir string) (ev Event, skip bool, err error) {
	if len(data) == 0 {
		return Event{}, true, nil
	}
	ev, ok := scanFrame(data, lastDir)
	if !ok {
		if ev, err = decodeFrameJSON(data); err != nil {
			return Event{}, false, err
		}
	}
	return ev, ev.Type == "" || ev.Type == "sync", nil
}

// decodeFrameJSON decodes a frame of any shape with encoding/json.
func decodeFrameJSON(data []byte) (Event, error) {
	var f struct {
		Directory string `json:"directory"`
		Payload   *Event `json:"payload"`
		Event
	}
	if err := json.Unmarshal(data, &f); err != nil {
		return Event{}, fmt.Errorf("opencode: event frame: %w", err)
	}
	ev := f.Event
	if f.Payload != nil {
		ev = *f.Payload
	}
	ev.Directory = f.Directory
	return ev, nil
}

// scanFrame reads a /global/event frame in the shape OpenCode 1.18.33 writes it,
// {"directory":…,"project":…,"payload":{"id":…,"type":…,"properties":…}} ("project" and "id"
// optional), without encoding/json's reflection: the event loop reads every frame of the
// server, and a decode was most of its cost. The envelope is read in full; the properties are
// delimited by matching their brackets (strings skipped) and must be followed by the
// envelope's closing braces alone, but their contents are checked only when they are decoded
// (a full validation here was a third of the reader's cost); the readers of scan.go, which
// take a few fields without a decode, trust the server to write JSON. ok is false for any other shape or for strings with escapes or
// non-ASCII bytes, which decodeFrame then decodes. The event's type and directory are taken
// without a copy when they are one of this package's types and lastDir (the previous frame's
// directory).
func scanFrame(data []byte, lastDir string) (ev Event, ok bool) {
	rest, ok := bytes.CutPrefix(data, []byte(`{"directory":`))
	if !ok {
		return Event{}, false
	}
	var dir []byte
	if dir, rest, ok = scan.String(rest); !ok {
		return Event{}, false
	}
	if r, found := bytes.CutPrefix(rest, []byte(`,"project":`)); found {
		if _, rest, ok = scan.String(r); !ok {
			return Event{}, false
		}
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(`,"payload":{`)); !ok {
		return Event{}, false
	}
	var id []byte
	if r, found := bytes.CutPrefix(rest, []byte(`"id":`)); found {
		if id, r, ok = scan.String(r); !ok {
			return Event{}, false
		}
		if rest, ok = bytes.CutPrefix(r, []byte(`,`)); !ok {
			return Event{}, false
		}
	}
	var typ []byte
	if rest, ok = bytes.CutPrefix(rest, []byte(`"type":`)); !ok {
		return Event{}, false
	}
	if typ, rest, ok = scan.String(rest); !ok {
		return Event{}, false
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(`,"properties":`)); !ok {
		return Event{}, false
	}
	n := scan.ValueLen(rest)
	if n < 0 || string(rest[n:]) != `}}` {
		return Event{}, false
	}
	props := rest[:n]
	return Event{ID: string(id), Directory: str(dir, lastDir), Type: str(typ, eventTypes[string(typ)]), Properties: props[:len(props):len(props)]}, true
}

// eventTypes maps each event type of this package to itself, so that a frame's type is
// taken without an allocation (a map index by a converted []byte does not copy).
var eventTypes = map[string]string{}

func init() {
	for _, t := range []string{EventServerConnected, EventServerHeartbeat, EventSessionCreated, EventSessionUpdated,
		EventSessionDeleted, EventSessionStatus, EventSessionIdle, EventSessionError, EventSessionCompacted,
		EventMessageUpdated, EventMessageRemoved, EventMessagePartUpdate, EventMessagePartDelta,
		EventMessagePartRemoved, EventPermissionAsked, EventPermissionReplied, "session.diff", "sync"} {
		eventTypes[t] = t
	}
}

// str returns b as a string: same when b spells it (no allocation), else a copy.
func str(b []byte, same string) string {
	if string(b) == same {
		return same
	}
	return string(b)
}
