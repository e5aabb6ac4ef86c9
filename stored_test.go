package asyncagents_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/asyncagentstest"
	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
	"github.com/asyncagents/asyncagents/pgstore"
)

// A launch is acknowledged only once its task is stored (issue 35, case 11): a host cut from
// its PostgreSQL refuses the launch with a text the model reads, keeps no task and leaves no
// task session behind; once the database is back, a launch goes through.
func TestLaunchRefusedWhileCutFromTheDatabase(t *testing.T) {
	t.Parallel() // a database of its own
	srv := sharedPG.Get(t)
	db := srv.NewDatabase(t)
	proxy := srv.NewProxy(t)
	u, _ := url.Parse(db)
	store, err := pgstore.Open(t.Context(), srv.DSNAt(proxy.Addr(), strings.TrimPrefix(u.Path, "/")), pgstore.Options{Lease: leaseTestLease})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	f := asyncagentstest.NewFakeClient(t)
	m := asyncagentstest.NewManager(t, f, asyncagents.WithStore(store), asyncagents.WithNotifications(false))
	parent := asyncagentstest.NewParent(t, f)
	before := sessionCount(t, f)
	proxy.Cut()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	text, err := asyncagents.Tools(m)[0].Handler(ctx, parent, []byte(`{"description":"cut","agent":"general","prompt":"RUN:echo hi"}`))
	if err == nil || !strings.Contains(err.Error(), "not started") {
		t.Fatalf("a launch while cut from the database: %q, %v; want it refused", text, err)
	}
	if msg := err.Error(); strings.Contains(msg, proxy.Addr()) || strings.Contains(msg, strings.TrimPrefix(u.Path, "/")) {
		t.Errorf("the refusal shows the model the database: %s", msg)
	}
	if errors.Unwrap(err) == nil {
		t.Errorf("the refusal %v does not wrap the store's error", err)
	}
	if list, _ := m.List(parent, ""); len(list) != 0 {
		t.Errorf("the refused launch left %d tasks", len(list))
	}
	if n := sessionCount(t, f); n != before {
		t.Errorf("the refused launch left %d sessions, want %d", n, before)
	}
	proxy.Restore()
	if !testmain.Eventually(20*time.Second, func() bool {
		_, err := m.Launch(ctx, asyncagents.LaunchInput{Caller: parent, Description: "back", Agent: "general", Prompt: "RUN:echo back"})
		return err == nil
	}) {
		t.Fatal("no launch went through once the database was back")
	}
}

// sessionCount returns how many sessions the fake has.
func sessionCount(t *testing.T, f *opencodetest.FakeClient) int {
	t.Helper()
	return f.SessionCount()
}
