package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

func TestStripJSONC(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"a": 1}`, `{"a": 1}`},
		{"{\n  // a comment\n  \"a\": 1, // another\n}", `{"a":1}`},
		{"{/* block\n comment */\"a\": [1, 2,],}", `{"a":[1,2]}`},
		{`{"url": "http://x//y", "s": "/* not a comment */", "q": "a\"//b,}"}`, `{"url":"http://x//y","s":"/* not a comment */","q":"a\"//b,}"}`},
		{"{\"a\": 1 /* , */ , /* c */ }", `{"a":1}`},
		{"{\"a\": 1} // the end", `{"a":1}`},
	} {
		got := stripJSONC([]byte(tc.in))
		var v any
		if err := json.Unmarshal(got, &v); err != nil {
			t.Errorf("stripJSONC(%q) = %q: not JSON: %v", tc.in, got, err)
			continue
		}
		compact, _ := json.Marshal(v)
		var w any
		_ = json.Unmarshal([]byte(tc.want), &w)
		want, _ := json.Marshal(w)
		if string(compact) != string(want) {
			t.Errorf("stripJSONC(%q) = %s; want %s", tc.in, compact, want)
		}
	}
}

// Issue 3: configEntry finds the entry in the project's config files as OpenCode does: the
// nearest folder from the directory up to the git root, opencode.json(c) and
// .opencode/opencode.json(c), with comments; not above the git root.
func TestConfigEntry(t *testing.T) {
	root := t.TempDir()
	repo := filepath.Join(root, "repo")
	sub := filepath.Join(repo, "pkg", "sub")
	if err := os.MkdirAll(filepath.Join(sub, ".opencode"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(repo, ".git"), 0o700); err != nil {
		t.Fatal(err)
	}
	write := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(root, "opencode.json"), `{"mcp":{"above":{"type":"remote","url":"http://above"}}}`)
	write(filepath.Join(repo, "opencode.jsonc"), "{\n // mine\n \"mcp\": {\"asyncagents\": {\"type\": \"remote\", \"url\": \"http://repo\",},},\n}")
	write(filepath.Join(sub, ".opencode", "opencode.json"), `{"mcp":{"near":{"type":"remote","url":"http://near"}}}`)

	for _, tc := range []struct{ dir, name, file, url string }{
		{sub, "asyncagents", filepath.Join(repo, "opencode.jsonc"), "http://repo"},
		{sub, "near", filepath.Join(sub, ".opencode", "opencode.json"), "http://near"},
		{sub, "above", "", ""}, // above the git root
		{sub, "none", "", ""},
	} {
		file, entry, err := configEntry(tc.dir, tc.name)
		if err != nil || file != tc.file || entry.URL != tc.url {
			t.Errorf("configEntry(%s, %s) = %q, %q, %v; want %q, %q", tc.dir, tc.name, file, entry.URL, err, tc.file, tc.url)
		}
	}
	write(filepath.Join(sub, "opencode.json"), `{"mcp": `)
	if _, _, err := configEntry(sub, "asyncagents"); err == nil {
		t.Error("a config file that does not parse: no error")
	}
}
