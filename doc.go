// Package asyncagents runs sub-agents in the background on an OpenCode server
// (`opencode serve`), for Go hosts of agents.
//
// A host creates a [Manager] with an [opencode.Client] and launches tasks on behalf of a
// parent session: each task runs in a child session of its own — fresh, or forked with the
// parent's context — while the parent keeps working. When a task ends, the parent session
// receives a notification: a visible line ("✓ Agent "scan" finished in 12s.") and a hidden
// hint for its model. The host, or the parent's model through the five LLM tools of
// [Tools], reads the output (at once, or blocking with a timeout), resumes a task with a
// follow-up, cancels it, lists the caller's tasks and clears them.
//
// A host connects with an [opencode.HTTPClient] (Basic auth when the server was started
// with OPENCODE_SERVER_PASSWORD), creates the parent session with
// [opencode.HTTPClient.CreateSession] — or passes the id of a session its agent already has —
// and launches a task for it. This is the program examples/quickstart of the module, with its
// error checks left out:
//
//	serverURL := cmp.Or(os.Getenv("OPENCODE_URL"), "http://127.0.0.1:4096")
//	// Basic auth when the server has a password; the user name defaults to "opencode".
//	client, err := opencode.NewHTTPClient(serverURL, opencode.WithBasicAuth(
//		os.Getenv("OPENCODE_SERVER_USERNAME"), os.Getenv("OPENCODE_SERVER_PASSWORD")))
//	defer client.CloseIdleConnections()
//
//	// The parent: the session the task belongs to. The task works in the parent's project
//	// directory, dir (-dir). A host whose agent has a session passes that session's id instead.
//	dir, err = filepath.Abs(dir)
//	parent, err := client.CreateSession(ctx, opencode.CreateSessionRequest{Title: "quickstart", Directory: dir})
//
//	// A FileStore at storePath (-store) keeps the tasks when the program stops: the next
//	// Manager on the file picks them up. (The default, a MemoryStore, forgets them.)
//	store, err := asyncagents.NewFileStore(storePath)
//	defer store.Close() // after m.Close
//	m, err := asyncagents.New(client, asyncagents.WithStore(store))
//	defer m.Close(context.Background())
//
//	caller := asyncagents.Caller{SessionID: parent.ID, Agent: "build"}
//	task, err := m.Launch(ctx, asyncagents.LaunchInput{
//		Caller: caller, Description: "find TODOs", Agent: "general",
//		Prompt: "List the TODO comments in this project, one per line with its file.",
//	})
//
//	// Launch returned at once; the task runs in its own child session. Output with Block
//	// waits for it to end (at most the timeout: then TimedOut is set).
//	res, err := m.Output(ctx, caller, task.ID, asyncagents.OutputOptions{Block: true, Timeout: 5 * time.Minute})
//	fmt.Fprintln(out, res.Task.Status, cmp.Or(res.Task.Result, res.Task.Error)) // running: timed out
//
// # Tasks
//
// A [Task] has an id of the Manager's own ("tsk_…", sorting the newer first) and runs in a
// child session of its parent (Task.SessionID, "ses_…"; a task recorded by an earlier version
// has its session's id as its id). The child session is created
// in the parent session's directory (or in an isolated task's worktree, below), so the task works in the parent's project (its tools,
// and the working directory its model is told) whatever directory the server was started in
// and however many projects it serves. Operations made for a caller
// accept the full id, the id without "tsk_", or a unique prefix of at least 4 characters
// after "tsk_", and only ever see the caller's own tasks. Lists show each task's display id:
// the shortest unique prefix with at least 8 characters after "tsk_".
//
// A task is [StatusRunning] until its run ends [StatusCompleted] (with the reply as
// Result), [StatusError] or [StatusCancelled]; [Manager.Resume] sends a follow-up to an
// ended task, which is [StatusResumed] until that run ends; [Manager.Steer] sends a running
// task a message its model takes at its next step, within the same run. A task over a concurrency limit
// ([WithConcurrency]) is [StatusQueued] until a slot frees. The end of a run is seen on the
// server's event stream (GET /global/event), with a poll of GET /session/status as the
// fallback. A run that ends with a reply may be completed from what the stream carried of
// it, when the stream carried the whole run; otherwise — and for every run that ends in an
// error, an abort or a halt — the end is decided from a read of the session's latest
// messages (GET /session/{id}/message). Both give the same result.
//
// # Isolated tasks
//
// A task launched with [IsolationWorktree] ([LaunchInput].Isolation, else [WithIsolation])
// works in a git worktree of its own instead of its parent's directory: the Manager makes it
// with the git command from the parent's checkout as it is at the launch (HEAD plus its
// uncommitted changes, not ignored files), and creates the task's session there. When a run
// ends, the worktree is committed on the task's branch; [Task].Worktree says what changed and
// which of those files the parent's other isolated tasks, or the parent's working tree, changed
// too, and so does the notification. [Manager.Merge] applies the branch to the parent's working
// tree with a three-way merge, and on a conflict changes nothing and returns a
// [*MergeConflictError]; [Manager.Discard] drops it; Clear removes the worktree. The host and
// the OpenCode server must share the file system. A forked isolated task gets the digest: OpenCode
// 1.18.33 keeps a native fork in its parent's directory.
//
// # Forked tasks
//
// A task launched with [LaunchInput].Fork gets its caller's context in one of two ways
// ([ForkMode]; [LaunchInput].ForkMode, else [WithForkMode], else [ForkDigest]):
//
//   - [ForkDigest] sends the parent's messages as text before the prompt, after three steps
//     of package fork: only what follows the latest compaction summary, older tool results
//     cut (the newest 5 whole, the next 10 to 3,000 characters, the rest to 500), and the
//     oldest messages dropped to fit 200,000 characters; a preamble tells the child what was
//     cut ([WithForkPipeline] changes these).
//   - [ForkNative] starts the child from OpenCode's own copy of the caller's session
//     (POST /session/{id}/fork), so that its first model request repeats the caller's last
//     one as a prefix, which a provider's prompt cache reads at a fraction of the price. A
//     history that does not fit the pipeline's budget falls back to ForkDigest.
//
// Task.ForkMode says which mode a task got, and Task.ForkStats what it inherited.
//
// # Notifications
//
// Each run end gives the parent one notification. By default ([NotifyPerWave]) it is posted
// without reply the moment the run ends, and the parent's model is asked for one turn for
// all the notifications it has not seen, once its runs stop ending for a moment
// ([WithWaveWindow]); [NotifyPerRun] makes each notification a prompt of its own, and
// [NotifyNoReply] never asks for a turn ([WithNotifyPolicy]). [WithNotifications] turns them
// off.
//
// # Costs, budgets and limits
//
// A task carries what its model steps used, as OpenCode counts them: tokens by kind and cost
// in USD ([Usage]), for all its runs (Task.Usage), its current or last run (Task.RunUsage)
// and its first step (Task.FirstStep: for a forked task, the price of the inherited
// context). [Manager.TreeUsage] sums what a caller's tasks used, with the tasks they launched
// in turn; [TreeUsage] does the same for a list of tasks. [WithTaskBudget] aborts a run that
// used its [Budget]; [WithTreeBudget] refuses launches and resumes for a caller whose tasks
// used theirs ([ErrBudget]). [WithConcurrency] bounds how many tasks run at once, per model,
// per provider or by default; [WithMaxActivePerParent] caps one parent's active tasks
// ([ErrTaskLimit]); [WithDeadline] and [WithStaleTimeout] abort runs that take too long or
// stall. All are off by default.
//
// # Stores and several hosts
//
// The Manager keeps its tasks, with their pending notifications, in a [Store] ([WithStore]).
// The default [MemoryStore] lives as long as the process. A [FileStore] ([NewFileStore])
// keeps them in a file, so that after a restart of the host a new Manager on the same file
// follows the tasks still running, starts the queued ones and delivers what was pending. A
// [LeaseStore] is shared by several Managers, on one host or several: each task is acted on
// by the one Manager that holds its lease; a [SlotStore] also keeps [WithConcurrency]'s
// slots, so that limits hold across hosts, and a [HandoffStore] lets every operation work
// from any host. Package [github.com/asyncagents/asyncagents/pgstore] is all three, on
// PostgreSQL. Close the store after the Manager.
//
// # Errors
//
// Every failed operation returns an error that matches one of the sentinels below with
// [errors.Is] and leaves every task as it was, except where a row says otherwise. Errors of
// the server come wrapped and match the errors of package opencode ([opencode.ErrNotFound],
// [*opencode.APIError]).
//
//	operation            errors
//	New                  ErrInvalidInput (nil client, bad option), the Store's Load error
//	Launch               ErrForkResumeConflict, ErrInvalidInput, ErrUnknownAgent,
//	                     ErrPermissionDenied, ErrNestingDepth, ErrTaskLimit, ErrBudget,
//	                     ErrIsolation, ErrClosed;
//	                     after the child session exists, a failure leaves the task in
//	                     StatusError and returns it with the error
//	Output               ErrInvalidInput (also an unknown SinceMessageID, checked before
//	                     it waits), ErrTaskNotFound (also for a task cleared while waited
//	                     on), ErrAmbiguousID, ErrLeaseLost (handed over to another host while
//	                     waited on), ErrClosed, ctx.Err()
//	Resume               ErrInvalidInput, ErrTaskNotFound, ErrAmbiguousID, ErrTaskBusy,
//	                     ErrSessionExpired, ErrTaskLimit, ErrBudget, ErrLeaseLost, ErrClosed;
//	                     a follow-up the server refuses leaves the task in StatusError
//	Cancel               ErrInvalidInput, ErrTaskNotFound, ErrAmbiguousID, ErrNotRunning,
//	                     ErrLeaseLost, ErrClosed
//	List                 ErrInvalidInput (unknown status, empty caller), ErrClosed
//	ListAll              ErrInvalidInput (unknown status), ErrClosed
//	Subscribe            ErrInvalidInput (buffer out of range), ErrClosed; a subscription
//	                     that falls behind ends with ErrLagged (Subscription.Err)
//	Merge, Discard       ErrInvalidInput, ErrTaskNotFound, ErrAmbiguousID, ErrNotMergeable,
//	                     ErrIsolation, ErrLeaseLost, ErrClosed; Merge: ErrConflict
//	                     (a *MergeConflictError)
//	Clear, ClearAll      ErrInvalidInput (Clear: empty caller), ErrClosed, the Store's Delete
//	                     error (the tasks are removed from the Manager all the same)
//	Get                  ErrTaskNotFound, ErrClosed
//	TreeUsage            ErrClosed
//	NewFileStore         ErrInvalidInput (empty path), ErrStoreLocked, ErrStoreCorrupt
//	Close                ctx.Err() when ctx ends before the goroutines stopped
//	Tool handlers        the errors of the operation they call, and ErrInvalidInput for
//	                     arguments that do not match the tool's schema
//
// ErrLeaseLost comes only with a [LeaseStore]: the task is being handed over to another
// host, or this one lost its lease; try again. With a [HandoffStore], an operation on a task
// another host holds first waits up to 15 s for it to be handed over, and is ErrTaskNotFound
// when it was not.
//
// # Nothing lost
//
// Every run that ends on the server ends in the Manager, and, with notifications on (the
// default; [WithNotifications]), gives its parent exactly one notification: events that are missed (a dropped stream, an early or duplicate
// session.idle) are made up for by the status poll, which keeps reading an idle task's
// latest messages, less and less often, until its run is decided; a run the server left
// unfinished (a restart or a crash mid-step), or aborted before the server that answers now
// started ([WithServerStarted]), ends in StatusError as interrupted, its duration ending at
// its last activity. A run's
// prompt carries a message id the Manager chose (Task.PromptID): when the answer to sending
// it is lost, the run goes on as the server runs it, and a prompt the server turns out not
// to have (after a minute with the session idle) is sent again under the same id, which
// OpenCode never answers twice. The notification of each run end is kept in the task's
// record (Task.Notifications) until delivered, retried per parent with backoff for
// [WithNotifyHorizon], and checked for by its message id before a retry: a lost answer does
// not post it twice, and a retry goes under the same message and part ids, which OpenCode
// stores in place of an earlier post that lands late; one posted with prompt_async counts
// once the server shows its message, and is posted again when a minute later it does not. By default ([NotifyPerWave])
// notifications are posted without reply, those of a parent due together merged into one
// message, and the parent is asked for one turn per wave of run ends, with a prompt posted
// under the same rules. With a [FileStore], or a store that several hosts share, all of this
// survives a restart of the host (with a LeaseStore, another host carries on with the tasks
// of one that stopped); with the default [MemoryStore], a restart forgets every task.
//
// # Goroutines and panics
//
// A Manager is safe for concurrent use. It owns its goroutines, and [Manager.Close] stops
// them all and waits; the list of them is [Manager]'s documentation. Their number does not
// grow with the number of tasks, but for two short-lived kinds: a hand-over of a task to
// another host, and an answer to a permission request by [WithPermissionPolicy].
//
// A panic in one of them — in the [opencode.Client], the [Store], a [PermissionPolicy] or the
// Manager itself — never reaches the host. Work for one task records it on that task: a read
// of the task's messages ends it in [StatusError] with the panic's value and stack; a
// notification attempt counts as failed and is retried. Anything else is logged
// ([WithLogger]) and the goroutine goes on (a long-lived one starts again a second later).
// Methods called by the host run on the host's goroutine and do not recover: a panic in the
// Client during Launch reaches the caller like any other Go panic.
package asyncagents
