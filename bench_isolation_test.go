package asyncagents_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/asyncagentstest"
	"github.com/asyncagents/asyncagents/opencode"
)

// BenchmarkRealServerIsolatedLaunch measures a target of issue 32 on the real server: "An
// isolated launch on a repository of 10,000 files costs at most 1 s more than a plain launch
// (p50, real server)". The parent works in a git project of 10,000 small files in 100 folders,
// with one tracked file edited and one untracked file added, so that an isolated launch
// snapshots the working tree. Each launch is of a task the scripted model answers at once;
// between launches, outside the timer, the task is awaited and cleared (Clear removes its
// worktree and branch). Each sub-benchmark has a Manager of its own.
//
//	p50-ms, p99-ms  how long Launch took
//	extra-p50-ms    worktree only: its p50 less plain's
//
//	go test -run '^$' -bench BenchmarkRealServerIsolatedLaunch -benchtime 20x -count 1 .
//
// 2026-11-27, a shared 2-vCPU VM (git 2.39.5, OpenCode 1.18.33, the project on ext4 on the
// VM's disk), three runs, load average 3 to 15 from other test runs; ms:
//
//	          p50           p99
//	plain     120–151       227–516
//	worktree  3,897–9,023   8,680–13,715   (extra p50 3,756–8,872: the target of 1 s is missed)
//
// It takes minutes, so it runs only when ASYNCAGENTS_BENCH_ISOLATION is set.
func BenchmarkRealServerIsolatedLaunch(b *testing.B) {
	if os.Getenv("ASYNCAGENTS_BENCH_ISOLATION") == "" {
		b.Skip("set ASYNCAGENTS_BENCH_ISOLATION=1: it makes a 10,000-file project and isolated tasks in it")
	}
	srv := shared.Get(b)
	c := srv.Client()
	ctx := context.Background()
	dir, err := srv.NewProject(fmt.Sprintf("isolated-launch-%d", time.Now().UnixNano()))
	if err != nil {
		b.Fatal(err)
	}
	for i := range 10_000 {
		writeBenchFile(b, filepath.Join(dir, fmt.Sprintf("pkg%03d/file%05d.txt", i/100, i)), fmt.Sprintf("file %d\n", i))
	}
	gitIn(b, dir, "init", "--quiet")
	gitIn(b, dir, "add", "--", ".") // opencode.json too: the worktrees need the model
	gitIn(b, dir, "commit", "--quiet", "-m", "start")
	// An index written in the same second as the files is "racy": every git that reads it
	// hashes them again. A user's checkout is long past that; git status rewrites the index.
	time.Sleep(1100 * time.Millisecond)
	gitIn(b, dir, "status", "--porcelain")
	writeBenchFile(b, filepath.Join(dir, "pkg000/file00000.txt"), "file 0, edited by the parent\n")
	writeBenchFile(b, filepath.Join(dir, "notes.txt"), "the parent's uncommitted note\n")

	parent, err := c.CreateSession(ctx, opencode.CreateSessionRequest{Directory: dir, Title: "isolated launch parent"})
	if err != nil {
		b.Fatal(err)
	}
	caller := asyncagents.Caller{SessionID: parent.ID, Agent: "build"}
	var plainP50 time.Duration
	for _, mode := range []struct {
		name string
		iso  asyncagents.Isolation
	}{{"plain", asyncagents.IsolationNone}, {"worktree", asyncagents.IsolationWorktree}} {
		iso := mode.iso
		m := asyncagentstest.NewManager(b, c, fastPoll, asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply))
		b.Run(mode.name, func(b *testing.B) {
			var took []time.Duration
			for range b.N {
				start := time.Now()
				task, err := m.Launch(ctx, asyncagents.LaunchInput{Caller: caller, Description: "general", Agent: "general",
					Prompt: "ok", Isolation: iso})
				took = append(took, time.Since(start))
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				// Not asyncagentstest.Await: on a loaded machine a run in a new worktree of
				// 10,000 files has taken more than its minute.
				out, err := m.Output(ctx, caller, task.ID, asyncagents.OutputOptions{Block: true, Timeout: 5 * time.Minute})
				if got := out.Task; err != nil || got.Status != asyncagents.StatusCompleted || (got.Worktree != nil) != (iso == asyncagents.IsolationWorktree) {
					b.Fatalf("task %s: %v, %q, worktree %+v", got.Status, err, got.Error, got.Worktree)
				}
				if _, err := m.Clear(ctx, caller); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			p50 := quantile(took, 0.5)
			b.ReportMetric(millis(p50), "p50-ms")
			b.ReportMetric(millis(quantile(took, 0.99)), "p99-ms")
			if iso == asyncagents.IsolationNone {
				plainP50 = p50
			} else {
				b.ReportMetric(millis(p50-plainP50), "extra-p50-ms")
			}
		})
		if err := m.Close(ctx); err != nil {
			b.Fatal(err)
		}
	}
	if out := gitIn(b, dir, "worktree", "list", "--porcelain"); strings.Count(out, "worktree ") != 1 {
		b.Errorf("worktrees left after clear:\n%s", out)
	}
}

func writeBenchFile(b *testing.B, path, body string) {
	b.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		b.Fatal(err)
	}
}
