package worktree

import (
	"errors"
	"fmt"
	"strings"
)

// Errors of [Open] and of the [Repo] methods. Each is wrapped with the details (the path, the
// task id, git's own message); match with [errors.Is]. A method that returns one of them has
// changed nothing: not the parent's checkout, index or refs, and no task's worktree or branch.
var (
	// ErrGitMissing: the git command is not on PATH (or not at the path given to [WithGit]).
	ErrGitMissing = errors.New("worktree: git not found")
	// ErrGitVersion: the git command is older than [MinGitVersion].
	ErrGitVersion = errors.New("worktree: git too old")
	// ErrNotRepository: the directory is not inside a git working tree (it is in no
	// repository, inside a .git directory, or in a bare repository).
	ErrNotRepository = errors.New("worktree: not a git working tree")
	// ErrUnbornHead: the parent's HEAD names a branch with no commit yet; there is nothing to
	// start a task from. Make a first commit.
	ErrUnbornHead = errors.New("worktree: HEAD has no commit")
	// ErrUnmerged: the index of the parent's checkout (or of a task's worktree, for
	// [Repo.Commit]) has unmerged paths; the message names some. Resolve them first.
	ErrUnmerged = errors.New("worktree: unmerged paths")
	// ErrInProgress: a merge, rebase, cherry-pick or revert is in progress in the parent's
	// checkout (or in a task's worktree, for [Repo.Commit]); finish or abort it first.
	ErrInProgress = errors.New("worktree: operation in progress")
	// ErrInvalidOption: an option of [Open], or its root folder, is not usable.
	ErrInvalidOption = errors.New("worktree: invalid option")
	// ErrInvalidInput: a task id is not a usable name (see [Repo.Start]), or an offset is
	// negative.
	ErrInvalidInput = errors.New("worktree: invalid input")
	// ErrTaskExists: the task's branch, base ref or worktree folder exists already.
	ErrTaskExists = errors.New("worktree: task exists")
	// ErrNoTask: no task of that id was started in the repository, or it was discarded.
	ErrNoTask = errors.New("worktree: no such task")
	// ErrNoWorktree: the task's worktree is gone (discarded or deleted); its branch may be
	// there still.
	ErrNoWorktree = errors.New("worktree: task worktree missing")
	// ErrBranchMoved: the task's worktree has another branch (or a detached HEAD) checked
	// out, or the task's branch no longer descends from its base; the message says which.
	ErrBranchMoved = errors.New("worktree: task branch moved")
	// ErrConflict: [Repo.Merge] found conflicting changes; the error is a [*ConflictError]
	// that lists them. The parent's checkout was not changed.
	ErrConflict = errors.New("worktree: merge conflict")
	// ErrWouldOverwrite: [Repo.Merge] would write a file (or a folder) where the parent's
	// working tree has one git ignores (a log, a .env); the message names them. Move them
	// away, or merge by hand.
	ErrWouldOverwrite = errors.New("worktree: merge would overwrite ignored files")
	// ErrLocked: another git process holds one of git's lock files (index.lock, a ref's
	// lock) of the repository; try again when it is done.
	ErrLocked = errors.New("worktree: repository locked by another git process")
)

// ConflictError is what [Repo.Merge] returns when the task's changes conflict with the
// parent's. It matches [ErrConflict].
type ConflictError struct {
	// Task is the task's id.
	Task string
	// Conflicts lists the conflicting files, sorted by path.
	Conflicts []Conflict
}

// Error names the task and up to five conflicting paths.
func (e *ConflictError) Error() string {
	paths := make([]string, 0, min(len(e.Conflicts), 5))
	for _, c := range e.Conflicts[:cap(paths)] {
		paths = append(paths, c.Path)
	}
	more := ""
	if len(e.Conflicts) > len(paths) {
		more = fmt.Sprintf(" and %d more", len(e.Conflicts)-len(paths))
	}
	return fmt.Sprintf("%v: task %s conflicts with the parent in %s%s", ErrConflict, e.Task, strings.Join(paths, ", "), more)
}

// Is reports whether target is [ErrConflict].
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// gitError is a git command that failed: its arguments, exit code and standard error.
type gitError struct {
	args   []string
	code   int
	stderr string
}

func (e *gitError) Error() string {
	msg := strings.TrimSpace(e.stderr)
	if msg == "" {
		msg = "no message"
	}
	return fmt.Sprintf("worktree: git %s: exit %d: %s", strings.Join(e.args, " "), e.code, msg)
}

// Is reports whether target is [ErrLocked] and git failed on a lock file another process
// holds.
func (e *gitError) Is(target error) bool {
	return target == ErrLocked && strings.Contains(e.stderr, ".lock': File exists")
}
