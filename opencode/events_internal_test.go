package opencode

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// scanFrame reads what encoding/json reads from the frames it accepts, and leaves every
// other frame to it; properties it takes as they are (lazy: encoding/json rejects them, and
// they fail when decoded).
func TestScanFrame(t *testing.T) {
	for _, c := range []struct {
		frame   string
		scanned bool
		lazy    bool // scanned, with properties that are not JSON
	}{
		{`{"directory":"/srv/p","project":"global","payload":{"id":"evt_1","type":"session.idle","properties":{"sessionID":"ses_a"}}}`, true, false},
		{`{"directory":"/srv/p","payload":{"id":"evt_1","type":"session.status","properties":{"sessionID":"ses_a","status":{"type":"idle"}}}}`, true, false},
		{`{"directory":"","payload":{"type":"server.connected","properties":{}}}`, true, false},
		{`{"directory":"/srv/p","payload":{"type":"message.part.delta","properties":{"delta":"a \"quoted\" }} text\n","x":[1,2.5e3,null,true]}}}`, true, false},
		{`{"directory":"/srv/p","payload":{"type":"sync","properties":{"syncEvent":{"type":"session.created.1","seq":0}}}}`, true, false},
		{`{"directory":"/srv/p","payload":{"type":"x","properties":{"a":1},"extra":2}}`, false, false},                        // a key after properties
		{`{"directory":"/srv/p","payload":{"type":"x","properties":{"a":tru}}}`, true, true},                                  // not JSON: taken as it is
		{`{"directory":"/srv/\u00e9","payload":{"type":"x","properties":{}}}`, false, false},                                  // an escape
		{`{"directory":"/srv/é","payload":{"type":"x","properties":{}}}`, false, false},                                       // non-ASCII
		{`{"payload":{"type":"x","properties":{}},"directory":"/srv/p"}`, false, false},                                       // another order
		{`{"id":"evt_2","type":"session.idle","properties":{"sessionID":"ses_b"}}`, false, false},                             // /event's bare event
		{`{"directory":"/srv/p","payload":{"type":"x","properties":{"a":"b"}}} `, false, false},                               // trailing space
		{`{"directory":"/srv/p","payload":{"id":"evt_3","type":"x"}}`, false, false},                                          // no properties
		{`{"directory":"/srv/p","payload":{"id":"evt_3","type":"x","properties":"s"}}`, true, false},                          // a string
		{`{"directory":"/srv/p","payload":{"id":"evt_3","type":"x","properties":{"a":"}"}}}}`, false, false},                  // a brace too many
		{`{"directory":"/srv/p","payload":{"type":"x","properties":{"a":"q\"}\\","b":[{"c":"]\\\""}],"d":{}}}}`, true, false}, // escapes, brackets in strings
		{`{"directory":"/srv/p","payload":{"type":"x","properties":{"a":"b}}`, false, false},                                  // a string that does not end
		{`{"directory":"/srv/p","payload":{"type":"x","properties":7}}`, false, false},                                        // a number: left to encoding/json
	} {
		ev, ok := scanFrame([]byte(c.frame), "/srv/p")
		if ok != c.scanned {
			t.Errorf("scanFrame(%s) ok = %v, want %v", c.frame, ok, c.scanned)
		}
		want, err := decodeFrameJSON([]byte(c.frame))
		if c.lazy {
			if err == nil {
				t.Errorf("encoding/json reads %s, which the test takes for not JSON", c.frame)
			}
			if _, derr := ev.Decode(); derr == nil {
				t.Errorf("Decode of the properties of %s: no error", c.frame)
			}
			continue
		}
		if ok {
			if err != nil {
				t.Errorf("scanFrame read %s, which encoding/json rejects: %v", c.frame, err)
			} else if diff := cmp.Diff(want, ev); diff != "" {
				t.Errorf("scanFrame(%s) differs from encoding/json (-json +scan):\n%s", c.frame, diff)
			}
		}
		got, _, gerr := decodeFrame([]byte(c.frame), "")
		if (gerr != nil) != (err != nil) || (err == nil && !cmp.Equal(got, want)) {
			t.Errorf("decodeFrame(%s) = %+v, %v; want %+v, %v", c.frame, got, gerr, want, err)
		}
	}
}

// FuzzScanFrame: a frame scanFrame reads is one encoding/json reads the same, or one whose
// properties alone are not JSON. Run with go test -fuzz FuzzScanFrame ./opencode/.
func FuzzScanFrame(f *testing.F) {
	for _, seed := range []string{
		`{"directory":"/srv/p","project":"global","payload":{"id":"evt_1","type":"session.idle","properties":{"sessionID":"ses_a"}}}`,
		`{"directory":"/srv/p","payload":{"type":"x","properties":{"a":"q\"}\\","b":[{"c":"]"}]}}}`,
		`{"directory":"/srv/p","payload":{"type":"x","properties":{"a":1},"extra":2}}`,
		`{"directory":"/srv/p","payload":{"type":"x","properties":"s"}}`,
		`{"directory":"/srv/p","payload":{"type":"x","properties":[1,{"a":[]}]}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		ev, ok := scanFrame(frame, "/srv/p")
		if !ok {
			return
		}
		want, err := decodeFrameJSON(frame)
		switch {
		case err != nil && json.Valid(ev.Properties):
			t.Fatalf("scanFrame read %s, which encoding/json rejects (%v), with properties that are JSON", frame, err)
		case err == nil && !cmp.Equal(want, ev):
			t.Fatalf("scanFrame(%s) differs from encoding/json:\n%s", frame, cmp.Diff(want, ev))
		}
	})
}

func BenchmarkDecodeFrame(b *testing.B) {
	frame := []byte(`{"directory":"/bench/project","payload":{"type":"message.updated","properties":{"sessionID":"ses_1fb3320d4001V700obu4QECUaG","info":{"id":"msg_1fb3320d4001V700obu4QECUaG","sessionID":"ses_1fb3320d4001V700obu4QECUaG","role":"assistant","time":{"created":1795215783287,"completed":1795215783290},"parentID":"msg_1fb3320d4001V700obu4QECUa0","modelID":"m1","providerID":"scripted","mode":"general","agent":"general","path":{"cwd":"/bench/project","root":"/"},"cost":0,"tokens":{"total":120,"input":100,"output":20,"reasoning":0,"cache":{"read":0,"write":0}},"finish":"stop"}}}}`)
	b.Run("scan", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := decodeFrame(frame, "/bench/project"); err != nil {
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

// runEndFrames returns the 13 frames OpenCode's /global/event carries when a short run of
// session n ends (as the benchmarks' server writes them), in SSE form.
func runEndFrames(n int) []byte {
	sid := fmt.Sprintf("ses_1fb3320d4001V700obu4Q%05d", n)
	mid, uid := "msg_1fb3320d4001V700obu4QECUaG", "msg_1fb3320d4001V700obu4QECUa0"
	part := func(id, typ, extra string) string {
		return `{"part":{"id":"` + id + `","sessionID":"` + sid + `","messageID":"` + mid + `","type":"` + typ + `"` + extra + `}}`
	}
	info := `{"info":{"id":"` + mid + `","sessionID":"` + sid + `","role":"assistant","time":{"created":1795215783287,"completed":1795215783290},"parentID":"` + uid + `","modelID":"m1","providerID":"scripted","mode":"general","agent":"general","path":{"cwd":"/bench/project","root":"/"},"cost":0,"tokens":{"total":120,"input":100,"output":20,"reasoning":0,"cache":{"read":0,"write":0}},"finish":"stop"}}`
	var b []byte
	for _, ev := range [][2]string{
		{"message.part.updated", part("prt_a1", "step-start", "")},
		{"message.part.updated", part("prt_a2", "text", `,"text":"","time":{"start":1795215783287}`)},
		{"message.part.delta", `{"sessionID":"` + sid + `","messageID":"` + mid + `","partID":"prt_a2","field":"text","delta":"Found 3 warnings."}`},
		{"message.part.updated", part("prt_a2", "text", `,"text":"Found 3 warnings.","time":{"start":1795215783287,"end":1795215783290}`)},
		{"message.part.updated", part("prt_a3", "step-finish", `,"reason":"stop","cost":0,"tokens":{"input":100,"output":20,"reasoning":0,"cache":{"read":0,"write":0}}`)},
		{"message.updated", info},
		{"message.updated", info},
		{"session.status", `{"sessionID":"` + sid + `","status":{"type":"busy"}}`},
		{"session.status", `{"sessionID":"` + sid + `","status":{"type":"idle"}}`},
		{"session.idle", `{"sessionID":"` + sid + `"}`},
		{"session.updated", `{"info":{"id":"` + sid + `","slug":"s","projectID":"global","directory":"/bench/project","parentID":"ses_parent","title":"scan part","version":"1.18.33","time":{"created":1795215783000,"updated":1795215783290}}}`},
		{"session.diff", `{"sessionID":"` + sid + `","diff":[]}`},
		{"message.updated", `{"info":{"id":"` + uid + `","sessionID":"` + sid + `","role":"user","time":{"created":1795215783280},"agent":"general","model":{"providerID":"scripted","modelID":"m1"}}}`},
	} {
		b = fmt.Appendf(b, "data: {\"directory\":\"/bench/project\",\"payload\":{\"id\":\"evt_%d\",\"type\":%q,\"properties\":%s}}\n\n", n, ev[0], ev[1])
	}
	return b
}

// BenchmarkEventStream reads run ends from GET /global/event through HTTPClient.Events, as
// the Manager's event loop does: ns/op is the client's cost of one frame (SSE parse and
// decode, the loopback read included).
func BenchmarkEventStream(b *testing.B) {
	const runs = 1000
	var body []byte
	for i := range runs {
		body = append(body, runEndFrames(i)...)
	}
	frames := bytes.Count(body, []byte("\n\n"))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write([]byte("data: {\"directory\":\"\",\"payload\":{\"type\":\"server.connected\",\"properties\":{}}}\n\n"))
		for range (b.N + frames - 1) / frames {
			w.Write(body)
		}
	}))
	defer srv.Close()
	c, err := NewHTTPClient(srv.URL)
	if err != nil {
		b.Fatal(err)
	}
	st, err := c.Events(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	b.ReportAllocs()
	b.ResetTimer()
	n := 0
	for ev, err := range st.All() {
		if err != nil {
			break
		}
		if ev.Type != EventServerConnected {
			if n++; n == b.N {
				break
			}
		}
	}
	if n < b.N {
		b.Fatalf("read %d frames, want %d", n, b.N)
	}
}
