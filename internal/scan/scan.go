// Package scan reads the few fields asyncagents needs from the properties of OpenCode's
// events without a decode. A Manager reads every event of the server; most are of sessions it
// does not follow, and the fields that tell are found here by scanning the properties as
// OpenCode 1.18.33 writes them. Each function returns "not found" for any other shape, and
// the caller decodes then. It is machinery of the opencode and asyncagents packages, pinned to
// one server's JSON; nothing here is safe to rely on outside them.
package scan

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
)

// LeadingSessionID returns the session id OpenCode writes first in an event's properties
// ({"sessionID":"ses_…",…}), without a copy; nil for any other shape (then
// the caller decodes).
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

// InfoFacts is what [MessageInfo] reads of a message.updated event's info.
type InfoFacts struct {
	ID, ParentID, Role, Finish string
	Completed                  int64   // time.completed, ms since the epoch; 0 when absent
	Error                      bool    // an error other than null is present: decode to read it
	Tokens                     Tokens  // tokens; zero when absent or null
	Cost                       float64 // cost, USD; 0 when absent
}

// MessageInfo reads the id, parentID, role, finish, time.completed, tokens, cost and
// whether there is an error from the properties of a message.updated event
// ({…,"info":{…},…}) by walking the
// JSON's keys and skipping the values it does not need, without a decode. ok is false for
// anything it does not read exactly as encoding/json would: whitespace between tokens, a
// string it needs with an escape or a byte outside ASCII, a key with an escape, a number that
// is not a plain integer, a repeated key it needs or one spelled in another case, no info;
// the caller decodes then. Like the other readers here, it trusts the server to write JSON. A value
// it skips is only delimited (brackets matched, strings skipped), not checked.
func MessageInfo(props []byte) (f InfoFacts, ok bool) {
	info, ok := soleObject(props, "info")
	if !ok {
		return InfoFacts{}, false
	}
	var seen keySet
	once, str := seen.once, readString
	ok = eachMember(info, func(key, val []byte) bool {
		switch string(key) {
		case "id":
			return once(1) && str(&f.ID, val)
		case "parentID":
			return once(2) && str(&f.ParentID, val)
		case "role":
			return once(4) && str(&f.Role, val)
		case "finish":
			return once(8) && str(&f.Finish, val)
		case "error":
			f.Error = string(val) != "null"
			return once(16)
		case "time":
			return once(32) && val[0] == '{' && eachMember(val, func(key, val []byte) bool {
				if string(key) != "completed" {
					return !foldsTo(key, "completed")
				}
				n, ok := scanInt(val)
				f.Completed = n
				return ok
			})
		case "tokens":
			return once(64) && scanTokens(&f.Tokens, val)
		case "cost":
			return once(128) && scanFloat(&f.Cost, val)
		}
		return !foldsTo(key, "id", "parentID", "role", "finish", "error", "time", "tokens", "cost")
	})
	if !ok {
		return InfoFacts{}, false
	}
	return f, true
}

// soleObject returns the object that is the value of name in the JSON object obj, as
// eachMember reads obj; ok is false when obj is not read whole, name is absent, repeated or
// spelled in another case too, or its value is not an object.
func soleObject(obj []byte, name string) (val []byte, ok bool) {
	if !eachMember(obj, func(key, v []byte) bool {
		if string(key) == name {
			if val != nil {
				return false
			}
			val = v
		}
		return !foldsTo(key, name)
	}) || len(val) == 0 || val[0] != '{' {
		return nil, false
	}
	return val, true
}

// keySet records which of up to 8 keys an object had, to decline one that is repeated.
type keySet uint8

// once reports whether the key of bit is seen for the first time, and records it.
func (s *keySet) once(bit uint8) bool {
	if uint8(*s)&bit != 0 {
		return false
	}
	*s |= keySet(bit)
	return true
}

// readString sets *dst to the JSON string val, which must hold nothing else; ok is false for
// one that String does not read (an escape, a byte outside ASCII).
func readString(dst *string, val []byte) bool {
	s, rest, ok := String(val)
	if !ok || len(rest) != 0 {
		return false
	}
	*dst = string(s)
	return true
}

// scanInt reads a JSON number that is a plain integer (no fraction or exponent) and fits an
// int64, as encoding/json reads one into an int64; ok is false for anything else.
func scanInt(val []byte) (n int64, ok bool) {
	if !isJSONNumber(val) {
		return 0, false
	}
	n, err := strconv.ParseInt(string(val), 10, 64) // declines a fraction or an exponent
	return n, err == nil
}

// scanTokens reads the tokens object val into t, as encoding/json would (null leaves t
// zero); ok is false for a repeated key, a key in another case or a count that is not a
// plain integer.
func scanTokens(t *Tokens, val []byte) bool {
	if string(val) == "null" {
		return true
	}
	var seen, cache keySet
	return eachMember(val, func(key, v []byte) bool {
		switch string(key) {
		case "total":
			return seen.once(1) && scanCount(&t.Total, v)
		case "input":
			return seen.once(2) && scanCount(&t.Input, v)
		case "output":
			return seen.once(4) && scanCount(&t.Output, v)
		case "reasoning":
			return seen.once(8) && scanCount(&t.Reasoning, v)
		case "cache":
			return seen.once(16) && (string(v) == "null" || eachMember(v, func(key, v []byte) bool {
				switch string(key) {
				case "read":
					return cache.once(1) && scanCount(&t.Cache.Read, v)
				case "write":
					return cache.once(2) && scanCount(&t.Cache.Write, v)
				}
				return !foldsTo(key, "read", "write")
			}))
		}
		return !foldsTo(key, "total", "input", "output", "reasoning", "cache")
	})
}

// scanCount reads a token count: a plain integer, or null (which leaves *dst as it is).
func scanCount(dst *int64, val []byte) bool {
	if string(val) == "null" {
		return true
	}
	n, ok := scanInt(val)
	*dst = n
	return ok
}

// scanFloat reads a JSON number, or null (which leaves *dst as it is), as encoding/json
// reads one into a float64; ok is false for anything else, or for a number out of range.
func scanFloat(dst *float64, val []byte) bool {
	if string(val) == "null" {
		return true
	}
	if !isJSONNumber(val) {
		return false
	}
	x, err := strconv.ParseFloat(string(val), 64)
	if err != nil {
		return false
	}
	*dst = x
	return true
}

// isJSONNumber reports whether b is a number as JSON writes one: -?(0|[1-9][0-9]*)
// (.[0-9]+)?([eE][+-]?[0-9]+)?
func isJSONNumber(b []byte) bool {
	digits := func(b []byte) ([]byte, bool) { // one or more
		n := 0
		for n < len(b) && b[n] >= '0' && b[n] <= '9' {
			n++
		}
		return b[n:], n > 0
	}
	b = bytes.TrimPrefix(b, []byte("-"))
	if len(b) > 1 && b[0] == '0' && b[1] >= '0' && b[1] <= '9' {
		return false
	}
	b, ok := digits(b)
	if ok && len(b) > 0 && b[0] == '.' {
		b, ok = digits(b[1:])
	}
	if ok && len(b) > 0 && (b[0] == 'e' || b[0] == 'E') {
		b = b[1:]
		if len(b) > 0 && (b[0] == '+' || b[0] == '-') {
			b = b[1:]
		}
		b, ok = digits(b)
	}
	return ok && len(b) == 0
}

// PartFacts is what [Part] reads of a message.part.updated event's part.
type PartFacts struct {
	ID, MessageID, Type string
	Tool                string // a tool part's tool
	Text                string // a text or reasoning part's text so far
	Ignored             bool   // a text part the model does not see
	End                 int64  // time.end, ms since the epoch: a streamed part is whole; 0 when absent
	Status              string // a tool part's state.status
}

// Part reads the id, messageID, type, tool, text, ignored, time.end and state.status of
// the part in the properties of a message.part.updated event ({…,"part":{…},…}) by walking
// the JSON's keys and skipping the values it does not need (a tool's input and output), as
// MessageInfo does, and declines what it does not read exactly as encoding/json would:
// ok is false for whitespace between tokens, a key with an escape, a field it reads that is
// null or of another type, a number that is not a plain integer, a repeated key it needs or
// one spelled in another case, no part; the caller decodes then. The text may hold escapes
// and any UTF-8: it alone is decoded, with encoding/json.
func Part(props []byte) (f PartFacts, ok bool) {
	part, ok := soleObject(props, "part")
	if !ok {
		return PartFacts{}, false
	}
	var seen keySet
	once, str := seen.once, readString
	ok = eachMember(part, func(key, val []byte) bool {
		switch string(key) {
		case "id":
			return once(1) && str(&f.ID, val)
		case "messageID":
			return once(2) && str(&f.MessageID, val)
		case "type":
			return once(4) && str(&f.Type, val)
		case "tool":
			return once(8) && str(&f.Tool, val)
		case "text":
			return once(16) && (str(&f.Text, val) || val[0] == '"' && json.Unmarshal(val, &f.Text) == nil)
		case "ignored":
			f.Ignored = string(val) == "true"
			return once(32) && (f.Ignored || string(val) == "false")
		case "time":
			return once(64) && val[0] == '{' && eachMember(val, func(key, val []byte) bool {
				if string(key) != "end" {
					return !foldsTo(key, "end")
				}
				n, ok := scanInt(val)
				f.End = n
				return ok
			})
		case "state":
			return once(128) && val[0] == '{' && eachMember(val, func(key, val []byte) bool {
				if string(key) != "status" {
					return !foldsTo(key, "status")
				}
				return str(&f.Status, val)
			})
		}
		return !foldsTo(key, "id", "messageID", "type", "tool", "text", "ignored", "time", "state")
	})
	if !ok {
		return PartFacts{}, false
	}
	return f, true
}

// ReadPart reads what [Part] reads of a message.part.updated event's part: scanned, or,
// when Part declines, decoded with encoding/json (a null then reads as nothing, a field
// of another type fails). ok is false when the properties hold no part or the decode fails.
// Like Part it trusts the server to write JSON: a scanned value it skips (a tool's input
// and output) is delimited, not checked.
func ReadPart(props []byte) (f PartFacts, ok bool) {
	if f, ok := Part(props); ok {
		return f, true
	}
	f, err := readPartJSON(props)
	return f, err == nil
}

// readPartJSON decodes the fields of PartFacts with encoding/json.
func readPartJSON(props []byte) (PartFacts, error) {
	var ev struct {
		Part *struct {
			ID, MessageID, Type, Tool, Text string
			Ignored                         bool
			Time                            struct{ End int64 }
			State                           struct{ Status string }
		}
	}
	if err := json.Unmarshal(props, &ev); err != nil {
		return PartFacts{}, err
	}
	d := ev.Part
	if d == nil {
		return PartFacts{}, errors.New("scan: no part")
	}
	return PartFacts{ID: d.ID, MessageID: d.MessageID, Type: d.Type, Tool: d.Tool, Text: d.Text,
		Ignored: d.Ignored, End: d.Time.End, Status: d.State.Status}, nil
}

// foldsTo reports whether key is one of names in another case: encoding/json would take it
// for that name.
func foldsTo(key []byte, names ...string) bool {
	for _, n := range names {
		if len(key) == len(n) && string(key) != n && bytes.EqualFold(key, []byte(n)) {
			return true
		}
	}
	return false
}

// eachMember calls f with each key and raw value of the JSON object obj, which must be
// written without whitespace and with keys without escapes, until f returns false; it
// reports whether it read the whole object and f never returned false.
func eachMember(obj []byte, f func(key, val []byte) bool) bool {
	if len(obj) < 2 || obj[0] != '{' || obj[len(obj)-1] != '}' {
		return false
	}
	rest := obj[1:]
	if string(rest) == "}" {
		return true
	}
	for {
		key, r, ok := String(rest)
		if !ok || len(r) == 0 || r[0] != ':' {
			return false
		}
		r = r[1:]
		n := memberLen(r)
		if n <= 0 || !f(key, r[:n]) {
			return false
		}
		switch r = r[n:]; {
		case string(r) == "}":
			return true
		case len(r) > 1 && r[0] == ',':
			rest = r[1:]
		default:
			return false
		}
	}
}

// memberLen returns the length of the value at the start of b, which ends a member: an
// object, array or string (ValueLen), or a number or literal, up to the next ',' or '}';
// 0 when there is none.
func memberLen(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	switch b[0] {
	case '{', '[', '"':
		return max(ValueLen(b), 0)
	}
	for i, c := range b {
		switch c {
		case ',', '}':
			return i
		case ' ', '\t', '\r', '\n', '"', '{', '[', ']', ':':
			return 0
		}
	}
	return 0
}

// Tokens are the token counts of a message's info, shaped as OpenCode writes them
// ({"total":…,"input":…,"output":…,"reasoning":…,"cache":{"read":…,"write":…}}).
type Tokens struct {
	Total, Input, Output, Reasoning int64
	Cache                           struct{ Read, Write int64 }
}

// String reads a JSON string at the start of b that has no escapes, control characters
// or non-ASCII bytes, and returns its contents and what follows it.
func String(b []byte) (s, rest []byte, ok bool) {
	if len(b) == 0 || b[0] != '"' {
		return nil, nil, false
	}
	for i := 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return b[1:i], b[i+1:], true
		case c == '\\' || c < ' ' || c >= 0x80:
			return nil, nil, false
		}
	}
	return nil, nil, false
}

// ValueLen returns the length of the object, array or string at the start of b, found by
// matching brackets outside strings (a string ends at a quote not escaped by a backslash), or
// -1 when b starts with anything else or the value does not end. It checks nothing else of
// the value's syntax.
func ValueLen(b []byte) int {
	depth := 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			end := stringEnd(b, i)
			if end < 0 {
				return -1
			}
			if i = end; depth == 0 {
				return i + 1
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth--; depth <= 0 {
				if depth < 0 {
					return -1
				}
				return i + 1
			}
		default:
			if depth == 0 {
				return -1
			}
		}
	}
	return -1
}

// stringEnd returns the index of the quote that closes the string opened at b[start], or -1.
func stringEnd(b []byte, start int) int {
	for i := start + 1; ; i++ {
		k := bytes.IndexByte(b[i:], '"')
		if k < 0 {
			return -1
		}
		i += k
		escapes := 0
		for j := i - 1; j > start && b[j] == '\\'; j-- {
			escapes++
		}
		if escapes%2 == 0 {
			return i
		}
	}
}
