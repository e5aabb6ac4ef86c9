package manager

import "errors"

// Errors of Manager operations. Each is wrapped with the details; match with errors.Is. A
// call that returns one of them has changed no task (SPEC R).
var (
	ErrTaskNotFound       = errors.New("asyncagents: task not found")
	ErrAmbiguousID        = errors.New("asyncagents: ambiguous task id")
	ErrForkResumeConflict = errors.New("asyncagents: fork and resume are mutually exclusive: use fork to start a new task with the parent's context, resume to continue an existing task")
	ErrInvalidInput       = errors.New("asyncagents: invalid input")
	ErrUnknownAgent       = errors.New("asyncagents: unknown agent")
	ErrNotRunning         = errors.New("asyncagents: only running tasks can be cancelled")
	ErrTaskBusy           = errors.New("asyncagents: task is busy")
	ErrSessionExpired     = errors.New("asyncagents: the task's session expired or was deleted; start a new task")
	ErrClosed             = errors.New("asyncagents: manager closed")
)
