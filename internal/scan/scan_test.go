package scan_test

import (
	"encoding/json"
	"testing"

	"github.com/asyncagents/asyncagents/internal/scan"
	"github.com/asyncagents/asyncagents/internal/testmain"
)

func TestMain(m *testing.M) { testmain.Run(m) }

// T-6: busy and idle session.status events, as OpenCode writes them, are read without a
// decode; any other shape is left to the decoder.
func TestBareStatusType(t *testing.T) {
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
		got, ok := scan.BareStatusType([]byte(props))
		if got != want || ok != (want != "") {
			t.Errorf("BareStatusType(%s) = %q, %v; want %q", props, got, ok, want)
		}
	}
}

// T-6, T-8: the types of a part event are found without a decode, nested ones included.
func TestPartTypes(t *testing.T) {
	for props, want := range map[string][2]bool{
		`{"sessionID":"ses_1","part":{"id":"prt_1","type":"step-start"},"time":1}`:                        {false, false},
		`{"sessionID":"ses_1","part":{"id":"prt_1","type":"text","text":"\"type\":\"tool\""},"time":1}`:   {false, true},
		`{"sessionID":"ses_1","part":{"type":"reasoning","text":""},"time":1}`:                            {false, true},
		`{"sessionID":"ses_1","part":{"type":"tool","state":{"attachments":[{"type":"file"}]}},"time":1}`: {true, false},
		`{"sessionID":"ses_1","part":{"state":{"attachments":[{"type":"text"}]},"type":"tool"},"time":1}`: {true, true},
		`{"sessionID":"ses_1","part":{"type":"textual"},"time":1}`:                                        {false, false},
		``: {false, false},
	} {
		if tool, streamed := scan.PartTypes([]byte(props)); tool != want[0] || streamed != want[1] {
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
		if got := string(scan.LeadingSessionID([]byte(props))); got != want {
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
		if got := string(scan.LeadingInfoID([]byte(props))); got != want {
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
		if got := string(scan.LeadingPartID([]byte(props))); got != want {
			t.Errorf("LeadingPartID(%s) = %q, want %q", props, got, want)
		}
	}
}

// infoByJSON is what encoding/json reads of the fields MessageInfo reads.
func infoByJSON(props []byte) (scan.InfoFacts, error) {
	var ev struct {
		Info struct {
			ID, ParentID, Role, Finish string
			Time                       struct{ Completed int64 }
			Error                      *json.RawMessage
			Tokens                     scan.Tokens
			Cost                       float64
		}
	}
	err := json.Unmarshal(props, &ev)
	i := ev.Info
	return scan.InfoFacts{ID: i.ID, ParentID: i.ParentID, Role: i.Role, Finish: i.Finish,
		Completed: i.Time.Completed, Error: i.Error != nil && string(*i.Error) != "null",
		Tokens: i.Tokens, Cost: i.Cost}, err
}

var infoSeeds = []string{
	`{"sessionID":"ses_1","info":{"id":"msg_2","sessionID":"ses_1","role":"assistant","time":{"created":1795215783287,"completed":1795215783290},"parentID":"msg_1","modelID":"m1","providerID":"scripted","mode":"general","agent":"general","path":{"cwd":"/p","root":"/"},"cost":0.0012,"tokens":{"total":120,"input":100,"output":20,"reasoning":0,"cache":{"read":0,"write":0}},"finish":"stop"}}`,
	`{"sessionID":"ses_1","info":{"id":"msg_1","sessionID":"ses_1","role":"user","time":{"created":1795215783280},"summary":{"diffs":[{"file":"a\"}{","before":"","after":"x"}]},"agent":"general","model":{"providerID":"scripted","modelID":"m1"}}}`,
	`{"info":{"id":"msg_2","role":"assistant","error":{"name":"MessageAbortedError","data":{"message":"Aborted"}},"time":{"created":1,"completed":2}},"sessionID":"ses_1"}`,
	`{"sessionID":"ses_1","info":{"id":"msg_2","role":"assistant","error":null,"finish":"tool-calls","time":{"created":1}}}`,
}

// MessageInfo reads what encoding/json reads, or declines (then the caller decodes).
func TestMessageInfo(t *testing.T) {
	for _, c := range []struct {
		props string
		ok    bool
	}{
		{infoSeeds[0], true},
		{infoSeeds[1], true},
		{infoSeeds[2], true},
		{infoSeeds[3], true},
		{`{"sessionID":"ses_1","info":{"id":"msg_\u0032","role":"user"}}`, false},               // an escape in a needed string
		{`{"sessionID":"ses_1","info":{"id":"msg_2","Role":"user"}}`, false},                    // another case: encoding/json takes it
		{`{"sessionID":"ses_1","info":{"id":"msg_2","role":"user","role":"assistant"}}`, false}, // repeated
		{`{"sessionID":"ses_1", "info":{"id":"msg_2"}}`, false},                                 // whitespace
		{`{"sessionID":"ses_1","info":{"id":"msg_2","time":{"completed":1.5}}}`, false},         // not an integer
		{`{"sessionID":"ses_1","info":{"id":"msg_2","time":{"completed":-01}}}`, false},         // not JSON
		{`{"sessionID":"ses_1","info":{"id":"msg_2","time":{"completed":+1}}}`, false},          // not JSON
		{`{"sessionID":"ses_1"}`, false},                                                        // no info
		{`{"info":{"id":"msg_2","cost":1.5e-3,"tokens":{"input":7,"cache":{"write":2,"read":null}}}}`, true},
		{`{"info":{"id":"msg_2","cost":null,"tokens":null}}`, true},
		{`{"info":{"id":"msg_2","tokens":{"input":1.5}}}`, false},         // not an integer
		{`{"info":{"id":"msg_2","tokens":{"Input":1}}}`, false},           // another case
		{`{"info":{"id":"msg_2","tokens":{"input":1,"input":2}}}`, false}, // repeated
		{`{"info":{"id":"msg_2","tokens":{"cache":{"read":1,"Read":2}}}}`, false},
		{`{"info":{"id":"msg_2","cost":"0.1"}}`, false}, // not a number
		{`{"info":{"id":"msg_2","cost":-0.5E+2}}`, true},
		{`{"info":{"id":"msg_2","cost":+1}}`, false}, // not JSON
		{`{"info":{"id":"msg_2","cost":1.}}`, false},
		{`{"info":{"id":"msg_2","cost":.5}}`, false},
		{`{"info":{"id":"msg_2","cost":01}}`, false},
		{`{"info":{"id":"msg_2","cost":1e}}`, false},
		{`{"info":{"id":"msg_2","cost":1e999}}`, false},      // out of range
		{`{"info":{"id":"msg_2","cost":1,"cost":2}}`, false}, // repeated
		{`{"sessionID":"ses_1","info":[]}`, false},
	} {
		got, ok := scan.MessageInfo([]byte(c.props))
		if ok != c.ok {
			t.Errorf("MessageInfo(%s) ok = %v, want %v", c.props, ok, c.ok)
		}
		if want, err := infoByJSON([]byte(c.props)); ok && (err != nil || got != want) {
			t.Errorf("MessageInfo(%s) = %+v, encoding/json reads %+v (%v)", c.props, got, want, err)
		}
	}
}

// FuzzMessageInfo: what MessageInfo reads of properties that are JSON is what
// encoding/json reads. Run with go test -fuzz FuzzMessageInfo ./internal/scan/.
func FuzzMessageInfo(f *testing.F) {
	for _, s := range infoSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, props []byte) {
		got, ok := scan.MessageInfo(props)
		if !ok || !json.Valid(props) {
			return
		}
		if want, err := infoByJSON(props); err != nil || got != want {
			t.Fatalf("MessageInfo(%s) = %+v, encoding/json reads %+v (%v)", props, got, want, err)
		}
	})
}

func BenchmarkMessageInfo(b *testing.B) {
	props := []byte(infoSeeds[0])
	b.Run("scan", func(b *testing.B) {
		for b.Loop() {
			scan.MessageInfo(props)
		}
	})
	b.Run("json", func(b *testing.B) {
		for b.Loop() {
			infoByJSON(props)
		}
	})
}

var partSeeds = []string{
	`{"sessionID":"ses_1","part":{"id":"prt_1","sessionID":"ses_1","messageID":"msg_2","type":"text","text":"Found 3 warnings.","time":{"start":1795215783287,"end":1795215783290}},"time":1795215783290}`,
	`{"sessionID":"ses_1","part":{"id":"prt_1","sessionID":"ses_1","messageID":"msg_2","type":"text","text":"line one\nline \"two\" — ünïcode \ud83d\ude00","ignored":true,"time":{"start":1}}}`,
	`{"sessionID":"ses_1","part":{"id":"prt_3","sessionID":"ses_1","messageID":"msg_2","type":"tool","callID":"c1","tool":"bash","state":{"status":"completed","input":{"command":"ls \"}{\""},"output":"a\nb","title":"ls","metadata":{},"time":{"start":1,"end":2}}}}`,
	`{"sessionID":"ses_1","part":{"id":"prt_4","sessionID":"ses_1","messageID":"msg_2","type":"step-finish","reason":"stop","cost":0,"tokens":{"input":100,"output":20,"reasoning":0,"cache":{"read":0,"write":0}}}}`,
}

// Part reads what encoding/json reads, or declines (then ReadPart decodes).
func TestPart(t *testing.T) {
	for _, c := range []struct {
		props string
		ok    bool
	}{
		{partSeeds[0], true},
		{partSeeds[1], true}, // escapes and UTF-8 in the text: it alone is decoded
		{partSeeds[2], true},
		{partSeeds[3], true},
		{`{"sessionID":"ses_1","part":{"id":"prt_\u0031","type":"text"}}`, false},       // an escape in an id
		{`{"sessionID":"ses_1","part":{"id":"prt_1","Type":"text"}}`, false},            // another case
		{`{"sessionID":"ses_1","part":{"id":"prt_1","type":"text","type":"x"}}`, false}, // repeated
		{`{"sessionID":"ses_1","part":{"id":"prt_1","text":null}}`, false},              // null
		{`{"sessionID":"ses_1","part":{"id":"prt_1","ignored":1}}`, false},              // another type
		{`{"sessionID":"ses_1","part":{"id":"prt_1","time":{"end":1e3}}}`, false},       // not an integer
		{`{"sessionID":"ses_1","part":{"id":"prt_1","state":{"status":3}}}`, false},     // another type
		{`{"sessionID":"ses_1", "part":{"id":"prt_1"}}`, false},                         // whitespace
		{`{"sessionID":"ses_1"}`, false},                                                // no part
		{`{"sessionID":"ses_1","part":null}`, false},
	} {
		got, ok := scan.Part([]byte(c.props))
		if ok != c.ok {
			t.Errorf("Part(%s) ok = %v, want %v", c.props, ok, c.ok)
		}
		if want, err := scan.ReadPartJSON([]byte(c.props)); ok && (err != nil || got != want) {
			t.Errorf("Part(%s) = %+v, encoding/json reads %+v (%v)", c.props, got, want, err)
		}
	}
}

// FuzzPart: what Part reads of properties that are JSON is what encoding/json
// reads. Run with go test -fuzz FuzzPart ./internal/scan/.
func FuzzPart(f *testing.F) {
	for _, s := range partSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, props []byte) {
		got, ok := scan.Part(props)
		if !ok || !json.Valid(props) {
			return
		}
		if want, err := scan.ReadPartJSON(props); err != nil || got != want {
			t.Fatalf("Part(%s) = %+v, encoding/json reads %+v (%v)", props, got, want, err)
		}
	})
}

func BenchmarkPart(b *testing.B) {
	props := []byte(partSeeds[0])
	b.Run("scan", func(b *testing.B) {
		for b.Loop() {
			scan.Part(props)
		}
	})
	b.Run("json", func(b *testing.B) {
		for b.Loop() {
			scan.ReadPartJSON(props)
		}
	})
}
