package asyncagents_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/asyncagentstest"
	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/storetest"
)

// keyed launches a task of caller with the idempotency key.
func keyed(m *asyncagents.Manager, caller asyncagents.Caller, key string) (asyncagents.Task, error) {
	return m.Launch(context.Background(), asyncagents.LaunchInput{Caller: caller, Description: "keyed", Agent: "general",
		Prompt: "work", IdempotencyKey: key})
}

// A launch retried with the same idempotency key — at the same moment, after the first
// returned, after a restart of the host, or on another host of the store — returns the task
// the first made and creates nothing; another key, or another caller, launches anew. The
// task tool takes the key from the tool call's id.
func TestRetriedLaunchReturnsTheSameTask(t *testing.T) {
	t.Parallel()
	f := asyncagentstest.NewFakeClient(t)
	path := filepath.Join(t.TempDir(), "tasks.jsonl")
	store, err := asyncagents.NewFileStore(path)
	if err != nil {
		t.Fatal(err)
	}
	m, err := asyncagents.New(f, asyncagents.WithStore(store))
	if err != nil {
		t.Fatal(err)
	}
	caller := asyncagentstest.NewParent(t, f)
	before := f.SessionCount()
	ids := make([]string, 4)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() {
			task, err := keyed(m, caller, "call_1")
			if err != nil {
				t.Error(err)
			}
			ids[i] = track(task)
		})
	}
	wg.Wait()
	if ids[0] != "" {
		asyncagentstest.AwaitTask(t, m, ids[0], func(tk asyncagents.Task) bool { return !tk.Starting }) // its session is made
	}
	if f.SessionCount() != before+1 || ids[0] == "" || ids[1] != ids[0] || ids[2] != ids[0] || ids[3] != ids[0] {
		t.Fatalf("four launches with one key made %d sessions: %v", f.SessionCount()-before, ids)
	}
	other, err := keyed(m, caller, "call_2")
	if err != nil || other.ID == ids[0] {
		t.Errorf("another key = %s, %v; want a task of its own", other.ID, err)
	}
	if _, err := keyed(m, caller, "has space"); !errors.Is(err, asyncagents.ErrInvalidInput) {
		t.Errorf("a key with a space = %v, want ErrInvalidInput", err)
	}
	_ = m.Close(context.Background())
	_ = store.Close()

	store2, err := asyncagents.NewFileStore(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store2.Close() })
	m2 := asyncagentstest.NewManager(t, f, asyncagents.WithStore(store2))
	if again, err := keyed(m2, caller, "call_1"); err != nil || again.ID != ids[0] || again.DisplayID == "" {
		t.Errorf("after a restart: %+v, %v; want %s", again.ID, err, ids[0])
	}
	var task asyncagents.Tool
	for _, tool := range asyncagents.Tools(m2) {
		if tool.Name == "asyncagents_task" {
			task = tool
		}
	}
	call := caller
	call.CallID = "toolu_9"
	args := []byte(`{"description":"d","agent":"general","prompt":"x"}`)
	first, err1 := task.Handler(context.Background(), call, args)
	second, err2 := task.Handler(context.Background(), call, args)
	if err1 != nil || err2 != nil || first != second {
		t.Errorf("a tool call made twice: %q, %v / %q, %v; want the same reply", first, err1, second, err2)
	}
	if tasks, _ := m2.List(caller, ""); len(tasks) != 3 {
		t.Errorf("%d tasks, want 3", len(tasks))
	}
}

// Hosts of one store share the keys: a retry that reaches another host, once it read the
// first host's changes (within a second), returns the task.
func TestRetriedLaunchOnAnotherHost(t *testing.T) {
	t.Parallel()
	f := asyncagentstest.NewFakeClient(t)
	mem := storetest.NewSharedMemory()
	open := func() *asyncagents.Manager {
		return asyncagentstest.NewManager(t, f, asyncagents.WithStore(openShared(t, mem)))
	}
	a, b := open(), open()
	caller := asyncagentstest.NewParent(t, f)
	first, err := keyed(a, caller, "call_x")
	if err != nil {
		t.Fatal(err)
	}
	if !testmain.Eventually(10*time.Second, func() bool { return asyncagents.FollowsOther(b, asyncagentstest.Started(t, a, first).SessionID) }) {
		t.Fatal("the second host never read the first's task")
	}
	before := f.SessionCount()
	again, err := keyed(b, caller, "call_x")
	if err != nil || again.ID != first.ID || f.SessionCount() != before {
		t.Errorf("the retry on another host = %s, %v (%d sessions made); want %s", again.ID, err, f.SessionCount()-before, first.ID)
	}
}
