package fork_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/asyncagents/asyncagents/fork"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// The opencode client is a MessageReader.
var _ fork.MessageReader = opencode.Client(nil)

// pagesOf serves msgs to RunPages newest page first, each page a copy (as a client decodes
// it), with sizes from size; served counts the messages handed out.
func pagesOf(msgs []opencode.Message, size func() int, served *int) fork.PageFunc {
	end := len(msgs)
	return func(context.Context) ([]opencode.Message, bool, error) {
		start := max(0, end-max(1, size()))
		page := slices.Clone(msgs[start:end])
		end = start
		if served != nil {
			*served += len(page)
		}
		return page, start > 0, nil
	}
}

func fixed(n int) func() int { return func() int { return n } }

// randomSizes returns page sizes from 1 to limit, from seed.
func randomSizes(seed uint64, limit int) func() int {
	r := rand.New(rand.NewPCG(seed, 11))
	return func() int { return 1 + r.IntN(max(1, limit)) }
}

// checkPaged runs p on msgs whole (Run) and page by page (RunPages, page sizes from size)
// and checks that the paged result is what SPEC P-4 asks: the same Context and Preamble and
// the same statistics of the context; the statistics that need the whole history describe
// the messages read, exactly as Run on those messages does; nothing was read past the point
// where the context could no longer change. It returns the paged result.
func checkPaged(t testing.TB, p *fork.Pipeline, msgs []opencode.Message, size func() int) fork.Result {
	t.Helper()
	full := p.Run(msgs)
	served := 0
	paged, err := p.RunPages(context.Background(), pagesOf(msgs, size, &served))
	if err != nil {
		t.Fatalf("RunPages: %v", err)
	}
	if paged.Context != full.Context {
		t.Fatalf("paged context differs from Run's:\n%s", cmp.Diff(full.Context, paged.Context))
	}
	if paged.Preamble != full.Preamble {
		t.Fatalf("paged preamble differs from Run's:\n%s", cmp.Diff(full.Preamble, paged.Preamble))
	}
	read := paged.Stats.OriginalMessages
	if read > len(msgs) || read > served {
		t.Fatalf("read %d of %d messages, %d served", read, len(msgs), served)
	}
	// The statistics of the context are Run's.
	want := full.Stats
	want.OriginalMessages, want.CompactionIndex, want.RemovedMessages = read, paged.Stats.CompactionIndex, paged.Stats.RemovedMessages
	want.CompactionDetected = paged.Stats.CompactionDetected
	if diff := cmp.Diff(want, paged.Stats); diff != "" {
		t.Fatalf("paged stats differ from Run's (-run +paged):\n%s", diff)
	}
	// The others are Run's on the messages read.
	if suffix := p.Run(msgs[len(msgs)-read:]); !cmp.Equal(suffix, paged) {
		t.Fatalf("paged result differs from Run on the %d messages read (-run +paged):\n%s", read, cmp.Diff(suffix, paged))
	}
	if (paged.Stats.RemovedMessages > 0) != (full.Stats.RemovedMessages > 0) || paged.Stats.RemovedMessages > full.Stats.RemovedMessages {
		t.Fatalf("removed %d paged, %d by Run", paged.Stats.RemovedMessages, full.Stats.RemovedMessages)
	}
	if full.Stats.RemovedMessages == 0 {
		// Not stopped by the budget: read to the boundary or the start, which Run found too.
		if paged.Stats.CompactionDetected != full.Stats.CompactionDetected ||
			(full.Stats.CompactionDetected && full.Stats.CompactionIndex != paged.Stats.CompactionIndex+len(msgs)-read) {
			t.Fatalf("compaction %v at %d paged (%d read), %v at %d by Run", paged.Stats.CompactionDetected, paged.Stats.CompactionIndex, read,
				full.Stats.CompactionDetected, full.Stats.CompactionIndex)
		}
		if !full.Stats.CompactionDetected && read != len(msgs) {
			t.Fatalf("no boundary and nothing removed, yet only %d of %d messages read", read, len(msgs))
		}
	}
	checkInvariants(t, paged, msgs[len(msgs)-read:], budgetOf(t, p))
	return paged
}

// budgetOf returns p's budget, from the preamble's statement of it.
func budgetOf(t testing.TB, p *fork.Pipeline) int {
	t.Helper()
	var b int
	pre := p.Preamble(fork.Stats{})
	i := strings.Index(pre, "(budget ")
	if _, err := fmt.Sscanf(pre[i:], "(budget %d characters)", &b); err != nil {
		t.Fatalf("no budget in %q: %v", pre, err)
	}
	return b
}

func newPipeline(t testing.TB, opts ...fork.Option) *fork.Pipeline {
	t.Helper()
	p, err := fork.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// variants are the pipelines the equivalence tests run.
var pagedVariants = []struct {
	name string
	opts []fork.Option
}{
	{"default", nil},
	{"tail-aware", []fork.Option{fork.WithTailAware(true)}},
	{"budget-20000", []fork.Option{fork.WithBudget(20_000)}},
	{"tail-aware-budget-5000", []fork.Option{fork.WithTailAware(true), fork.WithBudget(5000)}},
	{"budget-1000", []fork.Option{fork.WithBudget(1000)}},
	{"small-tiers", []fork.Option{fork.WithTiers(1, 2), fork.WithTierLimits(100, 10)}},
}

// checkAllSplits checks msgs under every variant, split into pages of 1, 2, 3, 7, 100 and
// random sizes.
func checkAllSplits(t *testing.T, msgs []opencode.Message) {
	t.Helper()
	checkSplits(t, msgs, fixed(1), fixed(2), fixed(3), fixed(7), fixed(100), randomSizes(uint64(len(msgs)), 40))
}

// checkSplits checks msgs under every variant, split into pages of the given sizes.
func checkSplits(t *testing.T, msgs []opencode.Message, sizes ...func() int) {
	t.Helper()
	for _, v := range pagedVariants {
		p := newPipeline(t, v.opts...)
		for _, size := range sizes {
			checkPaged(t, p, msgs, size)
		}
	}
}

// On every golden input (testdata, and the shared fixtures when present) paging gives Run's
// context, preamble and statistics.
//
// P-4: a forked launch reads the parent newest-first, a page at a time.
func TestRunPagesMatchesRunOnGoldenInputs(t *testing.T) {
	for _, name := range []string{"captured", "captured-tools"} {
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", name+".json"))
			if err != nil {
				t.Fatal(err)
			}
			checkAllSplits(t, decodeMsgs(t, data))
		})
	}
	for _, name := range []string{"small.json", "large.json", "compacted.json", "errors.json"} {
		t.Run(name, func(t *testing.T) { checkAllSplits(t, decodeMsgs(t, readFixture(t, name))) })
	}
}

// The slicing cases of F-1 … F-4 and the budget edges: paging gives Run's output.
//
// P-4: a forked launch reads the parent newest-first, a page at a time.
func TestRunPagesMatchesRunOnCases(t *testing.T) {
	old := user(txt("OLD"))
	m1, s1 := marker(""), summary("SUMMARY ONE")
	mid := user(txt("MIDDLE"))
	m2, s2 := marker(""), summary("SUMMARY TWO")
	after := user(txt("AFTER"))
	failed := marker("")
	last := agent(txt("LAST"), tool("bash", `{"command":"ls"}`, strings.Repeat("out ", 900)))
	tailStart := user(txt("TAIL START"))
	tailNext := agent(tool("read", "", strings.Repeat("r", 4000)))
	mt, st := marker(tailStart.Info.ID), summary("TAIL SUMMARY")
	dup := user(txt("SAME ID AS TAIL START"))
	dup.Info.ID = tailStart.Info.ID
	big := user(txt(strings.Repeat("B", 250_000)))
	empty := agent(opencode.Part{Type: opencode.PartStepStart})

	cases := map[string][]opencode.Message{
		"empty":                               nil,
		"no lines":                            {empty, empty},
		"one boundary":                        {old, m1, s1, after},
		"latest of two":                       {old, m1, s1, mid, m2, s2, after, last},
		"later marker without summary":        {old, m1, s1, mid, failed, last},
		"marker without summary only":         {old, failed, last},
		"summary without marker":              {old, s1, after},
		"summary after a second marker":       {old, m1, mid, m2, s2, after},
		"two summaries after one marker":      {old, m1, s1, mid, s2, after},
		"summary then marker":                 {old, s1, mid, m1, after, last},
		"messages between marker and summary": {old, m1, mid, last, s1, after},
		"tail":                                {old, tailStart, tailNext, mt, st, after, last},
		"tail id repeated":                    {old, tailStart, dup, tailNext, mt, st, after},
		"tail id missing":                     {old, mt, st, after},
		"tail after a failed marker":          {old, tailStart, tailNext, mt, st, failed, after},
		"oversized newest":                    {old, m1, s1, after, big},
		"oversized only":                      {big},
		"oversized summary":                   {old, m1, summary(strings.Repeat("S", 250_000)), after},
		"no lines at the start":               {empty, old, empty, m1, empty, s1, empty, after, empty},
	}
	// Forty 9,000-character blocks around a boundary exceed the default budget on either side.
	var long []opencode.Message
	for i := range 40 {
		long = append(long, user(txt(fmt.Sprint(i)+strings.Repeat("p", 9000))))
	}
	cases["budget before the boundary"] = slices.Concat(long, []opencode.Message{m1, s1}, results(20, "bash", 3000))
	cases["budget after the boundary"] = slices.Concat([]opencode.Message{old, m1, s1}, long, results(20, "read", 4000))
	cases["budget across the tail"] = slices.Concat(long[:5], []opencode.Message{tailStart}, long[5:30], []opencode.Message{mt, st}, long[30:])
	// Summaries without markers are ordinary messages; the budget fills while they wait.
	cases["budget across summaries without markers"] = slices.Concat(long[:10], []opencode.Message{summary("A")}, long[10:20],
		[]opencode.Message{summary("B")}, long[20:])
	for name, msgs := range cases {
		t.Run(name, func(t *testing.T) { checkAllSplits(t, msgs) })
	}
}

// withBoundary returns msgs with a compaction (marker and summary) inserted so that the
// summary is fromEnd messages before the end; the marker's tail starts tail messages before
// it (0: no tail_start_id).
func withBoundary(msgs []opencode.Message, fromEnd, tail int) []opencode.Message {
	at := len(msgs) - fromEnd + 1
	mk := marker("")
	if tail > 0 {
		mk = marker(msgs[at-tail].Info.ID)
	}
	return slices.Concat(msgs[:at], []opencode.Message{mk, summary("## Summary\nThe work so far.")}, msgs[at:])
}

// Generated sessions, with and without compaction boundaries (with tails, and followed by a
// compaction that failed), under every variant and split: paging gives Run's output.
//
// P-4: a forked launch reads the parent newest-first, a page at a time.
func TestRunPagesMatchesRunOnGeneratedSessions(t *testing.T) {
	base := generated1000()
	inputs := map[string][]opencode.Message{
		"plain":                 base,
		"boundary 500 from end": withBoundary(base, 500, 0),
		"boundary 20 from end":  withBoundary(base, 20, 0),
		"boundary 990 from end": withBoundary(base, 990, 0),
		"tail of 40":            withBoundary(base, 300, 40),
		"boundary then failed":  append(withBoundary(base, 100, 10), marker(""), user(txt("go on"))),
		"two boundaries":        withBoundary(withBoundary(base, 700, 5), 50, 5),
		"boundary at the start": withBoundary(base, 1000, 0),
	}
	for name, msgs := range inputs {
		t.Run(name, func(t *testing.T) { checkSplits(t, msgs, fixed(1), fixed(64), randomSizes(uint64(len(name)), 200)) })
	}
	t.Run("huge budget", func(t *testing.T) {
		p := newPipeline(t, fork.WithBudget(1<<40), fork.WithTailAware(true))
		for _, msgs := range inputs {
			checkPaged(t, p, msgs, randomSizes(3, 300))
		}
	})
}

// Reading stops at the latest complete boundary (its marker; with tail-aware slicing, the
// tail's first message) or at the first block the budget drops.
//
// P-4: a forked launch reads the parent newest-first and stops when the child's context can
// no longer change (latest compaction boundary passed, or budget full).
func TestRunPagesStopsEarly(t *testing.T) {
	base := generated1000()
	large := make([]opencode.Message, 0, 5*len(base))
	for range 5 {
		large = append(large, base...)
	}
	noBudget := newPipeline(t, fork.WithBudget(1<<40))
	tailAware := newPipeline(t, fork.WithBudget(1<<40), fork.WithTailAware(true))
	def := newPipeline(t)
	for _, tc := range []struct {
		name  string
		p     *fork.Pipeline
		msgs  []opencode.Message
		read  int
		index int // of the summary among the messages read
	}{
		{"boundary 500 from the end", noBudget, withBoundary(large, 500, 0), 501, 1},
		{"tail-aware, tail of 30", tailAware, withBoundary(large, 500, 30), 531, 31},
		{"tail-aware, no tail id", tailAware, withBoundary(large, 500, 0), 501, 1},
		{"later marker without summary", noBudget, append(withBoundary(large, 500, 0), marker(""), user(txt("x"))), 503, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			served := 0
			r, err := tc.p.RunPages(context.Background(), pagesOf(tc.msgs, fixed(64), &served))
			if err != nil {
				t.Fatal(err)
			}
			if r.Stats.OriginalMessages != tc.read || !r.Stats.CompactionDetected || r.Stats.CompactionIndex != tc.index {
				t.Errorf("stats %+v, want %d read and the summary found", r.Stats, tc.read)
			}
			if served > tc.read+64 {
				t.Errorf("%d messages served for %d read", served, tc.read)
			}
		})
	}
	t.Run("budget", func(t *testing.T) {
		r := checkPaged(t, def, large, fixed(64))
		// Every generated message has a block: the kept ones and the one that did not fit.
		if r.Stats.OriginalMessages != r.Stats.FinalMessages+1 || r.Stats.RemovedMessages != 1 {
			t.Errorf("stats %+v: want the kept blocks and one more read", r.Stats)
		}
	})
}

// TestRunPagesErrors: a failing page read is returned wrapped; a done context stops RunPages
// before it reads.
func TestRunPagesErrors(t *testing.T) {
	p := newPipeline(t)
	boom := errors.New("boom")
	_, err := p.RunPages(context.Background(), func(context.Context) ([]opencode.Message, bool, error) { return nil, false, boom })
	if !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "fork: ") {
		t.Errorf("RunPages = %v, want boom wrapped", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls := 0
	_, err = p.RunPages(ctx, func(context.Context) ([]opencode.Message, bool, error) { calls++; return nil, true, nil })
	if !errors.Is(err, context.Canceled) || calls != 0 {
		t.Errorf("RunPages = %v after %d reads, want context.Canceled before any", err, calls)
	}
}

// reader is a MessageReader over msgs whose cursor is an index; it records the limits asked.
type reader struct {
	msgs   []opencode.Message
	limits []int
}

func (r *reader) MessagesBefore(_ context.Context, sessionID string, limit int, before string) ([]opencode.Message, string, error) {
	r.limits = append(r.limits, limit)
	end := len(r.msgs)
	if before != "" {
		fmt.Sscanf(before, "at %d", &end)
	}
	start := max(0, end-limit)
	next := ""
	if start > 0 {
		next = fmt.Sprintf("at %d", start)
	}
	return slices.Clone(r.msgs[start:end]), next, nil
}

// TestSessionPages: the n-th page holds n·PageStep messages, up to MaxPageSize,
// following the cursor; RunPages over them reads only what it needs.
func TestSessionPages(t *testing.T) {
	var msgs []opencode.Message
	for i := range 5000 {
		msgs = append(msgs, user(txt(fmt.Sprint("note ", i))))
	}
	r := &reader{msgs: msgs}
	p := newPipeline(t, fork.WithBudget(1<<40))
	got, err := p.RunPages(context.Background(), fork.SessionPages(r, "ses_x"))
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{100, 200, 300, 400, 500, 600, 700, 800, 900, 1000}; !slices.Equal(r.limits, want) {
		t.Errorf("limits %v, want %v", r.limits, want)
	}
	if full := p.Run(msgs); !cmp.Equal(full, got) {
		t.Errorf("paged result differs (-run +paged):\n%s", cmp.Diff(full, got))
	}

	r = &reader{msgs: withBoundary(msgs, 150, 0)}
	if _, err := p.RunPages(context.Background(), fork.SessionPages(r, "ses_x")); err != nil || !slices.Equal(r.limits, []int{100, 200}) {
		t.Errorf("limits %v, %v; want two pages for a boundary 150 from the end", r.limits, err)
	}
}

// TestSessionPagesOnFakeClient: SessionPages reads an opencode.Client's session.
func TestSessionPagesOnFakeClient(t *testing.T) {
	f := opencodetest.NewFakeClient()
	defer f.Close()
	ctx := t.Context()
	s, err := f.CreateSession(ctx, opencode.CreateSessionRequest{Title: "parent"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := f.Prompt(ctx, s.ID, opencode.PromptRequest{NoReply: true, Parts: []opencode.TextPartInput{opencode.NewText(fmt.Sprint("note ", i))}}); err != nil {
			t.Fatal(err)
		}
	}
	msgs, err := f.Messages(ctx, s.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	p := newPipeline(t)
	got, err := p.RunPages(ctx, fork.SessionPages(f, s.ID))
	if err != nil {
		t.Fatal(err)
	}
	if want := p.Run(msgs); !cmp.Equal(want, got) || got.Stats.FinalMessages != 5 {
		t.Errorf("paged %+v, want %+v", got.Stats, want.Stats)
	}
	f.FailCalls("MessagesBefore", 1, nil)
	if _, err := p.RunPages(ctx, fork.SessionPages(f, s.ID)); !isStatus(err, 500) {
		t.Errorf("RunPages with a failing read = %v, want the server's error", err)
	}
}

func isStatus(err error, status int) bool {
	var ae *opencode.APIError
	return errors.As(err, &ae) && ae.StatusCode == status
}
