package asyncagents

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/asyncagents/asyncagents/internal/scan"
)

// stepInfo reads the same step whether the scan takes the properties or declines them and
// they are decoded (here: whitespace, which the scan declines).
func TestStepInfoScannedOrDecoded(t *testing.T) {
	want := scan.InfoFacts{Role: "assistant", Completed: 2, Finish: "stop", Cost: 0.25,
		Tokens: scan.Tokens{Input: 100, Output: 20}}
	want.Tokens.Cache.Read = 7
	for _, props := range []string{
		`{"sessionID":"ses_1","info":{"id":"msg_2","role":"assistant","time":{"created":1,"completed":2},"cost":0.25,"tokens":{"input":100,"output":20,"reasoning":0,"cache":{"read":7,"write":0}},"finish":"stop"}}`,
		`{"sessionID": "ses_1", "info": {"id": "msg_2", "role": "assistant", "time": {"completed": 2}, "cost": 0.25, "tokens": {"input": 100, "output": 20, "cache": {"read": 7}}, "finish": "stop"}}`,
	} {
		got, ok := stepInfo([]byte(props))
		got.ID, got.ParentID = "", "" // the decode leaves them out: stepLocked takes the id first
		if !ok || !cmp.Equal(got, want) {
			t.Errorf("stepInfo(%s) = %+v, %v; want %+v", props, got, ok, want)
		}
	}
	if _, ok := stepInfo([]byte(`{"info":`)); ok {
		t.Error("stepInfo of a broken event reported ok")
	}
}
