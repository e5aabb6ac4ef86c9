package opencode

import (
	"context"
	"net/http"
	"time"
)

// Toast is a message the TUI attached to a server shows for a while in a corner of its
// screen (POST /tui/show-toast).
type Toast struct {
	Title   string // optional
	Message string
	// Variant is "info", "success", "warning" or "error" ("" is "info").
	Variant string
	// Duration is how long it shows; 0 is the TUI's default (about 5 s).
	Duration time.Duration
}

// ShowToast asks the TUI attached to the server to show t (POST /tui/show-toast, body
// {title, message, variant, duration in ms}; OpenCode answers true and emits
// tui.toast.show). A server with no TUI (opencode serve) answers the same and shows nothing.
// It is a method of HTTPClient only: the TUI is no part of what a [Client] needs.
func (c *HTTPClient) ShowToast(ctx context.Context, t Toast) error {
	body := struct {
		Title    string `json:"title,omitempty"`
		Message  string `json:"message"`
		Variant  string `json:"variant"`
		Duration int64  `json:"duration,omitempty"`
	}{t.Title, t.Message, t.Variant, t.Duration.Milliseconds()}
	if body.Variant == "" {
		body.Variant = "info"
	}
	return c.do(ctx, http.MethodPost, "/tui/show-toast", nil, body, nil)
}
