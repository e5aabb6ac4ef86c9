// Package asyncagentstest is test support for hosts of an [asyncagents.Manager]: code
// that launches tasks, reads their output or watches them can be tested against a real
// Manager running on an in-memory OpenCode ([opencodetest.FakeClient]), without a server
// or a model.
//
//	func TestReview(t *testing.T) {
//		client := asyncagentstest.NewFakeClient(t)
//		m := asyncagentstest.NewManager(t, client, asyncagents.WithNotifications(false))
//		parent := asyncagentstest.NewParent(t, client)
//
//		id := myhost.StartReview(m, parent) // the host's code under test
//		task := asyncagentstest.Await(t, m, parent, id)
//		if task.Status != asyncagents.StatusCompleted { … }
//	}
//
// [NewFakeClient] and [NewManager] close what they create when the test ends (the Manager
// first), so a test that uses goleak finds no goroutine of theirs. [NewManager] and
// [NewParent] take any [opencode.Client]: the same test runs on a real `opencode serve` by
// passing an [opencodetest.Server]'s client instead.
//
// The fake's model is scripted: a task's prompt can carry directives ("RUN:echo hi" runs a
// bash command and answers with its output; see [opencodetest.Directive]), and the test can
// queue replies for the next model steps with [opencodetest.FakeClient.Enqueue] or decide
// them with [opencodetest.FakeClient.SetScript]. A test that must act while a task runs
// creates the client with [opencodetest.WithHeldRuns]: every run then waits, busy, until
// the test calls [opencodetest.FakeClient.Release] with the task's id, optionally with the
// replies the run gives ([opencodetest.Text], [opencodetest.Fail]); [Release] does so and
// fails the test when it cannot.
//
// [Await] waits for a task's end as its caller would, through Output. The other waits look
// every 10 ms at first, then less often (up to every 250 ms), and fail the test after
// [AwaitTimeout]: [AwaitTask] for any condition on a task (running after it was queued;
// [Delivered], its parent notified), [AwaitBusy] for a
// session's run to be under way (a held run is), and [AwaitNotifications] for what a parent
// session was told ([Notifications] reads it).
//
// The functions take the test as a [TB], which *testing.T implements. They report a
// failure with t.Fatalf, so they must be called from the goroutine running the test, as
// [testing.T.FailNow] requires. The package starts no goroutines; the Manager and the
// FakeClient own theirs, and the cleanups that NewManager and NewFakeClient register stop
// them.
package asyncagentstest
