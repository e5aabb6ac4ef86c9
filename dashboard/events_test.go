package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents/dashboard"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// --- event streams ---

type event struct{ id, name, data string }

// stream reads the events of GET /api/events on its own goroutine.
type stream struct {
	resp   *http.Response
	events chan event
	done   chan struct{} // closed when the body ended
}

func openStream(t *testing.T, e *env, lastID string, hdr ...string) *stream {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.srv.URL+"/api/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		resp.Body.Close()
		t.Fatalf("GET /api/events = %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	s := &stream{resp: resp, events: make(chan event, 10000), done: make(chan struct{})}
	go s.read()
	t.Cleanup(s.close)
	return s
}

func (s *stream) read() {
	defer close(s.done)
	dashboard.ReadSSE(s.resp.Body, func(ev dashboard.SSEEvent) bool {
		s.events <- event{id: ev.ID, name: ev.Name, data: ev.Data}
		return true
	})
}

func (s *stream) close() {
	s.resp.Body.Close()
	<-s.done
}

// next returns the next event that is not a comment, failing after 10 s.
func (s *stream) next(t *testing.T) event {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				t.Fatal("stream ended")
			}
			if ev.name != "comment" {
				return ev
			}
		case <-s.done:
			select {
			case ev := <-s.events:
				if ev.name != "comment" {
					return ev
				}
				continue
			default:
			}
			t.Fatal("stream ended")
		case <-timeout:
			t.Fatal("no event in 10 s")
		}
	}
}

// change is a decoded change event.
type change struct {
	Seq     uint64
	Task    taskDoc
	Removed bool
}

func decode(t *testing.T, ev event) change {
	t.Helper()
	var c change
	if ev.name != "change" || json.Unmarshal([]byte(ev.data), &c) != nil {
		t.Fatalf("not a change: %+v", ev)
	}
	return c
}

// until reads changes until one satisfies cond and returns all it read.
func (s *stream) until(t *testing.T, cond func(change) bool) []event {
	t.Helper()
	var out []event
	for {
		ev := s.next(t)
		out = append(out, ev)
		if ev.name == "change" && cond(decode(t, ev)) {
			return out
		}
	}
}

func idNum(t *testing.T, id string) (string, uint64) {
	t.Helper()
	epoch, num, ok := strings.Cut(id, "-")
	var n uint64
	if _, err := fmt.Sscan(num, &n); !ok || err != nil {
		t.Fatalf("event id %q is not <epoch>-<n>", id)
	}
	return epoch, n
}

// statusIs is true of a change of task id to status, its start over (a launched task is
// running while it starts, and its start changes it again).
func statusIs(id, status string) func(change) bool {
	return func(c change) bool {
		return c.Task.str("id") == id && c.Task.str("status") == status && c.Task["starting"] != true
	}
}

// A client that reconnects with Last-Event-ID gets exactly the changes it missed.
func TestEventsResumeWithoutGaps(t *testing.T) {
	e := newEnv(t, held())
	before := e.launch(t, e.caller, "before", "x", false)

	ref := openStream(t, e, "") // never disconnects
	if snap := ref.next(t); snap.name != "snapshot" {
		t.Fatalf("first event = %+v", snap)
	} else if !strings.Contains(snap.data, before.ID) { // the handler had not seen the launch yet
		ref.until(t, statusIs(before.ID, "running"))
	}
	a := openStream(t, e, "")
	if ev := a.next(t); ev.name != "snapshot" || !strings.Contains(ev.data, before.ID) {
		t.Fatalf("second stream's first event = %+v, want a snapshot with %s", ev, before.ID)
	}
	task := e.launch(t, e.caller, "watched", "y", false)
	got := a.until(t, statusIs(task.ID, "running"))
	lastSeen := got[len(got)-1].id
	a.close()

	// Missed: a tool call, the completion, the notification, another launch.
	if err := e.f.Release(task.SessionID, opencodetest.Bash("echo hi"), opencodetest.Text("done")); err != nil {
		t.Fatal(err)
	}
	e.await(t, e.caller, task.ID)
	later := e.launch(t, e.caller, "later", "z", false)

	want := ref.until(t, statusIs(later.ID, "running"))
	b := openStream(t, e, lastSeen)
	got = b.until(t, statusIs(later.ID, "running"))
	// ref's events from after lastSeen are the ones b must get, in the same order.
	var i int
	for i = range want {
		if want[i].id == lastSeen {
			break
		}
	}
	want = want[i+1:]
	if len(got) != len(want) {
		t.Fatalf("resumed stream got %d events, want %d: %v", len(got), len(want), ids(got))
	}
	epoch, last := idNum(t, lastSeen)
	var seq uint64
	for k := range got {
		if got[k] != want[k] {
			t.Fatalf("event %d: got %+v, want %+v", k, got[k], want[k])
		}
		ep, n := idNum(t, got[k].id)
		if ep != epoch || n != last+uint64(k)+1 {
			t.Errorf("event %d id %s after %s: not the next", k, got[k].id, lastSeen)
		}
		c := decode(t, got[k])
		if seq != 0 && c.Seq != seq+1 {
			t.Errorf("seq %d after %d", c.Seq, seq)
		}
		seq = c.Seq
	}
	var sawTool, sawDone bool
	for _, ev := range got {
		c := decode(t, ev)
		if c.Task.str("id") == task.ID && c.Task.obj("progress")["toolCalls"] == 1.0 {
			sawTool = true
		}
		if c.Task.str("id") == task.ID && c.Task.str("status") == "completed" && c.Task.str("result") == "done" {
			sawDone = true
		}
	}
	if !sawTool || !sawDone {
		t.Errorf("resumed stream lacks the tool call (%v) or the completion (%v)", sawTool, sawDone)
	}

	// The same through ?lastEventId=, as the page sends it after it gave up and reconnects.
	c := openStreamQuery(t, e, lastSeen)
	if ev := c.next(t); ev != want[0] {
		t.Errorf("?lastEventId: first event %+v, want %+v", ev, want[0])
	}
}

func openStreamQuery(t *testing.T, e *env, lastID string) *stream {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/api/events?lastEventId="+lastID, nil)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	s := &stream{resp: resp, events: make(chan event, 1000), done: make(chan struct{})}
	go s.read()
	t.Cleanup(s.close)
	return s
}

func ids(evs []event) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, ev.name+" "+ev.id)
	}
	return out
}

// A client of another epoch (a restarted host), from the future, or too far behind gets a
// snapshot first.
func TestEventsSnapshotWhenResumeImpossible(t *testing.T) {
	e := newEnv(t, held(), dashboard.WithHistory(3))
	first := openStream(t, e, "")
	snap := first.next(t)
	epoch, n0 := idNum(t, snap.id)
	if n0 != 0 || snap.name != "snapshot" {
		t.Fatalf("first snapshot %+v", snap)
	}
	var last event
	for i := range 5 {
		task := e.launch(t, e.caller, fmt.Sprint("t", i), "x", false)
		evs := first.until(t, statusIs(task.ID, "running"))
		last = evs[len(evs)-1]
	}
	_, n := idNum(t, last.id)
	if n < 4 {
		t.Fatalf("only %d changes", n)
	}
	for _, c := range []struct {
		lastID string
		snap   bool
	}{
		{"0123456789abcdef-1", true},              // another epoch
		{"garbage", true},                         // not an id
		{snap.id, true},                           // more than 3 changes behind
		{fmt.Sprintf("%s-%d", epoch, n+5), true},  // from the future
		{fmt.Sprintf("%s-%d", epoch, n-3), false}, // 3 behind: all held
		{last.id, false},                          // up to date
	} {
		s := openStream(t, e, c.lastID)
		if c.snap {
			ev := s.next(t)
			if ev.name != "snapshot" || ev.id != last.id {
				t.Errorf("Last-Event-ID %s: first event %s %s, want a snapshot %s", c.lastID, ev.name, ev.id, last.id)
			}
			var sn struct {
				Time  time.Time
				Tasks []taskDoc
			}
			if err := json.Unmarshal([]byte(ev.data), &sn); err != nil || len(sn.Tasks) != 5 || time.Since(sn.Time) > time.Minute {
				t.Errorf("snapshot = %s", ev.data)
			}
		} else {
			_, from := idNum(t, c.lastID)
			for k := from + 1; k <= n; k++ {
				if ev := s.next(t); ev.name != "change" || ev.id != fmt.Sprintf("%s-%d", epoch, k) {
					t.Errorf("Last-Event-ID %s: got %s %s, want change %d", c.lastID, ev.name, ev.id, k)
				}
			}
		}
		s.close()
	}
}

func TestEventsHeartbeat(t *testing.T) {
	e := newEnv(t, nil, dashboard.WithHeartbeat(20*time.Millisecond))
	s := openStream(t, e, "")
	timeout := time.After(5 * time.Second)
	for beats := 0; beats < 3; {
		select {
		case ev := <-s.events:
			if ev.name == "comment" && ev.data == ": heartbeat" {
				beats++
			}
		case <-timeout:
			t.Fatal("fewer than 3 heartbeats in 5 s")
		}
	}
}

func TestCloseEndsStreams(t *testing.T) {
	e := newEnv(t, nil)
	s := openStream(t, e, "")
	s.next(t)
	start := time.Now()
	if err := e.h.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		t.Fatal("stream still open after Close")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close took %v", d)
	}
	_ = e.h.Close() // idempotent
	for _, path := range []string{"/api/events", "/api/tasks"} {
		code, hdr, body := e.do(t, http.MethodGet, path)
		wantError(t, "after Close: "+path, code, http.StatusServiceUnavailable, hdr, body)
	}
	if code, _, _ := e.do(t, http.MethodGet, "/"); code != http.StatusOK {
		t.Errorf("page after Close = %d", code)
	}
}

func TestManagerCloseEndsStreams(t *testing.T) {
	e := newEnv(t, nil)
	s := openStream(t, e, "")
	s.next(t)
	if err := e.m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		t.Fatal("stream still open after the Manager closed")
	}
	for _, path := range []string{"/api/events", "/api/tasks", "/api/tasks/ses_x"} {
		code, hdr, body := e.do(t, http.MethodGet, path)
		wantError(t, "manager closed: "+path, code, http.StatusServiceUnavailable, hdr, body)
	}
}
