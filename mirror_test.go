package asyncagents_test

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/asyncagentstest"
	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/manager"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// readsClient records the message reads (Messages) per session and, with drop, keeps the
// events it matches from the Manager; with hold, it delivers no event but server.connected
// until hold is closed; opened, when set, is closed when the first stream is open.
type readsClient struct {
	opencode.Client
	drop   func(opencode.Event) bool
	hold   chan struct{}
	opened chan struct{}

	mu    sync.Mutex
	reads map[string][]int       // session → the limit of each read
	first map[string]time.Time   // session → when its first read was made
	posts map[string][]time.Time // session → when each prompt into it was made
}

func (c *readsClient) Messages(ctx context.Context, id string, limit int) ([]opencode.Message, error) {
	c.mu.Lock()
	if c.reads == nil {
		c.reads, c.first = map[string][]int{}, map[string]time.Time{}
	}
	if len(c.reads[id]) == 0 {
		c.first[id] = time.Now()
	}
	c.reads[id] = append(c.reads[id], limit)
	c.mu.Unlock()
	return c.Client.Messages(ctx, id, limit)
}

func (c *readsClient) Prompt(ctx context.Context, id string, req opencode.PromptRequest) (*opencode.Message, error) {
	c.mu.Lock()
	if c.posts == nil {
		c.posts = map[string][]time.Time{}
	}
	c.posts[id] = append(c.posts[id], time.Now())
	c.mu.Unlock()
	return c.Client.Prompt(ctx, id, req)
}

// postsAfterFirstRead returns how long after the first read of session id each prompt into
// it was made.
func (c *readsClient) postsAfterFirstRead(id string) []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var d []time.Duration
	for _, at := range c.posts[id] {
		d = append(d, at.Sub(c.first[id]))
	}
	return d
}

// readsOf returns the limits of the reads of session id so far.
func (c *readsClient) readsOf(id string) []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.reads[id])
}

func (c *readsClient) Events(ctx context.Context) (opencode.EventStream, error) {
	s, err := c.Client.Events(ctx)
	if err == nil && c.opened != nil {
		select {
		case <-c.opened:
		default:
			close(c.opened)
		}
	}
	if err != nil || c.drop == nil && c.hold == nil {
		return s, err
	}
	return droppingStream{s, c.drop, c.hold}, nil
}

type droppingStream struct {
	opencode.EventStream
	drop func(opencode.Event) bool
	hold chan struct{}
}

func (s droppingStream) All() iter.Seq2[opencode.Event, error] {
	return func(yield func(opencode.Event, error) bool) {
		for ev, err := range s.EventStream.All() {
			if err == nil && s.drop != nil && s.drop(ev) {
				continue
			}
			if s.hold != nil && ev.Type != opencode.EventServerConnected {
				<-s.hold
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
	m := asyncagentstest.NewManager(t, c, append([]asyncagents.Option{asyncagents.WithPollInterval(time.Hour)}, opts...)...)
	var caller asyncagents.Caller
	waitFor(t, 10*time.Second, func() bool {
		caller = asyncagentstest.NewParent(t, c) // session.created
		return testmain.Eventually(100*time.Millisecond, func() bool { return asyncagents.StreamLive(m) })
	})
	return m, caller
}

// readDecision decides task's run from a read of its session, as a reconcile does.
func readDecision(t *testing.T, c opencode.Client, task asyncagents.Task, baseline string) manager.Verdict {
	t.Helper()
	msgs, err := c.Messages(context.Background(), task.SessionID, 8)
	if err != nil {
		t.Fatal(err)
	}
	return manager.Decide(msgs, manager.Run{Baseline: baseline, Idle: true})
}

// T-6: a run whose events the Manager received from its prompt to its idle is completed from
// them, without a read of its messages, with the result a read gives: a plain text reply, a
// reply after tool calls and reasoning, and a resumed run (decided on its own messages).
func TestCompletionFromEvents(t *testing.T) {
	c := &readsClient{Client: asyncagentstest.NewFakeClient(t)}
	m, caller := streamManager(t, c)
	decided := asyncagents.StreamDecided(m)
	for _, prompt := range []string{"hello", "THINK RUN:echo one ||| echo two"} {
		task := asyncagentstest.Launch(t, m, caller, prompt)
		got := asyncagentstest.Await(t, m, caller, task.ID)
		want := readDecision(t, c, task, "")
		if got.Status != asyncagents.StatusCompleted || want.Outcome != manager.Completed || got.Result != want.Result {
			t.Errorf("%q: %s %q; a read decides %v %q", prompt, got.Status, got.Result, want.Outcome, want.Result)
		}
		if reads := c.readsOf(task.SessionID); len(reads) != 1 { // readDecision's
			t.Errorf("%q: the Manager read the task's messages: %v", prompt, reads[:len(reads)-1])
		}
		if n := asyncagents.StreamDecided(m); n != decided+1 {
			t.Errorf("%q: %d runs decided from events, want %d", prompt, n, decided+1)
		}
		decided = asyncagents.StreamDecided(m)
	}

	task := asyncagentstest.Launch(t, m, caller, "first run")
	asyncagentstest.Await(t, m, caller, task.ID)
	before, err := c.Messages(context.Background(), task.SessionID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Resume(context.Background(), caller, task.ID, "RUN:echo again"); err != nil {
		t.Fatal(err)
	}
	got := asyncagentstest.Await(t, m, caller, task.ID)
	want := readDecision(t, c, task, before[len(before)-1].Info.ID)
	if got.Status != asyncagents.StatusCompleted || got.ResumeCount != 1 || got.Result != want.Result || got.Result != "Ran 1 command(s); last output: again" {
		t.Errorf("resumed: %s %q (resume count %d); a read decides %q", got.Status, got.Result, got.ResumeCount, want.Result)
	}
	// Resume's look at the last message, and the two of this test. The first run's second
	// idle event (OpenCode sends session.status idle and session.idle) may come after the
	// resume started: that early idle is read, the read finds the run still going, and while
	// that read is confirmed (two looks) the resumed run's idle may be decided by a read too.
	reads := c.readsOf(task.SessionID)
	early := slices.Equal(reads, []int{0, 1, 8, 8})
	if !slices.Equal(reads, []int{0, 1, 8}) && !early {
		t.Errorf("reads of the resumed task's messages: %v, want [0 1 8]", reads)
	}
	if n := asyncagents.StreamDecided(m); n != decided+2 && !(early && n == decided+1) {
		t.Errorf("%d runs decided from events, want %d", n, decided+2)
	}
}

// T-6: a run launched before the event stream delivered any event is followed whole from
// the session.created of its session, which the server published before the prompt was
// sent: it is decided from its events however late the stream delivers them. The same run is
// read when the stream does not deliver that session.created: nothing shows that the stream
// was subscribed before the prompt was sent.
func TestCompletionFromEventsBoundBySessionCreated(t *testing.T) {
	for _, missed := range []bool{false, true} {
		t.Run(map[bool]string{false: "delivered", true: "missed"}[missed], func(t *testing.T) {
			f := asyncagentstest.NewFakeClient(t)
			caller := asyncagentstest.NewParent(t, f) // before the Manager subscribes: no event for it
			c := &readsClient{Client: f, hold: make(chan struct{}), opened: make(chan struct{})}
			if missed {
				c.drop = func(ev opencode.Event) bool { return ev.Type == opencode.EventSessionCreated }
			}
			m := asyncagentstest.NewManager(t, c, asyncagents.WithPollInterval(time.Hour))
			var once sync.Once
			release := func() { once.Do(func() { close(c.hold) }) }
			t.Cleanup(release) // before the Manager's Close
			<-c.opened
			task := asyncagentstest.Launch(t, m, caller, "hello") // the prompt is sent while the stream holds every event
			if asyncagents.StreamLive(m) {
				t.Fatal("the stream delivered an event while held")
			}
			release()
			got := asyncagentstest.Await(t, m, caller, task.ID)
			if got.Status != asyncagents.StatusCompleted || got.Result != readDecision(t, c, task, "").Result {
				t.Errorf("%s %q", got.Status, got.Result)
			}
			reads, decided := len(c.readsOf(task.SessionID))-1, asyncagents.StreamDecided(m) // less readDecision's
			if want := map[bool]int64{false: 1, true: 0}[missed]; decided != want || (reads == 0) != (want == 1) {
				t.Errorf("%d runs decided from events after %d reads; want %d", decided, reads, want)
			}
		})
	}
}

// T-6: runs are decided from their events whatever the speed of the server's answers: a
// Client answering within microseconds (in the same process) and one answering after
// milliseconds (over a network) alike.
func TestCompletionFromEventsWhateverTheLatency(t *testing.T) {
	for _, delay := range []time.Duration{0, 3 * time.Millisecond} {
		t.Run(delay.String(), func(t *testing.T) {
			rc := &readsClient{Client: asyncagentstest.NewFakeClient(t)}
			c := slowClient{rc, delay}
			m, caller := streamManager(t, c)
			for i := range 3 {
				task := asyncagentstest.Launch(t, m, caller, "hello "+strconv.Itoa(i))
				if got := asyncagentstest.Await(t, m, caller, task.ID); got.Status != asyncagents.StatusCompleted {
					t.Fatalf("%s: %s", task.ID, got.Status)
				}
				if reads := rc.readsOf(task.SessionID); len(reads) != 0 {
					t.Errorf("%s: the Manager read the task's messages: %v", task.ID, reads)
				}
			}
			if n := asyncagents.StreamDecided(m); n != 3 {
				t.Errorf("%d of 3 runs decided from events, want 3", n)
			}
		})
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
func TestCompletionFromEventsFallsBackToRead(t *testing.T) {
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
			c := &readsClient{Client: asyncagentstest.NewFakeClient(t), drop: tc.drop}
			m, caller := streamManager(t, c)
			task := asyncagentstest.Launch(t, m, caller, tc.prompt)
			got := asyncagentstest.Await(t, m, caller, task.ID)
			reads := c.readsOf(task.SessionID)
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
		f := asyncagentstest.NewFakeClient(t, opencodetest.WithHeldRuns())
		c := &readsClient{Client: f}
		m, caller := streamManager(t, c)
		task := asyncagentstest.Launch(t, m, caller, "held")
		asyncagentstest.AwaitBusy(t, f, task.SessionID)
		f.DropEvents()
		waitFor(t, 10*time.Second, func() bool { return f.Streams() == 1 }) // a new connection
		reads := len(c.readsOf(task.SessionID))                             // the reconcile after the reconnect
		asyncagentstest.Release(t, f, task.SessionID, opencodetest.Text("done"))
		got := asyncagentstest.Await(t, m, caller, task.ID)
		if got.Status != asyncagents.StatusCompleted || got.Result != "done" {
			t.Errorf("after a reconnect: %s %q", got.Status, got.Result)
		}
		if n := len(c.readsOf(task.SessionID)); n <= reads || asyncagents.StreamDecided(m) != 0 {
			t.Errorf("%d reads after the release, %d runs decided from events; want a read to decide", n-reads, asyncagents.StreamDecided(m))
		}
	})
}

// T-6 on the real server: runs the events carried whole are completed from them, without a
// read, with the result a read decides (a plain reply, one after tool calls, one after
// reasoning); a run that fails with a model error is decided from a read, as before.
func TestRealServerCompletionFromEvents(t *testing.T) {
	t.Parallel()
	srv := shared.Get(t)
	c := &readsClient{Client: srv.Client()}
	m, caller := streamManager(t, c)
	prompts := []string{"hello", "RUN:echo one ||| echo two", "THINK about it", "FAIL:400"}
	tasks := make([]asyncagents.Task, len(prompts))
	for i, p := range prompts {
		tasks[i] = asyncagentstest.Launch(t, m, caller, p)
	}
	for i, task := range tasks {
		got := asyncagentstest.Await(t, m, caller, task.ID)
		reads := c.readsOf(task.SessionID) // the Manager's
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

// T-6 on the real server: a burst of tasks launched at once, their runs streaming their reply
// for a second so that they all run and end together, is decided from what the stream carried,
// not one task's messages read (a counting Client). (A task launched before OpenCode has
// subscribed the Manager's new stream, which it does a moment after answering, is read: the
// stream missed its start. TestCompletionFromEventsBoundBySessionCreated shows the rule for
// a stream open but silent when the tasks are launched.)
func TestRealServerBurstCompletedFromEvents(t *testing.T) {
	t.Parallel()
	const n = 20
	srv := shared.Get(t)
	c := &readsClient{Client: srv.Client()}
	m, caller := streamManager(t, c)
	tasks := make([]asyncagents.Task, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { // Launch at once from n goroutines: t.Fatal is the test goroutine's
			var err error
			tasks[i], err = m.Launch(context.Background(), asyncagents.LaunchInput{Caller: caller, Description: "d", Agent: "general",
				Prompt: "SLEEP:1 (task " + strconv.Itoa(i) + ")"})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for _, task := range tasks {
		if got := asyncagentstest.Await(t, m, caller, task.ID); got.Status != asyncagents.StatusCompleted {
			t.Errorf("%s: %s %q", task.ID, got.Status, got.Error)
		}
		if reads := c.readsOf(task.SessionID); len(reads) != 0 {
			t.Errorf("%s: the Manager read the task's messages: %v", task.ID, reads)
		}
	}
	if d := asyncagents.StreamDecided(m); d != n {
		t.Errorf("%d of %d runs decided from events", d, n)
	}
}

// slowStream opens its event streams only once open is closed; the first attempt fails with
// fail set; with deaf set, it does not return when ctx is done.
type slowStream struct {
	*readsClient
	open chan struct{}
	fail bool
	deaf bool
	once sync.Once
}

func (c *slowStream) Events(ctx context.Context) (opencode.EventStream, error) {
	done := ctx.Done()
	if c.deaf {
		done = nil
	}
	select {
	case <-c.open:
	case <-done:
		return nil, ctx.Err()
	}
	failed := false
	c.once.Do(func() { failed = c.fail })
	if failed {
		return nil, errors.New("refused")
	}
	return c.readsClient.Events(ctx)
}

// T-6: the first launches after New create their sessions once the event stream's first
// connection attempt is over, so that the stream delivers their session.created: their runs
// are decided from their events. When that attempt fails, they go on without waiting for
// another (and are read).
func TestLaunchAwaitsTheStreamsFirstAttempt(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(map[bool]string{false: "opened", true: "failed"}[fail], func(t *testing.T) {
			f := asyncagentstest.NewFakeClient(t)
			caller := asyncagentstest.NewParent(t, f)
			c := &slowStream{readsClient: &readsClient{Client: f}, open: make(chan struct{}), fail: fail}
			m := asyncagentstest.NewManager(t, c, asyncagents.WithPollInterval(100*time.Millisecond))
			launched := make(chan asyncagents.Task, 1)
			go func() {
				task, err := m.Launch(context.Background(), asyncagents.LaunchInput{Caller: caller, Description: "d", Agent: "general", Prompt: "hello"})
				if err != nil {
					t.Error(err)
				}
				launched <- task
			}()
			time.Sleep(50 * time.Millisecond)
			if n := len(f.Requests()); n != 0 {
				t.Fatalf("%d model requests before the stream's first attempt", n)
			}
			select {
			case <-launched:
				t.Fatal("Launch returned before the stream's first attempt was over")
			default:
			}
			close(c.open)
			task := <-launched
			if got := asyncagentstest.Await(t, m, caller, task.ID); got.Status != asyncagents.StatusCompleted {
				t.Fatalf("%s %q", got.Status, got.Error)
			}
			if d, want := asyncagents.StreamDecided(m), map[bool]int64{false: 1, true: 0}[fail]; d != want {
				t.Errorf("%d runs decided from events, want %d", d, want)
			}
		})
	}
}

// T-6 on the real server, with a counting client behind a proxy: a run whose event stream is
// cut while it runs is read (the stream missed part of it) and completes with its real result;
// a run launched after the stream reconnected is decided from its events, without a read.
func TestRealServerStreamCutLeavesRunToRead(t *testing.T) {
	t.Parallel()
	srv := shared.Get(t)
	proxy, hc := proxied(t, srv)
	c := &readsClient{Client: hc}
	// No status poll: a poll between the second launch and its session going busy (which
	// on a loaded machine takes long) reads that run, as it should an idle run undecided.
	m, caller := streamManager(t, c)
	ctx := ctxT(t, 90*time.Second)

	cut := asyncagentstest.Launch(t, m, caller, "SLEEP:3")
	waitMidRun(t, ctx, hc, []asyncagents.Task{cut})
	before := asyncagents.StreamConnection(m)
	if n := proxy.CutEvents(); n != 1 {
		t.Fatalf("cut %d streams", n)
	}
	waitFor(t, 15*time.Second, func() bool { // a new connection delivers events
		c := asyncagents.StreamConnection(m)
		return c != 0 && c != before
	})
	reads := len(c.readsOf(cut.SessionID)) // the reconcile after the reconnect
	after := asyncagentstest.Launch(t, m, caller, "RUN:echo after")

	if got := asyncagentstest.Await(t, m, caller, cut.ID); got.Status != asyncagents.StatusCompleted || !strings.HasSuffix(got.Result, "slept 3") {
		t.Errorf("the run across the cut: %s %q", got.Status, got.Result)
	}
	if n := len(c.readsOf(cut.SessionID)); n <= reads {
		t.Errorf("the run across the cut was not read at its end (%d reads, %d at the reconnect)", n, reads)
	}
	if got := asyncagentstest.Await(t, m, caller, after.ID); got.Status != asyncagents.StatusCompleted || got.Result != "Ran 1 command(s); last output: after" {
		t.Errorf("the run after the reconnect: %s %q", got.Status, got.Result)
	}
	if r := c.readsOf(after.SessionID); len(r) != 0 {
		t.Errorf("the run after the reconnect was read: %v", r)
	}
	if d := asyncagents.StreamDecided(m); d != 1 {
		t.Errorf("%d runs decided from events, want 1 (the run after the reconnect)", d)
	}
}

// T-6: a launch right after New waits for the event stream's first connection attempt at most
// the quick request timeout, even with a Client whose Events does not return when its
// context ends.
func TestLaunchAwaitsTheStreamAtMostTheQuickTimeout(t *testing.T) {
	f := asyncagentstest.NewFakeClient(t)
	caller := asyncagentstest.NewParent(t, f)
	c := &slowStream{readsClient: &readsClient{Client: f}, open: make(chan struct{}), deaf: true}
	const quick = 300 * time.Millisecond
	m := asyncagentstest.NewManager(t, c, fastPoll, asyncagents.WithRequestTimeout(quick))
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(c.open) }) }) // before the Manager's Close
	start := time.Now()
	task := asyncagentstest.Launch(t, m, caller, "hello")
	if d := time.Since(start); d < quick || d > quick+2*time.Second {
		t.Errorf("Launch returned after %v, want about %v", d, quick)
	}
	if got := asyncagentstest.Await(t, m, caller, task.ID); got.Status != asyncagents.StatusCompleted {
		t.Errorf("%s %q", got.Status, got.Error)
	}
}

// T-6: a run the stream carried whole whose frames do not show it completed (the model
// failed) is decided at once from a read, not left to the status poll (an hour away here).
func TestFailedRunCarriedWholeIsRead(t *testing.T) {
	c := &readsClient{Client: asyncagentstest.NewFakeClient(t)}
	m, caller := streamManager(t, c)
	task := asyncagentstest.Launch(t, m, caller, "FAIL:500")
	out, err := m.Output(context.Background(), caller, task.ID, asyncagents.OutputOptions{Block: true, Timeout: 10 * time.Second})
	if err != nil || out.Task.Status != asyncagents.StatusError {
		t.Fatalf("a failed run: %s %q (%v), want %s", out.Task.Status, out.Task.Error, err, asyncagents.StatusError)
	}
	if len(c.readsOf(task.SessionID)) == 0 {
		t.Error("decided without a read of its messages")
	}
}
