// Package worktree isolates background tasks in git: each task works in a git worktree of
// its own, on a branch of its own, started from what the parent sees — its checkout's HEAD
// plus its uncommitted changes — so that tasks never edit the parent's working tree, never
// race each other on a file, and leave a branch that says what each changed.
//
//	Open      the parent's checkout and the folder for the task worktrees
//	Start     snapshot the parent's working tree (on a temporary index) → worktree + branch
//	Commit    when a run ends: commit the worktree on its branch → Change (files, +/− lines)
//	Diff      the branch's diff, a page at a time
//	Overlaps  files two tasks both changed, and files the parent changed that a task changed
//	Merge     three-way merge of a branch into the parent's working tree, uncommitted;
//	          on a conflict nothing changes and the conflicting files and hunks are listed
//	Discard   remove a task's worktree and branch (or keep the branch)
//	Sweep     remove what tasks no longer live left behind, after a crash
//
// Task "ses_1" of a [Repo] opened with root "/data/worktrees" works in
// /data/worktrees/ses_1 on branch asyncagents/ses_1; the ref refs/asyncagents/base/ses_1
// holds the commit it started from and marks it as the package's. OpenCode runs the task in
// a session created in that directory (POST /session?directory=…), so the worktree must be
// on a file system the OpenCode server sees at the same path: the same machine or the same
// mount.
//
// The package runs the git command (version [MinGitVersion] or newer) with the context of
// the call, and never touches the parent's index, HEAD, branch or stash: snapshots are
// staged on temporary copies of the index (in the system's temporary folder), and only
// [Repo.Merge] writes to the parent's working tree. Snapshots and merge results are objects
// in the repository's object database, as git add makes them; those no ref holds go with
// git's own gc. Git reads no system or global configuration, runs no hooks, signs nothing
// and starts no background gc; of the user's configuration it carries only the settings
// that decide how files map to the repository (core.autocrlf, core.eol, core.excludesFile,
// core.attributesFile), read once by [Open], so that a snapshot takes the files the user's
// git would.
//
// A [Repo] is safe for concurrent use, by any number of goroutines and on any tasks. The
// operations that write to the repository or read a working tree (Start, Commit,
// Overlaps, Merge, Discard, Sweep) take a lock of the repository — one per repository in the
// process, shared by every Repo of it — and so run one at a time; Task, Tasks, Change and
// Diff read commits only and take none. Another process running git on the repository at
// the same moment may hold a lock file git needs: the operation then fails with
// [ErrLocked] and changes nothing, and can be tried again. The package starts no goroutine
// that outlives a call: each call waits for the git processes it started.
//
// Start costs a snapshot of the parent's working tree (about 0.2 s for 10,000 files) plus
// git's checkout of the worktree, which on a slow disk is most of it.
//
// What it does not do: it does not start or watch tasks (the Manager does, calling these
// methods), it does not copy ignored files (dependencies, build outputs) or check out
// submodules in a worktree, and it does not commit a merge in the parent's branch.
package worktree
