package leanserver

import (
	"context"
	"fmt"
	"iter"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/asyncagents/asyncagents/opencode"
)

// emit sends an event to every stream.
func (s *Server) emit(typ string, props []byte) { s.emitMarked(typ, props, nil) }

// emitMarked sends an event to every stream; when mark is set, the stream records in it when
// the event was read.
func (s *Server) emitMarked(typ string, props []byte, mark *session) {
	if s.served {
		mark = nil // the Manager's side marks its read (MarkRead)
	}
	ev := event{Event: opencode.Event{Directory: Directory, Type: typ, Properties: props}, mark: mark}
	s.mu.RLock()
	if s.served {
		s.sent.Add(int64(len(s.streams)))
	}
	for _, st := range s.streams {
		st.push(ev)
	}
	s.mu.RUnlock()
}

type event struct {
	opencode.Event
	mark *session
}

// MarkRead records that the idle of session id's last run was read now, as a stream does
// itself unless the server is [Served].
func (s *Server) MarkRead(id string) {
	s.mu.RLock()
	ss := s.sessions[id]
	s.mu.RUnlock()
	if ss != nil {
		ss.readAt.Store(int64(time.Since(epoch)))
	}
}

// Phases returns, for the last run end of session id, when its idle was read from a stream
// (or marked by [Server.MarkRead]) and when the session's messages were first read after
// it; each is zero until then.
func (s *Server) Phases(id string) (read, msgs time.Time) {
	ss, err := s.lookup(id)
	if err != nil {
		return
	}
	defer ss.mu.Unlock()
	if ns := ss.readAt.Load(); ns != 0 {
		read = epoch.Add(time.Duration(ns))
	}
	return read, ss.msgsAt
}

func statusProps(id, typ string) []byte {
	return []byte(`{"sessionID":"` + id + `","status":{"type":"` + typ + `"}}`)
}

// sessionProps returns the properties of a session.* event of ss, as of now. Only the
// updated time changes: the rest is built once.
func sessionProps(ss *session) []byte {
	if ss.props[0] == nil {
		ss.props = sessionPropsParts(&ss.info)
	}
	pre, post := ss.props[0], ss.props[1]
	b := make([]byte, 0, len(pre)+len(post)+13)
	b = append(b, pre...)
	b = strconv.AppendInt(b, time.Now().UnixMilli(), 10)
	return append(b, post...)
}

func sessionPropsParts(i *opencode.Session) [2][]byte {
	b := make([]byte, 0, 560)
	b = append(b, `{"sessionID":"`...)
	b = append(b, i.ID...)
	b = append(b, `","info":{"id":"`...)
	b = append(b, i.ID...)
	b = append(b, `","slug":"`...)
	b = append(b, i.Slug...)
	b = append(b, `","projectID":"global","directory":"`+Directory+`","path":"bench/project"`...)
	if i.ParentID != "" {
		b = append(b, `,"parentID":"`...)
		b = append(b, i.ParentID...)
		b = append(b, '"')
	}
	b = append(b, `,"title":`...)
	b = appendQuote(b, i.Title)
	b = append(b, `,"version":"1.18.33","summary":{"additions":0,"deletions":0,"files":0},"time":{"created":`...)
	b = strconv.AppendInt(b, i.Time.Created, 10)
	b = append(b, `,"updated":`...)
	a := make([]byte, 0, 64)
	a = append(a, `},"permission":[`...)
	for k, r := range i.Permission {
		if k > 0 {
			a = append(a, ',')
		}
		a = append(a, `{"permission":`...)
		a = appendQuote(a, r.Permission)
		a = append(a, `,"pattern":`...)
		a = appendQuote(a, r.Pattern)
		a = append(a, `,"action":`...)
		a = appendQuote(a, r.Action)
		a = append(a, '}')
	}
	return [2][]byte{b, append(a, "]}}"...)}
}

// appendQuote appends s quoted as strconv.AppendQuote does (and as JSON reads it, for the
// texts these events carry), without its cost for printable text with quotes and newlines:
// the runs between the bytes to escape are appended whole.
func appendQuote(b []byte, s string) []byte {
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c < ' ' && c != '\n' || c == 0x7f {
				return strconv.AppendQuote(b, s)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError || !strconv.IsPrint(r) {
			return strconv.AppendQuote(b, s)
		}
		i += n
	}
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		var esc byte
		switch s[i] {
		case '"', '\\':
			esc = s[i]
		case '\n':
			esc = 'n'
		default:
			continue
		}
		b = append(b, s[start:i]...)
		b = append(b, '\\', esc)
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

func messageProps(i opencode.MessageInfo) []byte {
	b := make([]byte, 0, 500)
	b = append(b, `{"sessionID":"`...)
	b = append(b, i.SessionID...)
	b = append(b, `","info":{"id":"`...)
	b = append(b, i.ID...)
	b = append(b, `","sessionID":"`...)
	b = append(b, i.SessionID...)
	b = append(b, `","role":"`...)
	b = append(b, i.Role...)
	b = append(b, `","time":{"created":`...)
	b = strconv.AppendInt(b, i.Time.Created, 10)
	if i.Time.Completed != 0 {
		b = append(b, `,"completed":`...)
		b = strconv.AppendInt(b, i.Time.Completed, 10)
	}
	b = append(b, '}')
	if i.Role == opencode.RoleAssistant {
		b = append(b, `,"parentID":"`...)
		b = append(b, i.ParentID...)
		b = append(b, `","modelID":"m1","providerID":"scripted","mode":"general","agent":"general","path":{"cwd":"`+Directory+`","root":"/"},"cost":0,"tokens":{"total":120,"input":100,"output":20,"reasoning":0,"cache":{"read":0,"write":0}}`...)
		if i.Finish != "" {
			b = append(b, `,"finish":"`...)
			b = append(b, i.Finish...)
			b = append(b, '"')
		}
	} else {
		b = append(b, `,"summary":{"diffs":[]},"agent":"general","model":{"providerID":"scripted","modelID":"m1"}`...)
	}
	return append(b, "}}"...)
}

// partProps returns the properties of a message.part.updated event of p; for an assistant's
// text part, times are its time.start and, once the text is whole, its time.end.
func partProps(p opencode.Part, times ...int64) []byte {
	b := make([]byte, 0, 360+len(p.Text)+len(p.Text)/8)
	b = append(b, `{"sessionID":"`...)
	b = append(b, p.SessionID...)
	b = append(b, `","part":{"id":"`...)
	b = append(b, p.ID...)
	b = append(b, `","sessionID":"`...)
	b = append(b, p.SessionID...)
	b = append(b, `","messageID":"`...)
	b = append(b, p.MessageID...)
	b = append(b, `","type":"`...)
	b = append(b, p.Type...)
	b = append(b, '"')
	switch p.Type {
	case opencode.PartText:
		b = append(b, `,"text":`...)
		b = appendQuote(b, p.Text)
		if p.Synthetic {
			b = append(b, `,"synthetic":true`...)
		}
		if len(times) > 0 { // an assistant's text: its start, and its end once whole
			b = append(b, `,"time":{"start":`...)
			b = strconv.AppendInt(b, times[0], 10)
			if len(times) > 1 {
				b = append(b, `,"end":`...)
				b = strconv.AppendInt(b, times[1], 10)
			}
			b = append(b, '}')
		}
	case opencode.PartStepFinish:
		b = append(b, `,"reason":"stop","tokens":{"total":120,"input":100,"output":20,"reasoning":0,"cache":{"read":0,"write":0}},"cost":0`...)
	}
	b = append(b, `},"time":`...)
	b = strconv.AppendInt(b, time.Now().UnixMilli(), 10)
	return append(b, '}')
}

// stream is Server's opencode.EventStream: a queue the server appends to, read by
// one goroutine a batch at a time.
type stream struct {
	srv  *Server
	ctx  context.Context
	wake chan struct{}

	unread atomic.Int64 // events pushed and not yet handled by the reader

	mu     sync.Mutex
	queue  [][]event // chunks of chunkSize events, oldest first
	free   [][]event // empty chunks, at most freeChunks
	closed bool
}

// The queue of a stream grows by chunks, so a reader that falls behind in a burst costs
// no copying; a few empty chunks are kept for the next events (no more: the stream goes away
// with the Manager, and its memory is not the Manager's).
const (
	chunkSize  = 256
	freeChunks = 2
)

func (st *stream) push(ev event) {
	st.mu.Lock()
	if !st.closed {
		n := len(st.queue)
		if n == 0 || len(st.queue[n-1]) == chunkSize {
			var c []event
			if k := len(st.free); k > 0 {
				c, st.free = st.free[k-1], st.free[:k-1]
			} else {
				c = make([]event, 0, chunkSize)
			}
			st.queue = append(st.queue, c)
			n++
		}
		st.queue[n-1] = append(st.queue[n-1], ev)
		st.unread.Add(1)
	}
	st.mu.Unlock()
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

// close ends the stream; the server's lock is held or the server is done with st.
func (st *stream) close() {
	st.mu.Lock()
	st.closed = true
	st.queue, st.free = nil, nil
	st.mu.Unlock()
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

func (st *stream) All() iter.Seq2[opencode.Event, error] {
	return func(yield func(opencode.Event, error) bool) {
		var batch [][]event
		for {
			st.mu.Lock()
			closed := st.closed
			batch, st.queue = st.queue, batch[:0]
			st.mu.Unlock()
			if closed {
				yield(opencode.Event{}, fmt.Errorf("leanserver: event stream: %w", net.ErrClosed))
				return
			}
			for _, chunk := range batch {
				for _, ev := range chunk {
					if ev.mark != nil {
						ev.mark.readAt.Store(int64(time.Since(epoch)))
					}
					ok := yield(ev.Event, nil)
					st.unread.Add(-1)
					if !ok {
						return
					}
				}
			}
			more := len(batch) > 0
			st.mu.Lock()
			for i, chunk := range batch {
				if len(st.free) < freeChunks && !st.closed {
					clear(chunk)
					st.free = append(st.free, chunk[:0])
				}
				batch[i] = nil
			}
			st.mu.Unlock()
			if cap(batch) > freeChunks {
				batch = nil
			}
			if more {
				continue
			}
			select {
			case <-st.wake:
			case <-st.ctx.Done():
				yield(opencode.Event{}, fmt.Errorf("leanserver: event stream: %w", context.Cause(st.ctx)))
				return
			}
		}
	}
}

func (st *stream) Close() error {
	st.srv.mu.Lock()
	st.srv.streams = slices.DeleteFunc(st.srv.streams, func(o *stream) bool { return o == st })
	st.srv.mu.Unlock()
	st.close()
	return nil
}
