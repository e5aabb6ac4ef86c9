package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/asyncagents/asyncagents/opencode"
)

// register makes dir's OpenCode instance connect to the bridge at url, and returns what it
// did, for the user:
//
//   - the project's config (projectEntry) has an entry of that name for url: the instance
//     connects it again (POST /mcp/{name}/connect), so that it talks to this serve rather
//     than to the one that ran when the instance started;
//   - otherwise: the bridge is added to the instance (POST /mcp, until OpenCode restarts)
//     with the current token, replacing any entry of that name the instance has — one an
//     earlier serve added, which holds the token of its day and a session that this serve
//     does not know, or one from a config this command does not read.
//
// An entry from the config that fails to connect (a token file changed since OpenCode read
// it) is replaced the second way too.
func register(ctx context.Context, client *opencode.HTTPClient, dir, name, url, token string) (string, error) {
	sts, err := client.MCPStatus(ctx, dir)
	if err != nil {
		return "", err
	}
	_, had := sts[name]
	var note string
	file, entry, err := configEntry(dir, name)
	switch {
	case err != nil:
		note = fmt.Sprintf("; could not read the project's config: %v", err)
	case file != "" && entry.URL != url:
		note = fmt.Sprintf("; %s names another URL for mcp.%s (%s): run asyncagents install -force to fix it", file, name, entry.URL)
	case file != "" && had:
		if err := client.ConnectMCP(ctx, dir, name); err != nil {
			return "", err
		}
		sts, err := client.MCPStatus(ctx, dir)
		if err != nil {
			return "", err
		}
		st := sts[name]
		if st.Status == opencode.MCPConnected {
			return "connected (entry from " + file + ")", nil
		}
		note = fmt.Sprintf("; the entry from %s did not connect: %s %s", file, st.Status, st.Error)
	}
	cfg := opencode.MCPConfig{Type: "remote", URL: url, OAuth: json.RawMessage("false"), Headers: map[string]string{"Authorization": "Bearer " + token}}
	st, err := client.AddMCP(ctx, dir, name, cfg)
	if err != nil {
		return "", err
	}
	if st.Status != opencode.MCPConnected {
		return "", fmt.Errorf("OpenCode says %s: %s", st.Status, st.Error)
	}
	if had && file == "" {
		return "registered again (POST /mcp, replacing the entry an earlier serve added; until OpenCode restarts)" + note, nil
	}
	return "registered (POST /mcp; until OpenCode restarts)" + note, nil
}

// configFiles are the names of the config files OpenCode 1.18.33 reads in each folder from
// an instance's directory up to its worktree (the git root, else /), the farthest first and
// the nearest winning.
var configFiles = []string{
	"opencode.jsonc", "opencode.json",
	filepath.Join(".opencode", "opencode.jsonc"), filepath.Join(".opencode", "opencode.json"),
}

// configEntry returns the nearest of the project's config files (configFiles, from dir up to
// the folder holding .git, else the root) that has an entry mcp.<name>, and that entry; file
// is "" when none has one. The files are read as JSON with comments and trailing commas
// (JSONC); the entry's URL is as written, substitutions ({env:…}) not made. Config from
// elsewhere (the user's global config, $OPENCODE_CONFIG) is not read.
func configEntry(dir, name string) (file string, entry opencode.MCPConfig, err error) {
	dir, err = filepath.Abs(dir)
	if err != nil {
		return "", entry, err
	}
	for {
		for _, f := range configFiles {
			p := filepath.Join(dir, f)
			data, err := os.ReadFile(p)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return "", entry, err
			}
			var cfg struct {
				MCP map[string]json.RawMessage `json:"mcp"`
			}
			if err := json.Unmarshal(stripJSONC(data), &cfg); err != nil {
				return "", entry, fmt.Errorf("%s: %w", p, err)
			}
			if raw, ok := cfg.MCP[name]; ok {
				if err := json.Unmarshal(raw, &entry); err != nil {
					return "", entry, fmt.Errorf("%s: mcp.%s: %w", p, name, err)
				}
				return p, entry, nil
			}
		}
		if _, err := os.Stat(filepath.Join(dir, ".git")); err == nil {
			return "", entry, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", entry, nil
		}
		dir = parent
	}
}

// stripJSONC returns the JSONC text data as JSON: comments (// to the end of the line,
// /* to */) become spaces, and commas before a closing } or ] are dropped. Strings are kept
// as they are.
func stripJSONC(data []byte) []byte {
	out := make([]byte, 0, len(data))
	comma := -1 // index in out of a comma that may turn out trailing
	for i := 0; i < len(data); i++ {
		if end := commentEnd(data, i); end >= 0 {
			out = append(out, ' ')
			i = end - 1
			continue
		}
		switch c := data[i]; c {
		case '"':
			end := stringEnd(data, i)
			out = append(out, data[i:end]...)
			i = end - 1
			comma = -1
		case ',':
			out = append(out, c)
			comma = len(out) - 1
		case ' ', '\t', '\r', '\n':
			out = append(out, c)
		case '}', ']':
			if comma >= 0 {
				out[comma] = ' '
			}
			fallthrough
		default:
			out = append(out, c)
			comma = -1
		}
	}
	return out
}

// stringEnd returns the index just past the JSON string that starts with the quote at
// data[i]: past its closing quote, or len(data) when it has none.
func stringEnd(data []byte, i int) int {
	j := i + 1
	for j < len(data) && data[j] != '"' {
		if data[j] == '\\' {
			j++
		}
		j++
	}
	return min(j+1, len(data))
}

// commentEnd returns the index just past the comment that starts at data[i]: the end of
// the line for // (the newline is not part of it), past */ for /* (len(data) when it has
// none); -1 when no comment starts there.
func commentEnd(data []byte, i int) int {
	if data[i] != '/' || i+1 >= len(data) {
		return -1
	}
	switch data[i+1] {
	case '/':
		if n := bytes.IndexByte(data[i:], '\n'); n >= 0 {
			return i + n
		}
		return len(data)
	case '*':
		if n := bytes.Index(data[i+2:], []byte("*/")); n >= 0 {
			return i + 2 + n + 2
		}
		return len(data)
	}
	return -1
}
