package asyncagents

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for a logger on several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A long-lived goroutine that panics is logged and started again; stop ends it, and every
// goroutine is waited for.
func TestBackgroundKeepRestartsAfterAPanic(t *testing.T) {
	var log syncBuffer
	b := newBackground(&config{clock: systemClock{}, logger: slog.New(slog.NewTextHandler(&log, nil)), requestTimeout: time.Second})
	var runs atomic.Int32
	again := make(chan struct{})
	b.keep("a loop", func() {
		if runs.Add(1) == 1 {
			panic("boom")
		}
		close(again)
		<-b.stopc
	})
	select {
	case <-again:
	case <-time.After(10 * time.Second):
		t.Fatal("the loop did not start again after its panic")
	}
	b.stop()
	if err := waitCtx(context.Background(), &b.wg); err != nil || !strings.Contains(log.String(), "boom") {
		t.Errorf("wait: %v; log %q", err, log.String())
	}
	if b.wait(time.Hour) {
		t.Error("wait after stop slept")
	}
}
