package asyncagents

import "testing"

// T-6: busy and idle session.status events, as OpenCode writes them, are read without a
// decode; any other shape is left to the decoder.
func TestStatusTypeT6(t *testing.T) {
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
		got, ok := statusType([]byte(props))
		if got != want || ok != (want != "") {
			t.Errorf("statusType(%s) = %q, %v; want %q", props, got, ok, want)
		}
	}
}
