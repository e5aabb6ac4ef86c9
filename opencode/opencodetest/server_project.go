package opencodetest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// writeProject creates the server's folders and writes the project: its opencode.json, the
// plugin package seeds (WithPlugins) and the WithFiles files, in that order.
func (s *Server) writeProject(cfg *serverConfig) error {
	for _, d := range []string{s.Directory, filepath.Join(s.Home, ".config"), filepath.Join(s.Home, ".local", "share"),
		filepath.Join(s.Home, ".cache"), filepath.Join(s.Home, ".local", "state")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	b, err := json.MarshalIndent(s.projectConfig(cfg), "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(s.Directory, "opencode.json"), b, 0o644); err != nil {
		return err
	}
	s.projectJSON = b
	// Also under --pure, OpenCode 1.18.33 installs its plugin package into the global config
	// folder when it opens a project: about 10 s of CPU for each server, and the network.
	seeds := []string{filepath.Join(s.Home, ".config", "opencode")}
	if cfg.plugins {
		seeds = append(seeds, filepath.Join(s.Directory, ".opencode"))
	}
	for _, dir := range seeds {
		if err := seedPluginDependency(dir); err != nil {
			return err
		}
	}
	return writeFiles(s.Directory, cfg.files)
}

// ModelPrice is what the scripted model costs, in USD per million tokens, as the test
// project's opencode.json tells OpenCode: it computes each step's cost from it.
var ModelPrice = struct{ Input, Output, CacheRead, CacheWrite float64 }{Input: 3, Output: 15, CacheRead: 0.3, CacheWrite: 3.75}

// projectConfig is the project's opencode.json: the scripted model as the default provider
// and model, no autoupdate and no sharing, then the WithConfig keys, then the WithMCP
// servers added to any "mcp" WithConfig gave.
func (s *Server) projectConfig(cfg *serverConfig) map[string]any {
	conf := map[string]any{
		"$schema": "https://opencode.ai/config.json",
		"provider": map[string]any{ProviderID: map[string]any{
			"npm":     "@ai-sdk/openai-compatible",
			"name":    "Scripted",
			"options": map[string]any{"baseURL": s.Model.BaseURL(), "apiKey": "scripted"},
			"models": map[string]any{ModelID: map[string]any{"name": "Scripted M1",
				// USD per million tokens, so that OpenCode computes a cost for each step.
				"cost": map[string]any{"input": ModelPrice.Input, "output": ModelPrice.Output,
					"cache_read": ModelPrice.CacheRead, "cache_write": ModelPrice.CacheWrite}}},
		}},
		"model":       ProviderID + "/" + ModelID,
		"small_model": ProviderID + "/" + ModelID,
		"autoupdate":  false,
		"share":       "disabled",
	}
	for k, v := range cfg.config {
		conf[k] = v
	}
	if len(cfg.mcp) > 0 {
		servers := map[string]any{}
		if m, ok := conf["mcp"].(map[string]any); ok { // from WithConfig
			for k, v := range m {
				servers[k] = v
			}
		}
		for k, v := range cfg.mcp {
			servers[k] = v
		}
		conf["mcp"] = servers
	}
	return conf
}

// writeFiles writes files (slash-separated path relative to dir → content) below dir.
func writeFiles(dir string, files map[string]string) error {
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// NewProject creates another project folder, name, beside Directory, with the same
// opencode.json (the scripted model, WithConfig and WithMCP entries; not WithFiles), and
// returns its absolute path. The running server serves it as one more instance when a request
// names it (?directory= or the x-opencode-directory header): one server, several projects, as
// `opencode serve` runs for a user with several repositories. name must be a plain folder name
// other than "project" and "home"; the folder is removed with the server's.
func (s *Server) NewProject(name string) (string, error) {
	if name == "" || name != filepath.Base(name) || name == "." || name == ".." || name == "project" || name == "home" {
		return "", fmt.Errorf("opencodetest: NewProject: %q is not a free plain folder name", name)
	}
	dir := filepath.Join(filepath.Dir(s.Directory), name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", fmt.Errorf("opencodetest: NewProject: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "opencode.json"), s.projectJSON, 0o644); err != nil {
		return "", fmt.Errorf("opencodetest: NewProject: %w", err)
	}
	return dir, nil
}

// pluginPackage is the package OpenCode installs into each config folder.
const pluginPackage = "@opencode-ai/plugin"

// seedPluginDependency makes a config folder look as if OpenCode had installed its plugin
// package there already: a package.json that depends on it, a package-lock.json whose root
// package lists it, and a node_modules folder. OpenCode 1.18.33 skips the install when
// node_modules exists and the lock's root package has every dependency. Files that exist
// are left as they are.
func seedPluginDependency(dir string) error {
	if err := os.MkdirAll(filepath.Join(dir, "node_modules"), 0o755); err != nil {
		return err
	}
	deps := map[string]string{pluginPackage: "*"}
	files := map[string]any{
		"package.json": map[string]any{"dependencies": deps},
		"package-lock.json": map[string]any{"name": filepath.Base(dir), "lockfileVersion": 3, "requires": true,
			"packages": map[string]any{"": map[string]any{"dependencies": deps}}},
	}
	for name, v := range files {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			continue
		}
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}
