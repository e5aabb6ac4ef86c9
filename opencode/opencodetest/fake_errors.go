package opencodetest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	"github.com/asyncagents/asyncagents/opencode"
)

// fakeMethods are the method names FailCalls accepts.
var fakeMethods = []string{"CreateSession", "GetSession", "Messages", "MessagesBefore", "Message", "Prompt", "PromptAsync", "Abort",
	"SessionStatus", "Agents", "Events", "Permissions", "ReplyPermission", "ForkSession", "UpdateSession", "DeleteSession"}

// FailCalls makes the next n calls of the named method (e.g. "PromptAsync", "Messages",
// "Events") fail with err and do nothing else. A nil err fails them as the real server's
// unexpected errors do: an [*opencode.APIError] with status 500, name UnknownError. It panics
// for a name that is not a method of [opencode.Client] or a permission method of FakeClient.
func (f *FakeClient) FailCalls(method string, n int, err error) {
	if !slices.Contains(fakeMethods, method) {
		panic(fmt.Sprintf("opencodetest: FailCalls: %q is not one of %v", method, fakeMethods))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for range n {
		f.faults[method] = append(f.faults[method], err)
	}
}

// enter checks a call: an error once the fake is closed, when ctx is done, or when a failure
// was injected for method. f.mu must be held.
func (f *FakeClient) enter(ctx context.Context, method, httpMethod, path string) error {
	if f.closed {
		return errFakeClosed
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("opencodetest: %s %s: %w", httpMethod, path, err)
	}
	if q := f.faults[method]; len(q) > 0 {
		err := q[0]
		f.faults[method] = q[1:]
		if err == nil {
			err = unknownError(httpMethod, path)
		}
		return err
	}
	return nil
}

// apiError builds the error HTTPClient would return for the body OpenCode answers with.
func apiError(method, path string, status int, body any) *opencode.APIError {
	b, _ := json.Marshal(body)
	e := &opencode.APIError{Method: method, Path: path, StatusCode: status, Body: b}
	var v struct {
		Name    string `json:"name"`
		Tag     string `json:"_tag"`
		Message string `json:"message"`
		Data    struct {
			Message string `json:"message"`
		} `json:"data"`
	}
	_ = json.Unmarshal(b, &v)
	e.Name, e.Message = v.Name, v.Data.Message
	if e.Name == "" {
		e.Name, e.Message = v.Tag, v.Message
	}
	return e
}

func notFound(method, path, sessionID string) *opencode.APIError {
	return apiError(method, path, http.StatusNotFound, map[string]any{
		"name": "NotFoundError", "data": map[string]any{"message": "Session not found: " + sessionID}})
}

func unknownError(method, path string) *opencode.APIError {
	return apiError(method, path, http.StatusInternalServerError, map[string]any{
		"name": "UnknownError", "data": map[string]any{
			"message": "Unexpected server error. Check server logs for details.", "ref": "err_opencodetest"}})
}

func badRequest(method, path, message string) *opencode.APIError {
	return apiError(method, path, http.StatusBadRequest, map[string]any{
		"name": "BadRequest", "data": map[string]any{"message": message, "kind": "Payload"}})
}
