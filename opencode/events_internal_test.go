package opencode

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// scanFrame reads what encoding/json reads from the frames it accepts, and leaves every
// other frame to it.
func TestScanFrame(t *testing.T) {
	for _, c := range []struct {
		frame   string
		scanned bool
	}{
		{`{"directory":"/srv/p","project":"global","payload":{"id":"evt_1","type":"session.idle","properties":{"sessionID":"ses_a"}}}`, true},
		{`{"directory":"/srv/p","payload":{"id":"evt_1","type":"session.status","properties":{"sessionID":"ses_a","status":{"type":"idle"}}}}`, true},
		{`{"directory":"","payload":{"type":"server.connected","properties":{}}}`, true},
		{`{"directory":"/srv/p","payload":{"type":"message.part.delta","properties":{"delta":"a \"quoted\" }} text\n","x":[1,2.5e3,null,true]}}}`, true},
		{`{"directory":"/srv/p","payload":{"type":"sync","properties":{"syncEvent":{"type":"session.created.1","seq":0}}}}`, true},
		{`{"directory":"/srv/p","payload":{"type":"x","properties":{"a":1},"extra":2}}`, false},       // a key after properties
		{`{"directory":"/srv/p","payload":{"type":"x","properties":{"a":tru}}}`, false},               // not JSON
		{`{"directory":"/srv/\u00e9","payload":{"type":"x","properties":{}}}`, false},                 // an escape
		{`{"directory":"/srv/é","payload":{"type":"x","properties":{}}}`, false},                      // non-ASCII
		{`{"payload":{"type":"x","properties":{}},"directory":"/srv/p"}`, false},                      // another order
		{`{"id":"evt_2","type":"session.idle","properties":{"sessionID":"ses_b"}}`, false},            // /event's bare event
		{`{"directory":"/srv/p","payload":{"type":"x","properties":{"a":"b"}}} `, false},              // trailing space
		{`{"directory":"/srv/p","payload":{"id":"evt_3","type":"x"}}`, false},                         // no properties
		{`{"directory":"/srv/p","payload":{"id":"evt_3","type":"x","properties":"s"}}`, true},         // a string
		{`{"directory":"/srv/p","payload":{"id":"evt_3","type":"x","properties":{"a":"}"}}}}`, false}, // not JSON
	} {
		ev, ok := scanFrame([]byte(c.frame))
		if ok != c.scanned {
			t.Errorf("scanFrame(%s) ok = %v, want %v", c.frame, ok, c.scanned)
		}
		want, err := decodeFrameJSON([]byte(c.frame))
		if ok {
			if err != nil {
				t.Errorf("scanFrame read %s, which encoding/json rejects: %v", c.frame, err)
			} else if diff := cmp.Diff(want, ev); diff != "" {
				t.Errorf("scanFrame(%s) differs from encoding/json (-json +scan):\n%s", c.frame, diff)
			}
		}
		got, _, gerr := decodeFrame([]byte(c.frame))
		if (gerr != nil) != (err != nil) || (err == nil && !cmp.Equal(got, want)) {
			t.Errorf("decodeFrame(%s) = %+v, %v; want %+v, %v", c.frame, got, gerr, want, err)
		}
	}
}

func BenchmarkDecodeFrame(b *testing.B) {
	frame := []byte(`{"directory":"/bench/project","payload":{"type":"message.updated","properties":{"sessionID":"ses_1fb3320d4001V700obu4QECUaG","info":{"id":"msg_1fb3320d4001V700obu4QECUaG","sessionID":"ses_1fb3320d4001V700obu4QECUaG","role":"assistant","time":{"created":1795215783287,"completed":1795215783290},"parentID":"msg_1fb3320d4001V700obu4QECUa0","modelID":"m1","providerID":"scripted","mode":"general","agent":"general","path":{"cwd":"/bench/project","root":"/"},"cost":0,"tokens":{"total":120,"input":100,"output":20,"reasoning":0,"cache":{"read":0,"write":0}},"finish":"stop"}}}}`)
	b.Run("scan", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := decodeFrame(frame); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json", func(b *testing.B) {
		for b.Loop() {
			if _, err := decodeFrameJSON(frame); err != nil {
				b.Fatal(err)
			}
		}
	})
}
