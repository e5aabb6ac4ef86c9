package asyncagents_test

import (
	"context"
	"encoding/json"
	"iter"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/manager"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// readsClient records the message reads (Messages) per session and, with drop, keeps the
// events it matches from the Manager.
type readsClient struct {
	opencode.Client
	drop func(opencode.Event) bool

	mu    sync.Mutex
	reads map[string][]int // session → the limit of each read
}

func (c *readsClient) Messages(ctx context.Context, id string, limit int) ([]opencode.Message, error) {
	c.mu.Lock()
	if c.reads == nil {
		c.reads = map[string][]int{}
	}
	c.reads[id] = append(c.reads[id], limit)
	c.mu.Unlock()
	return c.Client.Messages(ctx, id, limit)
}

// readsOf returns the limits of the reads of session id so far.
func (c *readsClient) readsOf(id string) []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.reads[id])
}

func (c *readsClient) Events(ctx context.Context) (opencode.EventStream, error) {
	s, err := c.Client.Events(ctx)
	if err != nil || c.drop == nil {
		return s, err
	}
	return droppingStream{s, c.drop}, nil
}

type droppingStream struct {
	opencode.EventStream
	drop func(opencode.Event) bool
}

func (s droppingStream) All() iter.Seq2[opencode.Event, error] {
	return func(yield func(opencode.Event, error) bool) {
		for ev, err := range s.EventStream.All() {
			if err == nil && s.drop(ev) {
				continue
			}
			if !yield(ev, err) {
				return
			}
		}
	}
}

// streamManager returns a Manager on c whose runs are decided by their idle events alone
// (the status poll is an hour away), and a parent session, once the Manager's event stream
// delivers events.
func streamManager(t *testing.T, c opencode.Client, opts ...asyncagents.Option) (*asyncagents.Manager, asyncagents.Caller) {
	t.Helper()
	m := newManager(t, c, append([]asyncagents.Option{asyncagents.WithPollInterval(time.Hour)}, opts...)...)
	asyncagents.ReplayAlways(m)
	var caller asyncagents.Caller
	waitFor(t, 10*time.Second, func() bool {
		caller = fakeParent(t, c) // session.created
		return testmain.Eventually(100*time.Millisecond, func() bool { return asyncagents.StreamLive(m) })
	})
	return m, caller
}

// readDecision decides task's run from a read of its session, as a reconcile does.
func readDecision(t *testing.T, c opencode.Client, task asyncagents.Task, baseline string) manager.Verdict {
	t.Helper()
	msgs, err := c.Messages(context.Background(), task.ID, 8)
	if err != nil {
		t.Fatal(err)
	}
	return manager.Decide(msgs, manager.Run{Baseline: baseline, Idle: true})
}

// T-6: a run whose events the Manager received from its prompt to its idle is completed from
// them, without a read of its messages, with the result a read gives: a plain text reply, a
// reply after tool calls and reasoning, and a resumed run (decided on its own messages).
func TestCompletionFromEventsT6(t *testing.T) {
	c := &readsClient{Client: fakeClient(t)}
	m, caller := streamManager(t, c)
	decided := asyncagents.StreamDecided(m)
	for _, prompt := range []string{"hello", "THINK RUN:echo one ||| echo two"} {
		task := launch(t, m, caller, prompt)
		got := await(t, m, caller, task.ID)
		want := readDecision(t, c, task, "")
		if got.Status != asyncagents.StatusCompleted || want.Outcome != manager.Completed || got.Result != want.Result {
			t.Errorf("%q: %s %q; a read decides %v %q", prompt, got.Status, got.Result, want.Outcome, want.Result)
		}
		if reads := c.readsOf(task.ID); len(reads) != 1 { // readDecision's
			t.Errorf("%q: the Manager read the task's messages: %v", prompt, reads[:len(reads)-1])
		}
		if n := asyncagents.StreamDecided(m); n != decided+1 {
			t.Errorf("%q: %d runs decided from events, want %d", prompt, n, decided+1)
		}
		decided = asyncagents.StreamDecided(m)
	}

	task := launch(t, m, caller, "first run")
	await(t, m, caller, task.ID)
	before, err := c.Messages(context.Background(), task.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Resume(context.Background(), caller, task.ID, "RUN:echo again"); err != nil {
		t.Fatal(err)
	}
	got := await(t, m, caller, task.ID)
	want := readDecision(t, c, task, before[len(before)-1].Info.ID)
	if got.Status != asyncagents.StatusCompleted || got.ResumeCount != 1 || got.Result != want.Result || got.Result != "Ran 1 command(s); last output: again" {
		t.Errorf("resumed: %s %q (resume count %d); a read decides %q", got.Status, got.Result, got.ResumeCount, want.Result)
	}
	if n := asyncagents.StreamDecided(m); n != decided+2 {
		t.Errorf("%d runs decided from events, want %d", n, decided+2)
	}
	// Resume's look at the last message, and the two of this test. The first run's second
	// idle event (OpenCode sends session.status idle and session.idle) may come after the
	// resume started: that early idle is read, and the read finds the run still going.
	if reads := c.readsOf(task.ID); !slices.Equal(reads, []int{0, 1, 8}) && !slices.Equal(reads, []int{0, 1, 8, 8}) {
		t.Errorf("reads of the resumed task's messages: %v, want [0 1 8]", reads)
	}
}

// slowClient answers session creations and message reads after a delay, as a server on a
// network does.
type slowClient struct {
	*readsClient
	delay time.Duration
}

func (c slowClient) CreateSession(ctx context.Context, req opencode.CreateSessionRequest) (*opencode.Session, error) {
	time.Sleep(c.delay)
	return c.readsClient.CreateSession(ctx, req)
}

func (c slowClient) Messages(ctx context.Context, id string, limit int) ([]opencode.Message, error) {
	time.Sleep(c.delay)
	return c.readsClient.Messages(ctx, id, limit)
}

// T-6: without a test's say, runs are decided from their events when the server takes a
// while to answer (a read costs more than replaying them); mirror_internal_test.go shows that
// they are read when it answers within microseconds.
func TestCompletionFromEventsWhenReadsCostMoreT6(t *testing.T) {
	rc := &readsClient{Client: fakeClient(t)}
	c := slowClient{rc, 3 * time.Millisecond}
	m := newManager(t, c, asyncagents.WithPollInterval(time.Hour))
	var caller asyncagents.Caller
	waitFor(t, 10*time.Second, func() bool {
		caller = fakeParent(t, c)
		return testmain.Eventually(100*time.Millisecond, func() bool { return asyncagents.StreamLive(m) })
	})
	for i := range 3 {
		task := launch(t, m, caller, "hello "+strconv.Itoa(i))
		if got := await(t, m, caller, task.ID); got.Status != asyncagents.StatusCompleted {
			t.Fatalf("%s: %s", task.ID, got.Status)
		}
		if reads := rc.readsOf(task.ID); len(reads) != 0 {
			t.Errorf("%s: the Manager read the task's messages: %v", task.ID, reads)
		}
	}
	if n := asyncagents.StreamDecided(m); n != 3 {
		t.Errorf("%d of 3 runs decided from events, want 3", n)
	}
}

// partOf decodes the part of a message.part.updated event.
func partOf(ev opencode.Event) opencode.Part {
	var p struct {
		Part opencode.Part `json:"part"`
	}
	_ = json.Unmarshal(ev.Properties, &p)
	return p.Part
}

// infoOf decodes the info of a message.updated event.
func infoOf(ev opencode.Event) opencode.MessageInfo {
	var p struct {
		Info opencode.MessageInfo `json:"info"`
	}
	_ = json.Unmarshal(ev.Properties, &p)
	return p.Info
}

// T-6: when the events did not carry the whole run, the run is decided from a read, as
// before: a frame missing (the final text, the completion of the reply), a run
// that went on over a reconnect of the stream, and a reply that failed.
func TestCompletionFromEventsFallsBackToReadT6(t *testing.T) {
	finalText := func(ev opencode.Event) bool {
		p := partOf(ev)
		return ev.Type == opencode.EventMessagePartUpdate && p.Type == opencode.PartText && strings.Contains(string(p.Raw), `"end":`)
	}
	completed := func(ev opencode.Event) bool {
		return ev.Type == opencode.EventMessageUpdated && infoOf(ev).Time.Completed != 0
	}
	for _, tc := range []struct {
		name   string
		drop   func(opencode.Event) bool
		prompt string
		want   asyncagents.Status
	}{
		{"final text missing", finalText, "RUN:echo one", asyncagents.StatusCompleted},
		{"completion missing", completed, "hello", asyncagents.StatusCompleted},
		{"model error", nil, "FAIL:400", asyncagents.StatusError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &readsClient{Client: fakeClient(t), drop: tc.drop}
			m, caller := streamManager(t, c)
			task := launch(t, m, caller, tc.prompt)
			got := await(t, m, caller, task.ID)
			reads := c.readsOf(task.ID)
			want := readDecision(t, c, task, "")
			if got.Status != tc.want || got.Result != want.Result || got.Error != want.Error {
				t.Errorf("%s %q %q; want %s, and a read decides %q %q", got.Status, got.Result, got.Error, tc.want, want.Result, want.Error)
			}
			if len(reads) == 0 || asyncagents.StreamDecided(m) != 0 {
				t.Errorf("reads %v, %d runs decided from events; want a read to decide", reads, asyncagents.StreamDecided(m))
			}
		})
	}

	t.Run("reconnect", func(t *testing.T) {
		f := fakeClient(t, opencodetest.WithHeldRuns())
		c := &readsClient{Client: f}
		m, caller := streamManager(t, c)
		task := launch(t, m, caller, "held")
		waitFor(t, 10*time.Second, func() bool { return fakeBusy(f, task.ID) })
		f.DropEvents()
		waitFor(t, 10*time.Second, func() bool { return f.Streams() == 1 }) // a new connection
		reads := len(c.readsOf(task.ID))                                    // the reconcile after the reconnect
		if err := f.Release(task.ID, opencodetest.Text("done")); err != nil {
			t.Fatal(err)
		}
		got := await(t, m, caller, task.ID)
		if got.Status != asyncagents.StatusCompleted || got.Result != "done" {
			t.Errorf("after a reconnect: %s %q", got.Status, got.Result)
		}
		if n := len(c.readsOf(task.ID)); n <= reads || asyncagents.StreamDecided(m) != 0 {
			t.Errorf("%d reads after the release, %d runs decided from events; want a read to decide", n-reads, asyncagents.StreamDecided(m))
		}
	})
}

// T-6 on the real server: runs the events carried whole are completed from them, without a
// read, with the result a read decides (a plain reply, one after tool calls, one after
// reasoning); a run that fails with a model error is decided from a read, as before.
func TestRealServerCompletionFromEventsT6(t *testing.T) {
	t.Parallel()
	srv := shared.Get(t)
	c := &readsClient{Client: srv.Client()}
	m, caller := streamManager(t, c)
	prompts := []string{"hello", "RUN:echo one ||| echo two", "THINK about it", "FAIL:400"}
	tasks := make([]asyncagents.Task, len(prompts))
	for i, p := range prompts {
		tasks[i] = launch(t, m, caller, p)
	}
	for i, task := range tasks {
		got := await(t, m, caller, task.ID)
		reads := c.readsOf(task.ID) // the Manager's
		want := readDecision(t, c, task, "")
		if got.Result != want.Result || got.Error != want.Error {
			t.Errorf("%q: %s %q %q; a read decides %q %q", prompts[i], got.Status, got.Result, got.Error, want.Result, want.Error)
		}
		switch prompts[i] {
		case "FAIL:400":
			if got.Status != asyncagents.StatusError || len(reads) == 0 {
				t.Errorf("%q: %s after %d reads; want an error, read", prompts[i], got.Status, len(reads))
			}
		default:
			if got.Status != asyncagents.StatusCompleted || len(reads) != 0 {
				t.Errorf("%q: %s after reads %v; want completed from the events", prompts[i], got.Status, reads)
			}
		}
	}
	if n := asyncagents.StreamDecided(m); n != 3 {
		t.Errorf("%d runs decided from events, want 3", n)
	}
}
