package opencodetest

import "sync"

// logBuffer collects process output, keeping the last 1 MiB.
type logBuffer struct {
	mu    sync.Mutex
	buf   []byte
	total int // bytes written so far
}

const maxLog = 1 << 20

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	l.total += len(p)
	if len(l.buf) > maxLog {
		l.buf = append(l.buf[:0], l.buf[len(l.buf)-maxLog:]...)
	}
	return len(p), nil
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.buf)
}

// Len returns how many bytes were written so far (including those no longer kept).
func (l *logBuffer) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

// Since returns what was written after the first mark bytes, as far as it is kept.
func (l *logBuffer) Since(mark int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	skip := mark - (l.total - len(l.buf))
	if skip <= 0 {
		return string(l.buf)
	}
	return string(l.buf[skip:])
}

// Tail returns the last n bytes of the log.
func (l *logBuffer) Tail(n int) string {
	s := l.String()
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
