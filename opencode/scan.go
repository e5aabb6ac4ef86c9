package opencode

import "bytes"

// OpenCode's events, read without a decode. A Manager reads every event of the server; most
// are of sessions it does not follow, and the few fields it needs to tell are found here by
// scanning the properties as OpenCode 1.18.33 writes them. Each returns "not found" for any
// other shape, and the caller decodes then.

// LeadingSessionID returns the session id OpenCode writes first in an event's properties
// ({"sessionID":"ses_…",…}), without a copy; nil for any other shape (then
// [Event.SessionID] decodes).
func LeadingSessionID(props []byte) []byte {
	const lead = `{"sessionID":"`
	if rest, ok := bytes.CutPrefix(props, []byte(lead)); ok {
		if i := bytes.IndexByte(rest, '"'); i > 0 && bytes.IndexByte(rest[:i], '\\') < 0 {
			return rest[:i]
		}
	}
	return nil
}

// LeadingInfoID returns the message id of a message.updated event when OpenCode writes it
// right after the session id ({"sessionID":"ses_…","info":{"id":"msg_…",…}), without a copy;
// nil for any other shape (OpenCode writes some with the role first: then decode).
func LeadingInfoID(props []byte) []byte { return leadingID(props, `","info":{"id":"`) }

// LeadingPartID returns the part id of a message.part.updated event when OpenCode writes it
// right after the session id ({"sessionID":"ses_…","part":{"id":"prt_…",…}), without a copy;
// nil for any other shape (OpenCode writes a prompt's parts with the type first: then decode).
func LeadingPartID(props []byte) []byte { return leadingID(props, `","part":{"id":"`) }

// leadingID returns the id that follows the leading session id and then mid.
func leadingID(props []byte, mid string) []byte {
	sid := LeadingSessionID(props)
	if sid == nil {
		return nil
	}
	rest, ok := bytes.CutPrefix(props[len(`{"sessionID":"`)+len(sid):], []byte(mid))
	if !ok {
		return nil
	}
	if i := bytes.IndexByte(rest, '"'); i > 0 && bytes.IndexByte(rest[:i], '\\') < 0 {
		return rest[:i]
	}
	return nil
}

// BareStatusType returns the type of a session.status event's status when the status has no
// other field, as OpenCode writes busy and idle ({"sessionID":…,"status":{"type":"idle"}});
// ok is false for any other shape (a retry, with its message), which must be decoded.
func BareStatusType(props []byte) (typ string, ok bool) {
	const key = `,"status":{"type":"`
	i := bytes.LastIndex(props, []byte(key))
	if i < 0 {
		return "", false
	}
	rest := props[i+len(key):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 || string(rest[j:]) != `"}}` {
		return "", false
	}
	switch string(rest[:j]) {
	case "idle":
		return "idle", true
	case "busy":
		return "busy", true
	}
	return "", false
}

// PartTypes reports whether the properties of a message.part.updated event hold
// "type":"tool", and "type":"text" or "type":"reasoning" (the parts that stream), at any
// depth, without a decode: a part that is neither needs no decoding to be skipped.
func PartTypes(props []byte) (tool, streamed bool) {
	const key = `"type":"`
	for i := bytes.Index(props, []byte(key)); i >= 0; {
		rest := props[i+len(key):]
		switch {
		case bytes.HasPrefix(rest, []byte(`tool"`)):
			tool = true
		case bytes.HasPrefix(rest, []byte(`text"`)), bytes.HasPrefix(rest, []byte(`reasoning"`)):
			streamed = true
		}
		j := bytes.Index(rest, []byte(key))
		if j < 0 {
			break
		}
		i += len(key) + j
	}
	return tool, streamed
}
