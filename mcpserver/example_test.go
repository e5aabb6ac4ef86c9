package mcpserver_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/mcpserver"
	"github.com/asyncagents/asyncagents/opencode"
)

// A host runs the Manager and the bridge in one process, serves the bridge on loopback
// with a random token, installs the companion plugin in the project and registers the
// bridge with the OpenCode instance of the project.
func Example() {
	ctx := context.Background()
	project := "/home/me/project" // the directory `opencode serve` works in
	client, err := opencode.NewHTTPClient("http://127.0.0.1:4096", opencode.WithDirectory(project))
	if err != nil {
		log.Fatal(err)
	}
	m, err := asyncagents.New(client)
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close(ctx)

	// The token, in a file only the user can read: the plugin signs with it.
	token := rand.Text()
	tokenFile := "/home/me/.local/state/asyncagents/token"
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		log.Fatal(err)
	}
	bridge, err := mcpserver.New(m, client, mcpserver.WithToken(token), mcpserver.WithDirectories(project))
	if err != nil {
		log.Fatal(err)
	}
	defer bridge.Close()
	mux := http.NewServeMux()
	mux.Handle("/mcp", bridge)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	// No WriteTimeout: a blocking output may take 600 s.
	go func() { _ = http.Serve(l, mux) }()

	// The plugin tells the bridge exactly who calls, signing with the token; OpenCode loads
	// it at its next start (not with --pure).
	plugin := filepath.Join(project, ".opencode", "plugin", "asyncagents.js")
	if err := os.MkdirAll(filepath.Dir(plugin), 0o755); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(plugin, []byte(mcpserver.Plugin(m.ToolPrefix(), mcpserver.WithTokenFile(tokenFile))), 0o644); err != nil {
		log.Fatal(err)
	}
	// Register the bridge with the running instance (or write RemoteConfig into
	// opencode.json under "mcp").
	st, err := client.AddMCP(ctx, project, m.ToolPrefix(), mcpserver.RemoteConfig("http://"+l.Addr().String()+"/mcp", token))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(st.Status) // connected: the model is offered asyncagents_task … asyncagents_clear
}

// The "mcp" entry of opencode.json that registers a bridge.
func ExampleRemoteConfig() {
	entry := map[string]any{"mcp": map[string]any{
		asyncagents.DefaultToolPrefix: mcpserver.RemoteConfig("http://127.0.0.1:7777/mcp", "TOKEN"),
	}}
	b, _ := json.MarshalIndent(entry, "", "  ")
	fmt.Println(string(b))
	// Output:
	// {
	//   "mcp": {
	//     "asyncagents": {
	//       "type": "remote",
	//       "url": "http://127.0.0.1:7777/mcp",
	//       "headers": {
	//         "Authorization": "Bearer TOKEN"
	//       },
	//       "oauth": false
	//     }
	//   }
	// }
}
