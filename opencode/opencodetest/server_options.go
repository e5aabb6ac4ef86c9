package opencodetest

import (
	"time"

	"github.com/asyncagents/asyncagents/opencode"
)

// ServerOption configures NewServer and Start.
type ServerOption interface{ applyServer(*serverConfig) }

type serverOptionFunc func(*serverConfig)

func (f serverOptionFunc) applyServer(c *serverConfig) { f(c) }

type serverConfig struct {
	password     string
	model        *Model
	config       map[string]any
	files        map[string]string
	mcp          map[string]opencode.MCPConfig
	plugins      bool
	startTimeout time.Duration
	root         string
	tui          bool
}

// WithPassword starts the server with OPENCODE_SERVER_PASSWORD, so every route needs HTTP
// Basic auth (user "opencode"). Server.Client sets the credentials.
func WithPassword(pw string) ServerOption {
	return serverOptionFunc(func(c *serverConfig) { c.password = pw })
}

// WithModel uses m as the scripted model instead of a new one; the caller closes m.
func WithModel(m *Model) ServerOption {
	return serverOptionFunc(func(c *serverConfig) { c.model = m })
}

// WithConfig merges top-level keys into the project's opencode.json, e.g.
// {"compaction": {"prune": true}}.
func WithConfig(cfg map[string]any) ServerOption {
	return serverOptionFunc(func(c *serverConfig) {
		for k, v := range cfg {
			c.config[k] = v
		}
	})
}

// WithFiles writes files (path relative to the project folder → content) into the project.
func WithFiles(files map[string]string) ServerOption {
	return serverOptionFunc(func(c *serverConfig) {
		for k, v := range files {
			c.files[k] = v
		}
	})
}

// WithPlugins starts the server with external plugins on — without --pure, which every other
// server of this package gets — and writes files (file name → JavaScript source) into the
// project's .opencode/plugin/ folder, where OpenCode loads them from (an ES module with a
// named export `async (ctx) => hooks`; a plugin without imports needs no npm package).
//
// With plugins on, OpenCode runs `npm install @opencode-ai/plugin` in the background for
// each of its config folders (the project's .opencode and $XDG_CONFIG_HOME/opencode), and
// plugin loading waits for it: offline, npm gives up only after its retries, and the first
// request to the project's instance waits about 70 s (online, the package would be
// downloaded). So the server gets both folders seeded with an empty node_modules and a
// package-lock.json that lists the package, which OpenCode takes as installed: no install
// is attempted and no network is used. (Every server gets the global folder seeded: OpenCode
// installs there under --pure too.) The server also runs with npm_config_offline=true
// and npm_config_fetch_retries=0, which alone make an install fail at once, in case one
// starts all the same. The first prompt then takes about as long as under --pure.
func WithPlugins(files map[string]string) ServerOption {
	return serverOptionFunc(func(c *serverConfig) {
		c.plugins = true
		for name, src := range files {
			c.files[".opencode/plugin/"+name] = src
		}
	})
}

// WithMCP adds an MCP server to the project's opencode.json ("mcp": {name: cfg}); repeat it
// for more. A remote server that does not answer when the instance starts is "failed" until
// opencode.HTTPClient.ConnectMCP connects it. To add one to a running server, use
// opencode.HTTPClient.AddMCP.
func WithMCP(name string, cfg opencode.MCPConfig) ServerOption {
	return serverOptionFunc(func(c *serverConfig) { c.mcp[name] = cfg })
}

// WithTUI runs OpenCode's terminal UI, `opencode --port N`, instead of `opencode serve`: the
// TUI in a pseudo-terminal (util-linux script(1), which Unix systems have), with its server
// listening on the port, as a user runs OpenCode when a program is to reach its server. The
// server answers the same API; the tests that use it check what a TUI user sees from
// programs beside it. script gives the TUI a session of its own: stopping script's process
// group (Close, Kill) hangs up the terminal, which ends the TUI. Unix only: NewServer fails
// elsewhere or without script.
func WithTUI() ServerOption {
	return serverOptionFunc(func(c *serverConfig) { c.tui = true })
}

// WithStartTimeout bounds how long NewServer waits for the server to answer. Defaults to 60s.
func WithStartTimeout(d time.Duration) ServerOption {
	return serverOptionFunc(func(c *serverConfig) { c.startTimeout = d })
}

// withRoot puts the server's folders under root instead of a new temporary folder.
func withRoot(root string) ServerOption {
	return serverOptionFunc(func(c *serverConfig) { c.root = root })
}
