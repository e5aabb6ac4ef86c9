package opencode

import (
	"encoding/json"
	"errors"
	"fmt"
)

// ErrNotFound is matched (errors.Is) by an [*APIError] for HTTP 404 or OpenCode's
// NotFoundError: an unknown session id ("Session not found: ses_…"), or a permission request
// that is not pending (PermissionNotFoundError).
var ErrNotFound = errors.New("opencode: not found")

// ErrUnauthorized is matched by an [*APIError] for HTTP 401 (missing or wrong Basic auth).
var ErrUnauthorized = errors.New("opencode: unauthorized")

// APIError is a non-2xx answer of the OpenCode server. OpenCode uses two body shapes,
// {"name", "data": {"message"}} and {"_tag", "message"}; Name and Message come from whichever
// is present, Body keeps the raw body (an empty 401 has neither). It matches [ErrNotFound] and
// [ErrUnauthorized] with errors.Is.
type APIError struct {
	Method     string
	Path       string
	StatusCode int
	Name       string // "NotFoundError", "BadRequest", "UnknownError", "PermissionNotFoundError", …
	Message    string
	Body       []byte
}

func (e *APIError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = e.Name
	}
	if msg == "" {
		return fmt.Sprintf("opencode: %s %s: HTTP %d", e.Method, e.Path, e.StatusCode)
	}
	return fmt.Sprintf("opencode: %s %s: HTTP %d: %s", e.Method, e.Path, e.StatusCode, msg)
}

// Is reports ErrNotFound for 404 / NotFoundError and ErrUnauthorized for 401.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrNotFound:
		return e.StatusCode == 404 || e.Name == "NotFoundError"
	case ErrUnauthorized:
		return e.StatusCode == 401
	}
	return false
}

func newAPIError(method, path string, status int, body []byte) *APIError {
	e := &APIError{Method: method, Path: path, StatusCode: status, Body: body}
	var b struct {
		Name    string `json:"name"`
		Tag     string `json:"_tag"`
		Message string `json:"message"`
		Data    struct {
			Message string `json:"message"`
		} `json:"data"`
	}
	if json.Unmarshal(body, &b) == nil {
		// Effect-style errors carry their type in "_tag", and may use "name" for something
		// else (McpServerNotFoundError: the MCP server's name); the others use "name".
		e.Name = b.Tag
		if e.Name == "" {
			e.Name = b.Name
		}
		e.Message = b.Data.Message
		if e.Message == "" {
			e.Message = b.Message
		}
	}
	return e
}
