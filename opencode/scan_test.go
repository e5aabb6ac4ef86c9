package opencode_test

import (
	"testing"

	"github.com/asyncagents/asyncagents/opencode"
)

// T-6: busy and idle session.status events, as OpenCode writes them, are read without a
// decode; any other shape is left to the decoder.
func TestBareStatusTypeT6(t *testing.T) {
	for props, want := range map[string]string{
		`{"sessionID":"ses_1","status":{"type":"idle"}}`:                                     "idle",
		`{"sessionID":"ses_1","status":{"type":"busy"}}`:                                     "busy",
		`{"sessionID":"ses_1","status":{"type":"retry","attempt":1,"message":"x","next":2}}`: "",
		`{"sessionID":"ses_1","status":{"type":"idle","extra":1}}`:                           "",
		`{"sessionID":"ses_1","status":{"type":"other"}}`:                                    "",
		`{"sessionID":"ses_1","info":{"status":{"type":"idle"}}}`:                            "",
		`{"sessionID":"ses_1","status":{"type":"idle"}} `:                                    "",
		`{"sessionID":"ses_1"}`:                                                              "",
		``:                                                                                   "",
	} {
		got, ok := opencode.BareStatusType([]byte(props))
		if got != want || ok != (want != "") {
			t.Errorf("BareStatusType(%s) = %q, %v; want %q", props, got, ok, want)
		}
	}
}

// T-6, T-8: the types of a part event are found without a decode, nested ones included.
func TestPartTypesT6(t *testing.T) {
	for props, want := range map[string][2]bool{
		`{"sessionID":"ses_1","part":{"id":"prt_1","type":"step-start"},"time":1}`:                        {false, false},
		`{"sessionID":"ses_1","part":{"id":"prt_1","type":"text","text":"\"type\":\"tool\""},"time":1}`:   {false, true},
		`{"sessionID":"ses_1","part":{"type":"reasoning","text":""},"time":1}`:                            {false, true},
		`{"sessionID":"ses_1","part":{"type":"tool","state":{"attachments":[{"type":"file"}]}},"time":1}`: {true, false},
		`{"sessionID":"ses_1","part":{"state":{"attachments":[{"type":"text"}]},"type":"tool"},"time":1}`: {true, true},
		`{"sessionID":"ses_1","part":{"type":"textual"},"time":1}`:                                        {false, false},
		``: {false, false},
	} {
		if tool, streamed := opencode.PartTypes([]byte(props)); tool != want[0] || streamed != want[1] {
			t.Errorf("PartTypes(%s) = %v, %v; want %v", props, tool, streamed, want)
		}
	}
}

// The session id OpenCode writes first is read in place; any other shape is left to a decode.
func TestLeadingSessionID(t *testing.T) {
	for props, want := range map[string]string{
		`{"sessionID":"ses_1","part":{}}`: "ses_1",
		`{"part":{"sessionID":"ses_1"}}`:  "",
		`{"sessionID":"ses_\u0031"}`:      "",
		`{"sessionID":""}`:                "",
		``:                                "",
	} {
		if got := string(opencode.LeadingSessionID([]byte(props))); got != want {
			t.Errorf("LeadingSessionID(%s) = %q, want %q", props, got, want)
		}
	}
}

// A message.updated event's message id is read in place when OpenCode writes it right after
// the session id; any other shape is left to a decode.
func TestLeadingInfoID(t *testing.T) {
	for props, want := range map[string]string{
		`{"sessionID":"ses_1","info":{"id":"msg_1","role":"user"}}`: "msg_1",
		`{"sessionID":"ses_1","info":{"role":"user","id":"msg_1"}}`: "",
		`{"info":{"id":"msg_1"},"sessionID":"ses_1"}`:               "",
		`{"sessionID":"ses_1","info":{"id":"msg_\u0031"}}`:          "",
		`{"sessionID":"ses_1"}`:                                     "",
	} {
		if got := string(opencode.LeadingInfoID([]byte(props))); got != want {
			t.Errorf("LeadingInfoID(%s) = %q, want %q", props, got, want)
		}
	}
}

// A message.part.updated event's part id is read in place when OpenCode writes it right
// after the session id; any other shape is left to a decode.
func TestLeadingPartID(t *testing.T) {
	for props, want := range map[string]string{
		`{"sessionID":"ses_1","part":{"id":"prt_1","messageID":"msg_1"}}`: "prt_1",
		`{"sessionID":"ses_1","part":{"type":"text","id":"prt_1"}}`:       "",
		`{"sessionID":"ses_1","info":{"id":"msg_1"}}`:                     "",
		`{"sessionID":"ses_1","part":{"id":"prt_\u0031"}}`:                "",
	} {
		if got := string(opencode.LeadingPartID([]byte(props))); got != want {
			t.Errorf("LeadingPartID(%s) = %q, want %q", props, got, want)
		}
	}
}
