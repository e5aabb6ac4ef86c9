package asyncagents_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/asyncagentstest"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// BenchmarkRealServerForkModes measures what each fork mode gives a forked task of a caller
// of 10, 100 and 1,000 messages, on the real server with the scripted model recording the
// requests (the caller's messages are notes posted without reply, then one prompt the model
// answers). Reported per launch:
//
//	shared-bytes, shared-%  the longest common prefix of the caller's last model request and
//	                        the child's first (tools, then messages, as sent), and its share
//	                        of the caller's request: what a provider's prompt cache can read
//	first-request-bytes     the child's first request
//	launch-ms               how long Launch took
//
// It takes a minute or two, so it runs only when ASYNCAGENTS_BENCH_FORKMODES is set (make
// bench-fork-modes).
func BenchmarkRealServerForkModes(b *testing.B) {
	if os.Getenv("ASYNCAGENTS_BENCH_FORKMODES") == "" {
		b.Skip("set ASYNCAGENTS_BENCH_FORKMODES=1 (make bench-fork-modes): it posts a thousand messages")
	}
	srv := opencodetest.Start(b)
	c := srv.Client()
	m, err := asyncagents.New(c, asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = m.Close(context.Background()) })
	for _, n := range []int{10, 100, 1000} {
		tag := "[fm" + strconv.Itoa(n) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "]"
		parent := forkModesParent(b, c, n, tag)
		last := lastChat(b, srv.Model.Requests(), tag+" say ok")
		for _, mode := range []asyncagents.ForkMode{asyncagents.ForkDigest, asyncagents.ForkNative} {
			b.Run(fmt.Sprintf("parent=%d/mode=%s", n, mode), func(b *testing.B) {
				var shared, size int
				var launch time.Duration
				for i := range b.N {
					marker := fmt.Sprintf("%s %s %d", tag, mode, i)
					caller := asyncagents.Caller{SessionID: parent, Agent: "build"}
					start := time.Now()
					task, err := m.Launch(context.Background(), asyncagents.LaunchInput{Caller: caller, Description: "fork " + string(mode),
						Agent: "build", Prompt: marker + " answer ok", Fork: true, ForkMode: mode})
					launch += time.Since(start)
					if err != nil {
						b.Fatal(err)
					}
					if got := asyncagentstest.Await(b, m, caller, task.ID); got.Status != asyncagents.StatusCompleted || got.ForkMode != mode {
						b.Fatalf("task %s in mode %q: %q", got.Status, got.ForkMode, got.Error)
					}
					first := firstRequest(b, srv.Model, marker)
					x, y := last.Rendered(), first.Rendered()
					k := 0
					for k < min(len(x), len(y)) && x[k] == y[k] {
						k++
					}
					shared, size = shared+k, size+len(y)
					if i == 0 {
						b.ReportMetric(100*float64(k)/float64(len(x)), "shared-%")
					}
				}
				b.ReportMetric(float64(shared)/float64(b.N), "shared-bytes")
				b.ReportMetric(float64(size)/float64(b.N), "first-request-bytes")
				b.ReportMetric(float64(launch.Milliseconds())/float64(b.N), "launch-ms")
			})
		}
	}
}

// forkModesParent creates a session of n messages: n-2 notes posted without reply, then a
// prompt tagged tag the model answers.
func forkModesParent(b *testing.B, c *opencode.HTTPClient, n int, tag string) string {
	b.Helper()
	ctx := context.Background()
	s, err := c.CreateSession(ctx, opencode.CreateSessionRequest{Title: "parent " + tag})
	if err != nil {
		b.Fatal(err)
	}
	for i := range n - 2 {
		note := fmt.Sprintf("%s note %d: %s", tag, i, strings.Repeat("context ", 8))
		if _, err := c.Prompt(ctx, s.ID, opencode.PromptRequest{NoReply: true, Agent: "build",
			Parts: []opencode.TextPartInput{opencode.NewText(note)}}); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := c.Prompt(ctx, s.ID, opencode.PromptRequest{Agent: "build",
		Parts: []opencode.TextPartInput{opencode.NewText(tag + " say ok")}}); err != nil {
		b.Fatal(err)
	}
	return s.ID
}
