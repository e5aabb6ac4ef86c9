package dashboard_test

import (
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents/dashboard"
	"github.com/asyncagents/asyncagents/internal/testmain"
)

// rawStream reads GET /api/events through a small buffer and keeps nothing of what it
// reads, so that the heap the test measures is the handler's.
type rawStream struct {
	resp     *http.Response
	snapshot chan int      // receives the size of the stream's first snapshot
	done     chan struct{} // closed when the body ended
}

func openRaw(t *testing.T, e *env) *rawStream {
	t.Helper()
	resp, err := e.srv.Client().Get(e.srv.URL + "/api/events")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		t.Fatalf("GET /api/events = %d", resp.StatusCode)
	}
	s := &rawStream{resp: resp, snapshot: make(chan int, 1), done: make(chan struct{})}
	go s.read()
	t.Cleanup(s.close)
	return s
}

// read counts the bytes up to the end of the snapshot: the second blank line of the
// stream ("retry: …\n\n", then the snapshot's id, event and data lines, "\n\n").
func (s *rawStream) read() {
	defer close(s.done)
	buf := make([]byte, 4<<10)
	var n, blank int
	var prev byte
	for {
		k, err := s.resp.Body.Read(buf)
		for _, b := range buf[:k] {
			n++
			if b == '\n' && prev == '\n' {
				if blank++; blank == 2 {
					s.snapshot <- n
				}
			}
			prev = b
		}
		if err != nil {
			return
		}
	}
}

func (s *rawStream) close() {
	s.resp.Body.Close()
	<-s.done
}

func (s *rawStream) awaitSnapshot(t *testing.T) int {
	t.Helper()
	select {
	case n := <-s.snapshot:
		return n
	case <-s.done:
		t.Fatal("stream ended before its snapshot")
	case <-time.After(30 * time.Second):
		t.Fatal("no snapshot in 30 s")
	}
	return 0
}

func heapAlloc() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// An idle event stream does not keep the buffer its snapshot was written from. With
// a 2 MiB snapshot, each stream held 2 MiB or more of heap after sending it.
//
// S-3: idle and stalled connections time out; event streams are bounded.
func TestIdleStreamHoldsNoSnapshot(t *testing.T) {
	e := newEnv(t, held())
	big := strings.Repeat("p", 64<<10)
	for range 40 {
		e.launch(t, e.caller, "big", big, false)
	}
	// The handler has seen the launches once a snapshot holds them all.
	var size int
	if !testmain.Eventually(10*time.Second, func() bool {
		s := openRaw(t, e)
		size = s.awaitSnapshot(t)
		s.close()
		return size >= 40*len(big)
	}) {
		t.Fatalf("snapshot of %d bytes, want the 40 tasks' %d", size, 40*len(big))
	}

	const n = 8
	before := heapAlloc()
	for range n {
		openRaw(t, e).awaitSnapshot(t)
	}
	after := heapAlloc()
	per := (int64(after) - int64(before)) / n
	t.Logf("snapshot %d KiB; heap per idle stream %d KiB (%d streams, %d → %d KiB)", size>>10, per>>10, n, before>>10, after>>10)
	if per > 256<<10 {
		t.Errorf("each idle stream holds %d KiB of heap with a %d KiB snapshot; want at most 256 KiB", per>>10, size>>10)
	}
}

// At most DefaultMaxStreams event streams at once; the next one is answered 503 with
// Retry-After, and one can open again when another ends.
//
// S-3: idle and stalled connections time out; event streams are bounded.
func TestStreamsBeyondMaxAreRefused(t *testing.T) {
	e := newEnv(t, nil)
	var open []*rawStream
	for range dashboard.DefaultMaxStreams {
		s := openRaw(t, e)
		s.awaitSnapshot(t)
		open = append(open, s)
	}
	host := strings.TrimPrefix(e.srv.URL, "http://")
	code, hdr, body := e.doHost(t, http.MethodGet, "/api/events", host) // gives up after 10 s
	wantError(t, "one stream too many", code, http.StatusServiceUnavailable, hdr, body)
	if ra, err := strconv.Atoi(hdr.Get("Retry-After")); err != nil || ra < 1 {
		t.Errorf("Retry-After = %q", hdr.Get("Retry-After"))
	}
	open[0].resp.Body.Close()
	<-open[0].done
	if !testmain.Eventually(10*time.Second, func() bool {
		resp, err := e.srv.Client().Get(e.srv.URL + "/api/events")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}) {
		t.Error("no stream opens after one of the others ended")
	}

	// WithMaxStreams sets the bound.
	e2 := newEnv(t, nil, dashboard.WithMaxStreams(1))
	openRaw(t, e2).awaitSnapshot(t)
	code, hdr, body = e2.doHost(t, http.MethodGet, "/api/events", strings.TrimPrefix(e2.srv.URL, "http://"))
	wantError(t, "WithMaxStreams(1), second stream", code, http.StatusServiceUnavailable, hdr, body)
}

// An event stream lives past the ReadTimeout and WriteTimeout of the http.Server it
// is served by. (net/http clears the read deadline once a request's body has been read,
// so the ReadTimeout does not cancel it; each write of the stream sets its own deadline.)
//
// S-3: idle and stalled connections time out; event streams are bounded.
func TestStreamOutlivesReadTimeout(t *testing.T) {
	const readTimeout = 200 * time.Millisecond
	e := newEnvServer(t, held(), func(s *http.Server) { s.ReadTimeout, s.WriteTimeout = readTimeout, readTimeout }, dashboard.WithHeartbeat(50*time.Millisecond))
	s := openStream(t, e, "")
	if ev := s.next(t); ev.name != "snapshot" {
		t.Fatalf("first event %+v", ev)
	}
	start := time.Now()
	for time.Since(start) < 5*readTimeout {
		select {
		case <-s.events:
		case <-s.done:
			t.Fatalf("the stream ended %v after it opened, with the server's Read- and WriteTimeout %v", time.Since(start).Round(time.Millisecond), readTimeout)
		case <-time.After(5 * time.Second):
			t.Fatal("no heartbeat in 5 s")
		}
	}
	task := e.launch(t, e.caller, "late", "x", false)
	s.until(t, statusIs(task.ID, "running"))
}
