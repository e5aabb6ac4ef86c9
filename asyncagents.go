package asyncagents

import (
	"github.com/asyncagents/asyncagents/manager"
	"github.com/asyncagents/asyncagents/opencode"
)

// The task model, re-exported from package manager so a host needs one import.
type (
	Manager       = manager.Manager
	Task          = manager.Task
	Status        = manager.Status
	Caller        = manager.Caller
	LaunchInput   = manager.LaunchInput
	Output        = manager.Output
	OutputOptions = manager.OutputOptions
	ClearResult   = manager.ClearResult
	Progress      = manager.Progress
	Store         = manager.Store
	MemoryStore   = manager.MemoryStore
	Clock         = manager.Clock
	Option        = manager.Option
)

// Task states (SPEC T-2).
const (
	StatusRunning   = manager.StatusRunning
	StatusCompleted = manager.StatusCompleted
	StatusError     = manager.StatusError
	StatusCancelled = manager.StatusCancelled
	StatusResumed   = manager.StatusResumed
)

// Errors of Manager operations and tools; match with errors.Is (SPEC R).
var (
	ErrTaskNotFound       = manager.ErrTaskNotFound
	ErrAmbiguousID        = manager.ErrAmbiguousID
	ErrForkResumeConflict = manager.ErrForkResumeConflict
	ErrInvalidInput       = manager.ErrInvalidInput
	ErrUnknownAgent       = manager.ErrUnknownAgent
	ErrNotRunning         = manager.ErrNotRunning
	ErrTaskBusy           = manager.ErrTaskBusy
	ErrSessionExpired     = manager.ErrSessionExpired
	ErrClosed             = manager.ErrClosed
)

// Options of New; each is documented in package manager with its default and bounds.
var (
	WithClock          = manager.WithClock
	WithPollInterval   = manager.WithPollInterval
	WithForkPipeline   = manager.WithForkPipeline
	WithStore          = manager.WithStore
	WithLogger         = manager.WithLogger
	WithToolPrefix     = manager.WithToolPrefix
	WithNotifications  = manager.WithNotifications
	WithNotifyNoReply  = manager.WithNotifyNoReply
	WithDebugHints     = manager.WithDebugHints
	WithNesting        = manager.WithNesting
	WithReconcilers    = manager.WithReconcilers
	WithNotifyAttempts = manager.WithNotifyAttempts
)

// New returns a Manager that runs background tasks on the OpenCode server behind client
// (usually an *opencode.HTTPClient). It starts the Manager's goroutines; call Close to stop
// them. Bad options give an error matching ErrInvalidInput.
func New(client opencode.Client, opts ...Option) (*Manager, error) {
	return manager.New(client, opts...)
}
