package opencodetest_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// WithPlugins: the server runs without --pure and loads the project's plugin at once (no
// offline npm wait, no install); WithMCP puts an MCP server in opencode.json.
func TestServerWithPluginsAndMCP(t *testing.T) {
	t.Parallel()
	probe := `export const Probe = async () => ({
  "tool.execute.before": async (input, output) => {
    if (input.tool === "bash") output.args.command = "echo HOOKED-" + input.sessionID;
  },
});
`
	srv := opencodetest.Start(t, opencodetest.WithPlugins(map[string]string{"probe.js": probe}),
		opencodetest.WithMCP("late", opencode.MCPConfig{Type: "remote", URL: "http://127.0.0.1:9/mcp", OAuth: json.RawMessage("false")}),
		opencodetest.WithConfig(map[string]any{"mcp": map[string]any{"off": map[string]any{"type": "local", "command": []string{"true"}, "enabled": false}}}))
	c := srv.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	start := time.Now()
	s, err := c.CreateSession(ctx, opencode.CreateSessionRequest{Title: "plugins"})
	if err != nil {
		t.Fatal(err)
	}
	reply, err := c.Prompt(ctx, s.ID, opencode.PromptRequest{Parts: []opencode.TextPartInput{opencode.NewText("RUN:echo plain")}})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("first prompt took %v: the plugin dependency install was waited for", took)
	}
	var text string
	for _, p := range reply.Parts {
		text += p.Text
	}
	if !strings.Contains(text, "HOOKED-"+s.ID) {
		t.Fatalf("the plugin did not run: %q", text)
	}
	if strings.Contains(srv.Logs(), "dependency install") {
		t.Errorf("an install was attempted:\n%s", srv.Logs())
	}
	if ents, _ := os.ReadDir(filepath.Join(srv.Directory, ".opencode", "node_modules")); len(ents) != 0 {
		t.Errorf("node_modules was filled: %v", ents)
	}

	st, err := c.MCPStatus(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if st["late"].Status != opencode.MCPFailed || st["off"].Status != opencode.MCPDisabled {
		t.Fatalf("MCP status = %v", st)
	}
}

// The default server keeps --pure: plugins do not run. The shared server is one; the plugin
// is in a project of its own there, where a server without --pure would load it.
func TestServerPureByDefault(t *testing.T) {
	t.Parallel()
	probe := `export const Probe = async () => ({
  "tool.execute.before": async (input, output) => { output.args.command = "echo HOOKED"; },
});
`
	srv := shared.Get(t)
	dir, err := srv.NewProject("pure")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, ".opencode", "plugin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".opencode", "plugin", "probe.js"), []byte(probe), 0o644); err != nil {
		t.Fatal(err)
	}
	c := srv.Client(opencode.WithDirectory(dir))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := c.CreateSession(ctx, opencode.CreateSessionRequest{Title: "pure"})
	if err != nil || s.Directory != dir {
		t.Fatalf("session = %+v, %v; want it in %s", s, err, dir)
	}
	reply, err := c.Prompt(ctx, s.ID, opencode.PromptRequest{Parts: []opencode.TextPartInput{opencode.NewText("RUN:echo plain")}})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range reply.Parts {
		if strings.Contains(p.Text, "HOOKED") {
			t.Fatalf("a plugin ran under --pure: %q", p.Text)
		}
	}
}
