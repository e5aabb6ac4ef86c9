package mcpserver

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// B-1: a call id belongs to one call; candidates of several sessions are never taken;
// identical calls of one session take one part each.
func TestClaims(t *testing.T) {
	var c claims
	now := time.Now()
	a1 := candidate{session: "ses_a", callID: "a1"}
	a2 := candidate{session: "ses_a", callID: "a2"}
	b1 := candidate{session: "ses_b", callID: "b1"}
	if _, n := c.take([]candidate{a1, b1}, now); n != 2 {
		t.Fatalf("two sessions: n = %d", n)
	}
	if _, n := c.take(nil, now); n != 0 {
		t.Fatalf("none: n = %d", n)
	}
	if !c.claim("b1", now) || c.claim("b1", now) {
		t.Fatal("claim b1 twice")
	}
	if got, n := c.take([]candidate{a1, b1}, now); n != 1 || got != a1 {
		t.Fatalf("b1 claimed: %v %d", got, n)
	}
	if got, n := c.take([]candidate{a1, a2, b1}, now); n != 1 || got != a2 {
		t.Fatalf("a1 claimed: %v %d", got, n)
	}
	if _, n := c.take([]candidate{a1, a2, b1}, now); n != 0 {
		t.Fatalf("all claimed: n = %d", n)
	}
	c.release("a1", now)
	if _, ok := c.takeOne([]candidate{a1}, now.Add(claimGrace)); ok {
		t.Fatal("a1 taken within the grace period")
	}
	if got, ok := c.takeOne([]candidate{a1}, now.Add(claimGrace+time.Second)); !ok || got != a1 {
		t.Fatal("a1 not taken after the grace period")
	}
	c.release("unknown", now) // no effect
	if _, taken := c.ids["unknown"]; taken {
		t.Fatal("release claimed an id")
	}
}

func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		raw, handler, input, caller string
		object                      bool
	}{
		{``, ``, `{}`, ``, true},
		{`null`, `null`, `{}`, ``, true},
		{`{"a":1}`, `{"a":1}`, `{"a":1}`, ``, true},
		{`{"a":1,"_caller":{"sessionID":"s"}}`, `{"a":1}`, `{"_caller":{"sessionID":"s"},"a":1}`, `{"sessionID":"s"}`, true},
		{`{"_caller":null}`, `{}`, `{"_caller":null}`, `null`, true},
		{`[1]`, `[1]`, `null`, ``, false},
		{`5`, `5`, `null`, ``, false},
		{`{"a":`, `{"a":`, `null`, ``, false},
	} {
		a := parseArgs(json.RawMessage(tc.raw))
		in, _ := json.Marshal(a.input)
		if string(a.handler) != tc.handler || string(in) != tc.input || string(a.caller) != tc.caller || a.object != tc.object {
			t.Errorf("parseArgs(%s) = %s %s %s %t", tc.raw, a.handler, in, a.caller, a.object)
		}
	}
	if !inputEqual(json.RawMessage(`{"b":[1,2.0],"a":"x","_caller":{"c":1}}`), parseArgs(json.RawMessage(`{"_caller":{"c":1.0},"a":"x","b":[1.0,2]}`)).input) {
		t.Error("inputEqual: same input in another form")
	}
	// _caller is part of what is compared: a part stored with another one, or without one,
	// is another call.
	for _, stored := range []string{`{"a":"x"}`, `{"a":"x","_caller":{"c":2}}`} {
		if inputEqual(json.RawMessage(stored), parseArgs(json.RawMessage(`{"a":"x","_caller":{"c":1}}`)).input) {
			t.Errorf("inputEqual: %s", stored)
		}
	}
	if inputEqual(json.RawMessage(`{"a":"x","_caller":{"c":1}}`), parseArgs(json.RawMessage(`{"a":"x"}`)).input) {
		t.Error("inputEqual: a call without _caller matches a part with one")
	}
	if inputEqual(json.RawMessage(`{"a":"x"}`), parseArgs(json.RawMessage(`{"a":"y"}`)).input) {
		t.Error("inputEqual: other input")
	}
}

// R: no input — arguments, _caller, _meta — makes a call panic; every call without a
// caller is an error for the model.
func FuzzCall(f *testing.F) {
	fake := opencodetest.NewFakeClient()
	defer fake.Close()
	m, err := asyncagents.New(fake)
	if err != nil {
		f.Fatal(err)
	}
	defer m.Close(context.Background())
	s, err := New(m, fake, WithLookupWait(0), WithCallerModes(CallerFromMeta, CallerFromPlugin, CallerFromLookup))
	if err != nil {
		f.Fatal(err)
	}
	defer s.Close()
	for _, seed := range []struct {
		tool       uint8
		args, meta string
	}{
		{0, `{"description":"d","prompt":"p","agent":"general"}`, `{}`},
		{1, `{"task_id":"ses_x","block":true,"timeout":0.01}`, `{"sessionID":"ses_x"}`},
		{2, `{"_caller":{"sessionID":"ses_x","callID":"c"}}`, `{"progressToken":1}`},
		{3, `{"status":"bogus","_caller":[]}`, `{"sessionID":5}`},
		{4, `null`, `null`},
		{0, `{"a":{"b":[{"c":null}]}}`, `{"sessionID":{"x":1}}`},
		{1, "\xff\xfe", `[`},
	} {
		f.Add(seed.tool, []byte(seed.args), []byte(seed.meta))
	}
	names := []string{"asyncagents_task", "asyncagents_output", "asyncagents_cancel", "asyncagents_list", "asyncagents_clear", "asyncagents_merge", "bogus"}
	f.Fuzz(func(t *testing.T, tool uint8, args, meta []byte) {
		var md mcp.Meta
		_ = json.Unmarshal(meta, &md)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := s.call(ctx, names[int(tool)%len(names)], args, md, nil)
		if err == nil {
			t.Fatalf("a call with no caller succeeded: %s %s", args, meta)
		}
		if strings.Contains(err.Error(), "internal error") {
			t.Fatalf("panic: %v", err)
		}
	})
}
