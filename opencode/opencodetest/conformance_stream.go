package opencodetest

import (
	"bytes"
	"context"
	"errors"
	"net"

	"github.com/asyncagents/asyncagents/opencode"
)

// checkEventStream checks the [opencode.EventStream] contract: every open stream carries an
// event, with its Directory; an event's properties do not change while later events are
// read; Close is idempotent and ends the range with an error matching net.ErrClosed, after
// which it yields nothing; cancelling the context of Events ends the range with
// context.Canceled.
func checkEventStream(k *checker) {
	a, b := k.subscribe(), k.subscribe()
	s := k.session(opencode.CreateSessionRequest{Title: "conformance events"})
	if s == nil || a == nil || b == nil {
		return
	}
	var created opencode.Event
	for _, r := range []*eventReader{a, b} {
		evs := r.until(s.ID, "session.created", isType(opencode.EventSessionCreated))
		if len(evs) != 1 || evs[0].Directory != k.h.Directory {
			k.errorf("events %s: every stream should carry session.created first, with directory %s", types(evs), k.h.Directory)
			return
		}
		created = evs[0].Event
	}
	kept := bytes.Clone(created.Properties)
	if s2 := k.session(opencode.CreateSessionRequest{Title: "conformance events, later"}); s2 != nil {
		b.until(s2.ID, "session.created", isType(opencode.EventSessionCreated))
		if !bytes.Equal(created.Properties, kept) {
			k.errorf("the properties of an event changed while later events were read: %.200s, were %.200s", created.Properties, kept)
		}
	}
	checkStreamClose(k, a)
	checkStreamCancel(k)
}

// checkStreamClose closes r's stream twice and reads it on.
func checkStreamClose(k *checker, r *eventReader) {
	if err := r.stream.Close(); err != nil {
		k.errorf("Close = %v", err)
	}
	if err := r.stream.Close(); err != nil {
		k.errorf("second Close = %v", err)
	}
	if _, err, ok := r.next(); !ok || !errors.Is(err, net.ErrClosed) {
		k.errorf("range after Close ended with %v (%v), want an error matching net.ErrClosed", err, ok)
	}
	if _, err, ok := r.next(); ok {
		k.errorf("range after its final error yielded %v", err)
	}
}

// checkStreamCancel opens a stream and cancels its context once server.connected arrived.
func checkStreamCancel(k *checker) {
	ctx, cancel := context.WithCancel(k.ctx)
	defer cancel()
	st, err := k.c.Events(ctx)
	if !k.ok(err, "Events") {
		return
	}
	defer st.Close()
	for ev, err := range st.All() {
		if err == nil {
			if ev.Type == opencode.EventServerConnected {
				cancel()
			}
			continue
		}
		if !errors.Is(err, context.Canceled) {
			k.errorf("range after the context was cancelled ended with %v, want context.Canceled", err)
		}
	}
}
