package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/dashboard"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// A host that has its own logins puts the dashboard behind them with WithMiddleware, and
// serves it under a prefix of its own mux with http.StripPrefix: the middleware sees the
// path without the prefix, and the page and the API work under any prefix.
func ExampleWithMiddleware() {
	ctx := context.Background()
	client := opencodetest.NewFakeClient() // an opencode.HTTPClient in a real host
	defer client.Close()
	m, err := asyncagents.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close(ctx)
	// A task to show.
	parent, _ := client.CreateSession(ctx, opencode.CreateSessionRequest{Title: "parent"})
	caller := asyncagents.Caller{SessionID: parent.ID, Agent: "build"}
	task, _ := m.Launch(ctx, asyncagents.LaunchInput{Caller: caller, Description: "say hi", Agent: "general", Prompt: "RUN:echo hi"})
	_, _ = m.Output(ctx, caller, task.ID, asyncagents.OutputOptions{Block: true})

	// The host's middleware: its own session cookie, checked before the dashboard runs.
	requireLogin := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c, err := r.Cookie("host_session")
			if err != nil || c.Value != "alice-session" { // the host's own session check
				http.Error(w, "log in first", http.StatusUnauthorized)
				return
			}
			fmt.Println("alice opens", r.URL.Path)
			next.ServeHTTP(w, r)
		})
	}
	h, err := dashboard.New(m, dashboard.WithMiddleware(requireLogin))
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()

	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "the host's home") })
	mux.Handle("/admin/tasks/", http.StripPrefix("/admin/tasks", h))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	get := func(path string, loggedIn bool) *http.Response {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if loggedIn {
			req.AddCookie(&http.Cookie{Name: "host_session", Value: "alice-session"})
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			log.Fatal(err)
		}
		return resp
	}

	text := func(resp *http.Response) string {
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return strings.TrimSpace(string(body))
	}
	fmt.Println(text(get("/", false))) // the host's own routes are not behind the middleware
	resp := get("/admin/tasks/api/tasks", false)
	fmt.Println(resp.StatusCode, text(resp))

	resp = get("/admin/tasks/", true)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, resp.Header.Get("Content-Type"))

	resp = get("/admin/tasks/api/tasks", true)
	var list struct{ Tasks []asyncagents.Task }
	_ = json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	for _, t := range list.Tasks {
		fmt.Println(resp.StatusCode, t.Description, t.Status)
	}
	// Output:
	// the host's home
	// 401 log in first
	// alice opens /
	// 200 text/html; charset=utf-8
	// alice opens /api/tasks
	// 200 say hi completed
}
