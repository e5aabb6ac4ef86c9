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
//	client, err := opencode.NewHTTPClient("http://127.0.0.1:4096")
//	m, err := asyncagents.New(client)
//	defer m.Close(ctx)
//	caller := asyncagents.Caller{SessionID: parentID, Agent: "build"}
//	t, err := m.Launch(ctx, asyncagents.LaunchInput{Caller: caller, Description: "find TODOs",
//		Prompt: "List the TODO comments in the files we read.", Agent: "general", Fork: true})
//	out, err := m.Output(ctx, caller, t.ID, asyncagents.OutputOptions{Block: true})
//
// # Tasks
//
// A [Task] is identified by its child session's id ("ses_…"). The child session is created
// in the parent session's directory, so the task works in the parent's project (its tools,
// and the working directory its model is told) whatever directory the server was started in
// and however many projects it serves. Operations made for a caller
// accept the full id, the id without "ses_", or a unique prefix of at least 4 characters
// after "ses_", and only ever see the caller's own tasks. Lists show each task's display id:
// the shortest unique prefix with at least 8 characters after "ses_".
//
// A task is [StatusRunning] until its run ends [StatusCompleted] (with the reply as
// Result), [StatusError] or [StatusCancelled]; [Manager.Resume] sends a follow-up to an
// ended task, which is [StatusResumed] until that run ends. The end of a run is seen on the
// server's event stream (GET /global/event), with a poll of GET /session/status as the
// fallback. A run that ends with a reply may be completed from what the stream carried of
// it, when the stream carried the whole run; otherwise — and for every run that ends in an
// error, an abort or a halt — the end is decided from a read of the session's latest
// messages (GET /session/{id}/message). Both give the same result.
//
// A forked task receives the parent's messages as text before its prompt, after three
// steps of package fork: only what follows the latest compaction summary, older tool
// results cut (the newest 5 whole, the next 10 to 3,000 characters, the rest to 500), and
// the oldest messages dropped to fit 200,000 characters; a preamble tells the child what
// was cut ([WithForkPipeline] changes these).
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
//	                     ErrNestingDepth, ErrTaskLimit, ErrClosed;
//	                     after the child session exists, a failure leaves the task in
//	                     StatusError and returns it with the error
//	Output               ErrInvalidInput (also an unknown SinceMessageID, checked before
//	                     it waits), ErrTaskNotFound, ErrAmbiguousID, ErrClosed, ctx.Err()
//	Resume               ErrInvalidInput, ErrTaskNotFound, ErrAmbiguousID, ErrTaskBusy,
//	                     ErrSessionExpired, ErrTaskLimit, ErrClosed; a follow-up the server
//	                     refuses leaves the task in StatusError
//	Cancel               ErrInvalidInput, ErrTaskNotFound, ErrAmbiguousID, ErrNotRunning, ErrClosed
//	List                 ErrInvalidInput (unknown status, empty caller), ErrClosed
//	ListAll              ErrInvalidInput (unknown status), ErrClosed
//	Subscribe            ErrInvalidInput (buffer out of range), ErrClosed; a subscription
//	                     that falls behind ends with ErrLagged (Subscription.Err)
//	Clear, ClearAll      ErrInvalidInput (Clear: empty caller), ErrClosed, the Store's Delete
//	                     error (the tasks are removed from the Manager all the same)
//	Get                  ErrTaskNotFound, ErrClosed
//	NewFileStore         ErrInvalidInput (empty path), ErrStoreLocked, ErrStoreCorrupt
//	Close                ctx.Err() when ctx ends before the goroutines stopped
//	Tool handlers        the errors of the operation they call, and ErrInvalidInput for
//	                     arguments that do not match the tool's schema
//
// # Nothing lost
//
// Every run that ends on the server ends in the Manager, and, with notifications on (the
// default; [WithNotifications]), gives its parent exactly one notification: events that are missed (a dropped stream, an early or duplicate
// session.idle) are made up for by the status poll, which keeps reading an idle task's
// latest messages, less and less often, until its run is decided; a run the server left
// unfinished (a restart or a crash mid-step) ends in StatusError as interrupted. A run's
// prompt carries a message id the Manager chose (Task.PromptID): when the answer to sending
// it is lost, the run goes on as the server runs it, and a prompt the server turns out not
// to have (after a minute with the session idle) is sent again under the same id, which
// OpenCode never answers twice. The notification of each run end is kept in the task's
// record (Task.Notifications) until delivered, retried per parent with backoff for
// [WithNotifyHorizon], and checked for by its message id before a retry so that a lost answer
// does not post it twice; one posted with prompt_async counts once the server shows its
// message, and is posted again when a minute later it does not. By default ([NotifyPerWave])
// notifications are posted without reply, those of a parent due together merged into one
// message, and the parent is asked for one turn per wave of run ends, with a prompt posted
// under the same rules. With a [FileStore] all of this survives a
// restart of the host.
//
// # Goroutines and panics
//
// A Manager is safe for concurrent use. It owns a bounded number of goroutines, whatever the
// number of tasks: 4 + n always (the event stream, the goroutine applying its events, the
// status poll, the notifier, and n reconcilers, [WithReconcilers]); during a burst of run ends
// up to 64 reconcilers in all, with up to 16 more recording the ends of the runs they decide
// together, and 32 notification workers, one parent session each, each with up to 7 more
// goroutines posting that parent's merged notifications; right
// after [New], one that starts the stored queued tasks and one that sends the stored
// follow-ups; with [WithPermissionPolicy], one per permission request being answered.
// [Manager.Close] stops them all and waits.
//
// A panic in one of them — in the [opencode.Client], the [Store], a [PermissionPolicy] or the
// Manager itself — never reaches the host. Work for one task records it on that task: a read
// of the task's messages ends it in [StatusError] with the panic's value and stack; a
// notification attempt counts as failed and is retried. Anything else is logged
// ([WithLogger]) and the goroutine goes on (a long-lived one starts again a second later).
// Methods called by the host run on the host's goroutine and do not recover: a panic in the
// Client during Launch reaches the caller like any other Go panic.
package asyncagents
