package opencodetest

import (
	"fmt"
	"iter"
	"strings"
	"time"

	"github.com/asyncagents/asyncagents/opencode"
)

// eventReader reads one stream with iter.Pull2, so several waits share one range over All.
type eventReader struct {
	k      *checker
	stream opencode.EventStream
	next   func() (opencode.Event, error, bool)
	stop   func()
	err    error
}

// probeSession is the unknown session whose aborts subscribe uses as a probe.
const probeSession = "ses_zzzzzzzzzzzzzzzzzzzzzprobe"

// subscribe opens a stream, consumes its first event, which must be server.connected, and
// returns once the stream delivers events. OpenCode 1.18.33 sends server.connected before a
// /global/event subscription is live: events of the next few tens of milliseconds can be
// lost. So subscribe aborts an unknown session every 50 ms (which emits session.idle for it)
// until one of those events arrives.
func (k *checker) subscribe() *eventReader {
	st, err := k.c.Events(k.ctx)
	if !k.ok(err, "Events") {
		return nil
	}
	r := &eventReader{k: k, stream: st}
	r.next, r.stop = iter.Pull2(st.All())
	k.streams = append(k.streams, r)
	if ev, err, ok := r.next(); !ok || err != nil || ev.Type != opencode.EventServerConnected {
		k.errorf("first event = %q (%v), want %s", ev.Type, err, opencode.EventServerConnected)
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			_ = k.c.Abort(k.ctx, probeSession)
			select {
			case <-tick.C:
			case <-stop:
				return
			case <-k.ctx.Done():
				return
			}
		}
	}()
	r.until(probeSession, "the stream to deliver events", isType(opencode.EventSessionIdle))
	close(stop)
	<-done
	return r
}

func (k *checker) closeStreams() {
	for _, r := range k.streams {
		r.stream.Close()
		r.stop()
	}
}

type sessionEv struct {
	opencode.Event
	p opencode.EventProperties
}

// until returns the events of sessionID up to and including the first for which stop
// reports true. It records a violation when the stream ends first.
func (r *eventReader) until(sessionID, what string, stop func(sessionEv) bool) []sessionEv {
	var got []sessionEv
	if r == nil || r.err != nil {
		return nil
	}
	for {
		ev, err, ok := r.next()
		if !ok || err != nil {
			r.err = err
			r.k.errorf("waiting for %s: stream ended: %v (after %s)", what, err, types(got))
			return got
		}
		p, err := ev.Decode()
		if err != nil || p.SessionID != sessionID {
			continue
		}
		got = append(got, sessionEv{ev, p})
		if stop(got[len(got)-1]) {
			return got
		}
	}
}

// idles waits for the n-th session.idle of sessionID.
func (r *eventReader) idles(sessionID string, n int) []sessionEv {
	seen := 0
	return r.until(sessionID, fmt.Sprintf("session.idle #%d", n), func(e sessionEv) bool {
		if e.Type == opencode.EventSessionIdle {
			seen++
		}
		return seen == n
	})
}

// streaming returns the events of sessionID up to the first update of the text part its
// assistant message streams.
func (r *eventReader) streaming(sessionID string) []sessionEv {
	var asst string
	return r.until(sessionID, "the streamed text part", func(e sessionEv) bool {
		if i, ok := e.info(); ok && i.Role == opencode.RoleAssistant {
			asst = i.ID
		}
		return e.Type == opencode.EventMessagePartUpdate && e.p.Part != nil && e.p.Part.Type == opencode.PartText &&
			asst != "" && e.p.Part.MessageID == asst
	})
}

func types(evs []sessionEv) string {
	var b []string
	for _, e := range evs {
		t := e.Type
		if e.p.Status != nil {
			t += ":" + e.p.Status.Type
		}
		b = append(b, t)
	}
	return "[" + strings.Join(b, " ") + "]"
}

func indexOf(evs []sessionEv, from int, match func(sessionEv) bool) int {
	for i := max(from, 0); i < len(evs); i++ {
		if match(evs[i]) {
			return i
		}
	}
	return -1
}

func isStatus(typ string) func(sessionEv) bool {
	return func(e sessionEv) bool {
		return e.Type == opencode.EventSessionStatus && e.p.Status != nil && e.p.Status.Type == typ
	}
}

func isType(typ string) func(sessionEv) bool { return func(e sessionEv) bool { return e.Type == typ } }

// isRole matches the message.updated events of messages with role.
func isRole(role string) func(sessionEv) bool {
	return func(e sessionEv) bool { i, ok := e.info(); return ok && i.Role == role }
}

// isFinish matches the message.updated events of messages that finished with finish.
func isFinish(finish string) func(sessionEv) bool {
	return func(e sessionEv) bool { i, ok := e.info(); return ok && i.Finish == finish }
}

// info decodes the message info of a message.updated event.
func (e sessionEv) info() (opencode.MessageInfo, bool) {
	var m opencode.Message
	if e.Type != opencode.EventMessageUpdated || decodeJSON(e.p.Info, &m.Info) != nil {
		return opencode.MessageInfo{}, false
	}
	return m.Info, true
}
