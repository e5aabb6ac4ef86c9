package asyncagents

import (
	"context"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// background owns the Manager's goroutines, and says what a panic does in them.
//
// Every goroutine of a Manager is started by keep (the long-lived ones, one per part: the
// event stream, the applier of its events, the status poll, the resident reconcilers, the
// notifier, and with several hosts the lease loop and the slot granter) or spawn (the
// short-lived ones: extra reconcilers in a burst, notification workers, queued starts and
// follow-ups after New, a hand-over, a permission answer), which count it in wg; stop closes
// stop and cancels ctx, and Close waits for all of them. A panic in one of them — in the
// Client, the Store, a PermissionPolicy or the Manager itself — never reaches the host:
//
//   - work for one task records the panic on that task: a reconcile ends the task in
//     StatusError with the panic's value and stack; a notification attempt counts as a
//     failed attempt and is retried;
//   - anything else is logged with its stack (WithLogger) and the goroutine goes on: a loop
//     with its next round (recoverAndLog around each round); a goroutine whose work ended by
//     a panic ends, and a long-lived one starts again after panicPause.
//
// It also bounds the requests the goroutines make (requestCtx, quickCtx) and tells time by
// the Manager's Clock. Its fields are set by newBackground and never change; it is safe for
// concurrent use.
type background struct {
	ctx    context.Context // cancelled by stop: ends background I/O
	cancel context.CancelFunc
	stopc  chan struct{} // closed by stop
	once   sync.Once
	wg     sync.WaitGroup

	clock          Clock
	logger         *slog.Logger
	requestTimeout time.Duration
}

func newBackground(cfg *config) *background {
	b := &background{stopc: make(chan struct{}), clock: cfg.clock, logger: cfg.logger, requestTimeout: cfg.requestTimeout}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	return b
}

// panicPause is how long a long-lived goroutine that ended by a panic waits before it starts
// again.
const panicPause = time.Second

// keep runs loop on a goroutine of its own until stop: when loop returns by a panic, the
// panic is logged and loop starts again panicPause later.
func (b *background) keep(what string, loop func()) {
	b.spawn(what, func() {
		for !b.safely(what, loop) && b.wait(panicPause) {
		}
	})
}

// spawn runs f once on a goroutine of its own, which Close waits for; a panic in f is
// logged.
func (b *background) spawn(what string, f func()) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		b.safely(what, f)
	}()
}

// safely runs f and reports whether it returned rather than panicked; a panic is logged.
func (b *background) safely(what string, f func()) (returned bool) {
	defer b.recoverAndLog(what)
	f()
	return true
}

// recoverAndLog is deferred around work that serves no single task: a panic there is logged
// with its stack and the goroutine goes on.
func (b *background) recoverAndLog(what string) {
	if r := recover(); r != nil {
		b.logger.Error("asyncagents: panic in "+what, "panic", r, "stack", string(debug.Stack()))
	}
}

// wait sleeps for d on the clock; false when the Manager is closing.
func (b *background) wait(d time.Duration) bool {
	select {
	case <-b.stopc:
		return false
	case <-b.clock.After(d):
		return true
	}
}

// stop tells every goroutine to stop and ends the requests in flight; once.
func (b *background) stop() {
	b.once.Do(func() {
		close(b.stopc)
		b.cancel()
	})
}

// stopping reports whether stop was called.
func (b *background) stopping() bool { return isClosed(b.stopc) }

func (b *background) now() time.Time { return b.clock.Now() }

// requestCtx bounds one request of the goroutines by the request timeout, so a server that
// accepts a connection and never answers cannot hold a goroutine.
func (b *background) requestCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(b.ctx, b.requestTimeout)
}

// quickTimeout bounds a request the server answers at once: the status poll, the list of
// permission requests and the opening of the event stream.
func (b *background) quickTimeout() time.Duration { return min(b.requestTimeout, QuickRequestTimeout) }

// quickCtx is requestCtx for a request the server answers at once.
func (b *background) quickCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(b.ctx, b.quickTimeout())
}

// waitCtx waits for wg or until ctx ends.
func waitCtx(ctx context.Context, wg *sync.WaitGroup) error {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// isClosed reports whether c is closed.
func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func newBackoff(initial, maxInterval time.Duration) *backoff.ExponentialBackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = initial
	b.MaxInterval = maxInterval
	return b
}
