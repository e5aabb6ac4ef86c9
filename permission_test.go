package asyncagents_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/asyncagentstest"
	"github.com/asyncagents/asyncagents/manager"
)

// outside makes OpenCode ask the external_directory permission for /no/such/*.
const outside = "RUN:cat /no/such/file.txt"

// T-16, N-9: without a policy a request waits, shows on the task and in the list, and the
// parent is told once; a policy answers it on the task's directory.
func TestPermissionPolicy(t *testing.T) {
	t.Run("surface", func(t *testing.T) {
		f := asyncagentstest.NewFakeClient(t)
		m := asyncagentstest.NewManager(t, f, fastPoll)
		caller := asyncagentstest.NewParent(t, f)
		task := asyncagentstest.Launch(t, m, caller, outside)
		got := asyncagentstest.AwaitNotifications(t, f, caller.SessionID, 1)
		if !strings.Contains(got[0], `is waiting for permission: "external_directory" for "/no/such/*"`) {
			t.Fatalf("notification = %q", got[0])
		}
		tk, _ := m.Get(task.ID)
		if tk.Permission == nil || tk.Permission.Permission != "external_directory" || tk.Status != asyncagents.StatusRunning {
			t.Fatalf("task = %s %+v", tk.Status, tk.Permission)
		}
		list, err := tools(m)["asyncagents_list"].Handler(context.Background(), caller, nil)
		if err != nil || !strings.Contains(list, `waiting for permission: "external_directory" for "/no/such/*"`) {
			t.Fatalf("list = %q, %v", list, err)
		}
		if _, err := m.Cancel(context.Background(), caller, task.ID); err != nil {
			t.Fatal(err)
		}
		asyncagentstest.AwaitNotifications(t, f, caller.SessionID, 2)
		if got := asyncagentstest.Notifications(t, f, caller.SessionID); len(got) != 2 || !strings.Contains(got[1], "cancelled") {
			t.Fatalf("notifications = %q", got)
		}
	})
	for _, tc := range []struct {
		reply  asyncagents.PermissionReply
		status asyncagents.Status
		text   string
	}{
		{asyncagents.PermissionOnce, asyncagents.StatusCompleted, "No such file"},
		{asyncagents.PermissionAlways, asyncagents.StatusCompleted, "No such file"},
		{asyncagents.PermissionReject, asyncagents.StatusError, manager.HaltedAfterToolCall},
	} {
		t.Run(string(tc.reply), func(t *testing.T) {
			f := asyncagentstest.NewFakeClient(t)
			m := asyncagentstest.NewManager(t, f, fastPoll, asyncagents.WithPermissionPolicy(asyncagents.ReplyAll(tc.reply)))
			caller := asyncagentstest.NewParent(t, f)
			got := asyncagentstest.Await(t, m, caller, asyncagentstest.Launch(t, m, caller, outside).ID)
			if got.Status != tc.status || !strings.Contains(got.Result+got.Error, tc.text) {
				t.Fatalf("%s: %s %q %q", tc.reply, got.Status, got.Result, got.Error)
			}
		})
	}
	t.Run("panicking policy", func(t *testing.T) {
		f := asyncagentstest.NewFakeClient(t)
		logs := &logRecords{}
		m := asyncagentstest.NewManager(t, f, fastPoll, asyncagents.WithLogger(slog.New(logs)), asyncagents.WithPermissionPolicy(
			func(asyncagents.Task, asyncagents.PendingPermission) asyncagents.PermissionReply {
				panic("policy boom")
			}))
		caller := asyncagentstest.NewParent(t, f)
		asyncagentstest.Launch(t, m, caller, outside)
		asyncagentstest.AwaitNotifications(t, f, caller.SessionID, 1)
		if !logs.contains("panic in the permission policy") {
			t.Error("the panic was not logged")
		}
	})
}

// T-16 on the real server: a policy that allows once lets the task run its command; without
// one the parent is told that the task waits.
func TestRealServerPermissionPolicy(t *testing.T) {
	t.Parallel()
	srv := aborting.Get(t) // it cancels a busy session
	c := srv.Client()
	ctx := ctxT(t, 60*time.Second)
	caller := asyncagentstest.NewParent(t, c)
	allow := asyncagentstest.NewManager(t, c, fastPoll, asyncagents.WithPermissionPolicy(asyncagents.ReplyAll(asyncagents.PermissionOnce)),
		asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply))
	got := asyncagentstest.Await(t, allow, caller, asyncagentstest.Launch(t, allow, caller, outside).ID)
	if got.Status != asyncagents.StatusCompleted || !strings.Contains(got.Result, "No such file") {
		t.Fatalf("allowed task: %s %q %q", got.Status, got.Result, got.Error)
	}
	if err := allow.Close(ctx); err != nil {
		t.Fatal(err)
	}

	ask := asyncagentstest.NewManager(t, c, fastPoll, asyncagents.WithNotifyPolicy(asyncagents.NotifyNoReply))
	waiting := asyncagentstest.Launch(t, ask, caller, outside)
	var note string
	waitFor(t, 30*time.Second, func() bool {
		for _, n := range asyncagentstest.Notifications(t, c, caller.SessionID) {
			if strings.Contains(n, `is waiting for permission: "external_directory"`) {
				note = n
			}
		}
		return note != ""
	})
	if _, err := ask.Cancel(ctx, caller, waiting.ID); err != nil {
		t.Fatal(err)
	}
}
