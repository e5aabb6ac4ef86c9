package asyncagents_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/asyncagentstest"
	"github.com/asyncagents/asyncagents/opencode"
)

func BenchmarkZZProbe(b *testing.B) {
	srv := shared.Get(b)
	c := srv.Client()
	ctx := context.Background()
	dir, _ := srv.NewProject(fmt.Sprintf("probe-%d", time.Now().UnixNano()))
	for i := range 10_000 {
		writeBenchFile(b, filepath.Join(dir, fmt.Sprintf("pkg%03d/file%05d.txt", i/100, i)), fmt.Sprintf("file %d\n", i))
	}
	benchGit(b, dir, "init", "--quiet")
	benchGit(b, dir, "add", "--", ".")
	benchGit(b, dir, "commit", "--quiet", "-m", "start")
	time.Sleep(1100 * time.Millisecond)
	benchGit(b, dir, "status", "--porcelain")
	writeBenchFile(b, filepath.Join(dir, "notes.txt"), "n\n")
	parent, _ := c.CreateSession(ctx, opencode.CreateSessionRequest{Directory: dir})
	caller := asyncagents.Caller{SessionID: parent.ID, Agent: "build"}
	m := asyncagentstest.NewManager(b, c, fastPoll, asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply))
	for i := range 8 {
		s0 := time.Now()
		_ = exec.Command("sync").Run()
		time.Sleep(3 * time.Second)
		t0 := time.Now()
		task, err := m.Launch(ctx, asyncagents.LaunchInput{Caller: caller, Description: "general", Agent: "general", Prompt: "ok", Isolation: asyncagents.IsolationWorktree})
		t1 := time.Now()
		if err != nil {
			b.Fatal(err)
		}
		asyncagentstest.Await(b, m, caller, task.ID)
		t2 := time.Now()
		m.Clear(ctx, caller)
		t3 := time.Now()
		b.Logf("%d: sync %v, launch %v, run %v, clear %v", i, t0.Sub(s0)-3*time.Second, t1.Sub(t0), t2.Sub(t1), t3.Sub(t2))
	}
}
