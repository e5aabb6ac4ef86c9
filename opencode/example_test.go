package opencode_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/asyncagents/asyncagents/opencode"
)

// Errors the server answers with are *APIError values: errors.Is matches the sentinels and
// errors.As gives the status, OpenCode's error name and message.
func ExampleAPIError() {
	// A stand-in for `opencode serve`, answering as it does for an unknown session.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"name":"NotFoundError","data":{"message":"Session not found: ses_missing"}}`)
	}))
	defer srv.Close()

	c, _ := opencode.NewHTTPClient(srv.URL)
	_, err := c.GetSession(context.Background(), "ses_missing")
	fmt.Println(errors.Is(err, opencode.ErrNotFound))
	var apiErr *opencode.APIError
	if errors.As(err, &apiErr) {
		fmt.Println(apiErr.StatusCode, apiErr.Name, apiErr.Message)
	}
	fmt.Println(err)
	// Output:
	// true
	// 404 NotFoundError Session not found: ses_missing
	// opencode: GET /session/ses_missing: HTTP 404: Session not found: ses_missing
}
