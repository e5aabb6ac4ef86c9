package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/dashboard"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// A host mounts the handler under a prefix of its own server and reads the API.
func ExampleNew() {
	ctx := context.Background()
	client := opencodetest.NewFakeClient() // an opencode.HTTPClient in a real host
	defer client.Close()
	m, err := asyncagents.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close(ctx)

	h, err := dashboard.New(m, dashboard.WithToken("secret"))
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()
	mux := http.NewServeMux()
	mux.Handle("/tasks/", http.StripPrefix("/tasks", h)) // the page: /tasks/ + h.LoginLink()
	srv := httptest.NewServer(mux)
	defer srv.Close()

	parent, _ := client.CreateSession(ctx, opencode.CreateSessionRequest{Title: "parent"})
	caller := asyncagents.Caller{SessionID: parent.ID, Agent: "build"}
	task, _ := m.Launch(ctx, asyncagents.LaunchInput{Caller: caller, Description: "say hi", Agent: "general", Prompt: "RUN:echo hi"})
	_, _ = m.Output(ctx, caller, task.ID, asyncagents.OutputOptions{Block: true, Timeout: 10 * time.Second})

	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/tasks/api/tasks/"+task.ID, nil)
	req.Header.Set("Authorization", "Bearer secret")
	resp, err := srv.Client().Do(req)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct{ Status, Result string }
	_ = json.NewDecoder(resp.Body).Decode(&got)
	fmt.Println(resp.StatusCode, got.Status, got.Result)
	// Output:
	// 200 completed Ran 1 command(s); last output: hi
}
