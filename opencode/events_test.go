package opencode_test

import (
	"encoding/json"
	"testing"

	"github.com/asyncagents/asyncagents/opencode"
)

func TestEventSessionID(t *testing.T) {
	for props, want := range map[string]string{
		`{"sessionID":"ses_a","status":{"type":"idle"}}`:            "ses_a",
		`{"status":{"type":"idle"},"sessionID":"ses_b"}`:            "ses_b",
		`{"part":{"id":"prt_1","sessionID":"ses_c","type":"tool"}}`: "ses_c",
		`{"info":{"id":"ses_d","sessionID":"ses_d"}}`:               "ses_d",
		`{"sessionID":"ses_\u0065"}`:                                "ses_e",
		`{"sessionID" : "ses_f"}`:                                   "ses_f",
		`{"id":"per_1","permission":"bash"}`:                        "",
		`{"sessionID":`:                                             "",
		``:                                                          "",
		`{"part":{"sessionID":"ses_g","state":{"input":{"sessionID":1}}}}`: "ses_g",
	} {
		ev := opencode.Event{Type: "x", Properties: json.RawMessage(props)}
		if got := ev.SessionID(); got != want {
			t.Errorf("SessionID(%s) = %q, want %q", props, got, want)
		}
	}
}
