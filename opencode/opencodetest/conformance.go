package opencodetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/asyncagents/asyncagents/opencode"
)

// Harness describes the server behind the client that [TestClient] checks.
type Harness struct {
	// Directory is the project directory of the client's sessions: what Session.Directory,
	// Event.Directory and SessionStatus(ctx, Directory) refer to. Required.
	Directory string
	// Requests, when set, returns the model requests made so far ([Model.Requests] of the
	// server's model, or [FakeClient.Requests]); TestClient then also checks that a NoReply
	// prompt calls no model, and that a session's model is told the session's directory.
	Requests func() []Request
	// OtherDirectory, when set, is a second project directory the server serves with the
	// same model ([Server.NewProject]; any clean absolute path for a [FakeClient]):
	// TestClient then checks that a session created there belongs to that instance.
	OtherDirectory string
}

// CheckTimeout bounds each check of [TestClient]: how long it waits for a run or an event.
const CheckTimeout = 60 * time.Second

// TestClient checks that c behaves like OpenCode 1.18.33 serving the scripted model of this
// package: a [Server] (its [Server.Client]) or a [FakeClient]. It returns every violation it
// found, joined with errors.Join, or nil. It creates sessions and runs prompts driven by the
// model's directives (RUN:, SLEEP:, FAIL:), so the server's model must answer them.
//
// The checks: session creation and lookup (id shape and order, default titles, child
// sessions, an unknown id matching [opencode.ErrNotFound] as an [*opencode.APIError]); a
// NoReply prompt; a PromptAsync run with a bash tool (the order and shapes of its events, the
// reply carried whole by the events before the idle, and its final messages); a blocking Prompt; Messages with a limit; MessagesBefore paging; the status of a busy session
// and its abort; abort of an idle and an unknown session; the agent list; an unknown agent
// and an unknown model; a failed model call; a permission request and a session rule that
// allows it; a session created in [Harness.OtherDirectory] (its Directory, its events'
// Directory, the status of each instance, the working directory its model is told); and the
// event stream contract of [opencode.EventStream]. When c also has Permissions and ReplyPermission methods, like [opencode.HTTPClient] and
// [FakeClient], the permission check lists the request and rejects it; otherwise it aborts
// the session.
//
// Each check waits at most [CheckTimeout]; ctx bounds them all.
func TestClient(ctx context.Context, c opencode.Client, h Harness) error {
	if h.Directory == "" {
		return errors.New("opencodetest: TestClient: Harness.Directory is required")
	}
	checks := []struct {
		name string
		run  func(*checker)
	}{
		{"sessions", checkSessions},
		{"no reply", checkNoReply},
		{"message id", checkMessageID},
		{"paging", checkPaging},
		{"run", checkRun},
		{"blocking prompt", checkBlockingPrompt},
		{"abort busy", checkAbortBusy},
		{"abort idle", checkAbortIdle},
		{"agents", checkAgents},
		{"directory", checkDirectory},
		{"unknown agent", checkUnknownAgent},
		{"unknown model", checkUnknownModel},
		{"model failure", checkModelFailure},
		{"permission", checkPermission},
		{"permission rule", checkPermissionRule},
		{"event stream", checkEventStream},
		{"fork", checkFork},
	}
	var errs []error
	for _, ch := range checks {
		cctx, cancel := context.WithTimeout(ctx, CheckTimeout)
		k := &checker{ctx: cctx, c: c, h: h, name: ch.name}
		ch.run(k)
		k.closeStreams()
		cancel()
		errs = append(errs, k.errs...)
		if ctx.Err() != nil {
			errs = append(errs, fmt.Errorf("opencodetest: TestClient: %w", ctx.Err()))
			break
		}
	}
	return errors.Join(errs...)
}

// checker collects the violations of one check.
type checker struct {
	ctx     context.Context
	c       opencode.Client
	h       Harness
	name    string
	errs    []error
	streams []*eventReader
}

func (k *checker) errorf(format string, args ...any) {
	k.errs = append(k.errs, fmt.Errorf("%s: "+format, append([]any{k.name}, args...)...))
}

// ok records err (with what was being done) and reports whether it was nil.
func (k *checker) ok(err error, doing string) bool {
	if err != nil {
		k.errorf("%s: %v", doing, err)
	}
	return err == nil
}

func (k *checker) session(req opencode.CreateSessionRequest) *opencode.Session {
	s, err := k.c.CreateSession(k.ctx, req)
	if !k.ok(err, "CreateSession") {
		return nil
	}
	return s
}

func (k *checker) messages(id string, limit int) []opencode.Message {
	m, err := k.c.Messages(k.ctx, id, limit)
	if !k.ok(err, "Messages") {
		return nil
	}
	return m
}

func text(s string) []opencode.TextPartInput { return []opencode.TextPartInput{opencode.NewText(s)} }

func isAPIError(err error, status int) bool {
	var ae *opencode.APIError
	return errors.As(err, &ae) && ae.StatusCode == status
}

func decodeJSON(b []byte, v any) error { return json.Unmarshal(b, v) }
