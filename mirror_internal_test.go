package asyncagents

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/asyncagents/asyncagents/manager"
	"github.com/asyncagents/asyncagents/opencode"
)

// Events of a run as OpenCode 1.18.33 writes them (shapes trimmed).

func msgEvent(id, role, extra string) opencode.Event {
	return opencode.Event{Type: opencode.EventMessageUpdated, Properties: json.RawMessage(fmt.Sprintf(
		`{"sessionID":"ses_1","info":{"id":%q,"sessionID":"ses_1","role":%q%s}}`, id, role, extra))}
}

func partEventJSON(msg, id, body string) opencode.Event {
	return opencode.Event{Type: opencode.EventMessagePartUpdate, Properties: json.RawMessage(fmt.Sprintf(
		`{"sessionID":"ses_1","part":{"id":%q,"messageID":%q,"sessionID":"ses_1",%s},"time":1}`, id, msg, body))}
}

const (
	created   = `,"time":{"created":1}`
	completed = `,"time":{"created":1,"completed":2}`
)

// apply gives the mirror the events, as handle does.
func (r *runMirror) apply(evs ...opencode.Event) {
	for _, ev := range evs {
		switch ev.Type {
		case opencode.EventMessageUpdated:
			r.message(ev.Properties)
		case opencode.EventMessagePartUpdate:
			p, ok := decodePart(ev.Properties)
			r.part(&p, ok)
		default:
			r.removed()
		}
	}
}

// twoSteps is a run of a tool step and a reply step with reasoning, two text parts and an
// ignored one, the events in the order OpenCode sends them up to the idle.
func twoSteps() []opencode.Event {
	return []opencode.Event{
		msgEvent("msg_02", "user", created),
		partEventJSON("msg_02", "prt_01", `"type":"text","text":"RUN:ls"`),
		msgEvent("msg_03", "assistant", created),
		msgEvent("msg_02", "user", created+`,"summary":{"diffs":[]}`),
		partEventJSON("msg_03", "prt_02", `"type":"step-start"`),
		partEventJSON("msg_03", "prt_03", `"type":"tool","tool":"bash","state":{"status":"pending","input":{},"raw":""}`),
		partEventJSON("msg_03", "prt_03", `"type":"tool","tool":"bash","state":{"status":"completed","output":"x"}`),
		partEventJSON("msg_03", "prt_04", `"type":"step-finish","reason":"tool-calls"`),
		msgEvent("msg_03", "assistant", completed+`,"finish":"tool-calls"`),
		msgEvent("msg_03", "assistant", completed+`,"finish":"tool-calls"`),
		msgEvent("msg_05", "assistant", created),
		partEventJSON("msg_05", "prt_06", `"type":"step-start"`),
		partEventJSON("msg_05", "prt_07", `"type":"reasoning","text":"","time":{"start":1}`),
		partEventJSON("msg_05", "prt_07", `"type":"reasoning","text":"hmm","time":{"start":1,"end":2}`),
		partEventJSON("msg_05", "prt_08", `"type":"text","text":"","time":{"start":1}`),
		partEventJSON("msg_05", "prt_08", `"type":"text","text":"first","time":{"start":1,"end":2}`),
		partEventJSON("msg_05", "prt_09", `"type":"text","text":"skipped","ignored":true,"time":{"start":1,"end":2}`),
		partEventJSON("msg_05", "prt_10", `"type":"text","text":"","time":{"start":1}`),
		partEventJSON("msg_05", "prt_10", `"type":"text","text":"second","time":{"start":1,"end":2}`),
		partEventJSON("msg_05", "prt_11", `"type":"step-finish","reason":"stop"`),
		msgEvent("msg_05", "assistant", completed+`,"finish":"stop"`),
		msgEvent("msg_05", "assistant", completed+`,"finish":"stop"`),
	}
}

// T-6 (a reconcile decides a run from its latest messages): a mirror that saw a whole run on one live connection gives Decide what a read would:
// the same verdict and result.
func TestMirrorDecidesAsARead(t *testing.T) {
	r := &runMirror{}
	evs := twoSteps()
	for i, ev := range evs {
		r.apply(ev)
		if got := r.reply(); (got != nil) != (i == len(evs)-2 || i == len(evs)-1) {
			t.Fatalf("after event %d: reply = %v", i, got)
		}
	}
	msgs := r.reply()
	v := manager.Decide(msgs, manager.Run{Idle: true})
	if v.Outcome != manager.Completed || v.Result != "first\nsecond" {
		t.Fatalf("Decide on the mirror = %+v", v)
	}
	if len(msgs) != 2 || msgs[0].Info.ID != "msg_02" || msgs[1].Info.ID != "msg_05" || len(msgs[1].Parts) != 3 {
		t.Errorf("mirrored messages = %+v; want the prompt and the reply with its three text parts", msgs)
	}
	// The same run read back: Decide gives the same.
	read := []opencode.Message{
		{Info: opencode.MessageInfo{ID: "msg_02", Role: "user"}, Parts: []opencode.Part{{Type: "text", Text: "RUN:ls"}}},
		{Info: opencode.MessageInfo{ID: "msg_03", Role: "assistant", Finish: "tool-calls", Time: opencode.MessageTime{Created: 1, Completed: 2}}},
		{Info: opencode.MessageInfo{ID: "msg_05", Role: "assistant", Finish: "stop", Time: opencode.MessageTime{Created: 1, Completed: 2}},
			Parts: []opencode.Part{{Type: "step-start"}, {Type: "reasoning", Text: "hmm"}, {Type: "text", Text: "first"},
				{Type: "text", Text: "skipped", Ignored: true}, {Type: "text", Text: "second"}, {Type: "step-finish"}}},
	}
	if w := manager.Decide(read, manager.Run{Idle: true}); w != v {
		t.Errorf("Decide on a read = %+v, on the mirror %+v", w, v)
	}
	// The frames are replayed only for the idle of the connection that carried them all
	// and that the log is bound to.
	frame := logFrame{props: evs[0].Properties, msg: true}
	for _, c := range []struct {
		name  string
		bound uint64   // the connection bound, 0 for none
		from  []uint64 // the connection of each frame
		idle  uint64
		want  bool
	}{
		{"bound, frames and idle on it", 3, []uint64{3, 3}, 3, true},
		{"not bound", 0, []uint64{3}, 3, false},
		{"idle on another connection", 3, []uint64{3}, 4, false},
		{"frames on another connection", 4, []uint64{3}, 4, false},
		{"frames on two connections", 4, []uint64{3, 4}, 4, false},
		{"no frames", 3, nil, 3, false},
		{"no connection", 0, []uint64{0}, 0, false},
	} {
		l := &runLog{}
		l.bind(c.bound)
		l.bind(c.bound + 1) // bound once: the first binds
		for _, e := range c.from {
			l.add(frame, e)
		}
		if got := l.snapshot(c.idle) != nil; got != c.want {
			t.Errorf("%s: replayed %v, want %v", c.name, got, c.want)
		}
	}
}

// T-6: a mirror leaves to a read every run it did not see complete.
func TestMirrorLeavesUnfinishedRunsToARead(t *testing.T) {
	run := twoSteps()
	without := func(i int) []opencode.Event { return append(append([]opencode.Event{}, run[:i]...), run[i+1:]...) }
	for name, evs := range map[string][]opencode.Event{
		"text not final": without(18), // prt_10's final update
		"tool running": append(twoSteps()[:20], partEventJSON("msg_05", "prt_12", `"type":"tool","tool":"bash","state":{"status":"running"}`),
			msgEvent("msg_05", "assistant", completed+`,"finish":"stop"`)),
		"not completed": run[:20],
		"error":         append(twoSteps(), msgEvent("msg_05", "assistant", completed+`,"error":{"name":"APIError","data":{"message":"x"}}`)),
		"no finish":     append(twoSteps()[:20], msgEvent("msg_05", "assistant", completed)),
		"tool-calls":    run[:10],
		"prompt only":   run[:2],
		"part of an unseen message": append(twoSteps()[:10], partEventJSON("msg_05", "prt_06", `"type":"step-start"`),
			msgEvent("msg_05", "assistant", completed+`,"finish":"stop"`)),
		"message removed": append(twoSteps(), opencode.Event{Type: opencode.EventMessageRemoved, Properties: json.RawMessage(`{"sessionID":"ses_1","messageID":"msg_03"}`)}),
		"undecodable": append(append(twoSteps()[:5], opencode.Event{Type: opencode.EventMessageUpdated,
			Properties: json.RawMessage(`{"sessionID":"ses_1","info":[]}`)}), run[5:]...),
		"a newer prompt": append(twoSteps(), msgEvent("msg_06", "user", created)),
	} {
		r := &runMirror{}
		r.apply(evs...)
		if got := r.reply(); got != nil {
			t.Errorf("%s: reply = %+v, want nil", name, got)
		}
	}

	// A resumed run: the messages up to its baseline are the earlier runs'.
	r := &runMirror{baseline: "msg_05"}
	r.apply(twoSteps()...)
	if got := r.reply(); got != nil || len(r.msgs) != 0 {
		t.Errorf("the earlier run's events went into the resumed run's mirror: %+v", r.msgs)
	}
	r.apply(msgEvent("msg_07", "user", created), msgEvent("msg_08", "assistant", created),
		partEventJSON("msg_08", "prt_13", `"type":"text","text":"again","time":{"start":1,"end":2}`),
		msgEvent("msg_08", "assistant", completed+`,"finish":"stop"`))
	if v := manager.Decide(r.reply(), manager.Run{Baseline: "msg_05", Idle: true}); v.Outcome != manager.Completed || v.Result != "again" {
		t.Errorf("resumed run: Decide = %+v", v)
	}

	// Memory is bounded: a run of more messages than maxMirrored is left to a read.
	r = &runMirror{}
	for i := range maxMirrored + 1 {
		r.apply(msgEvent(fmt.Sprintf("msg_%03d", i), "user", created))
	}
	r.apply(msgEvent("msg_999", "assistant", completed+`,"finish":"stop"`))
	if r.reply() != nil || len(r.msgs) > 1 {
		t.Errorf("a mirror of %d messages kept %d and decided", maxMirrored+2, len(r.msgs))
	}
}

// T-6: replay decodes only the last frame of each message and part, and decides as applying
// every frame does: on the whole two-step run, on each of its prefixes, and with any one
// frame missing.
func TestReplayDecodesOnlyLastFrames(t *testing.T) {
	run := twoSteps()
	var runs [][]opencode.Event
	for i := range run {
		runs = append(runs, run[:i+1])
		runs = append(runs, append(append([]opencode.Event{}, run[:i]...), run[i+1:]...))
	}
	for k, evs := range runs {
		frames := make([]logFrame, len(evs))
		for i, ev := range evs {
			frames[i] = logFrame{props: ev.Properties, msg: ev.Type == opencode.EventMessageUpdated}
		}
		r := &runMirror{}
		r.apply(evs...)
		want, got := r.reply(), replay(frames, "")
		if !reflect.DeepEqual(got, want) {
			t.Errorf("run %d (%d frames): replay = %+v, applying every frame = %+v", k, len(evs), got, want)
		}
	}
}
