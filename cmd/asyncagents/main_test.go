package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/mcpserver"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// TestMain points the state folder (XDG_STATE_HOME) at a temporary folder, so that no default
// path of a test reaches the user's files. Run with ASYNCAGENTS_TEST_MAIN=1, the test binary
// is the command itself (for the tests that run serve as processes of their own).
func TestMain(m *testing.M) {
	if os.Getenv("ASYNCAGENTS_TEST_MAIN") == "1" {
		main()
		return
	}
	state, err := os.MkdirTemp("", "asyncagents-state-")
	if err != nil {
		panic(err)
	}
	os.Setenv("XDG_STATE_HOME", state)
	testmain.Run(m, shared.Close, func() { os.RemoveAll(state) })
}

// shared is the OpenCode server of the serve tests that need no server of their own: each
// registers its bridge with a project folder of its own on it (see project), or with none.
var shared opencodetest.Shared

// runCmd runs the command line and returns its exit code, stdout and stderr.
func runCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// B-4: usage errors exit 2 and say why; help exits 0.
func TestUsageAndExitCodes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string // in stdout+stderr
	}{
		{nil, exitUsage, "Commands:"},
		{[]string{"bogus"}, exitUsage, `unknown command "bogus"`},
		{[]string{"help"}, exitOK, "serve"},
		{[]string{"help", "install"}, exitOK, "-no-plugin"},
		{[]string{"serve", "-h"}, exitOK, "-listen"},
		{[]string{"tasks", "-nope"}, exitUsage, "flag provided but not defined"},
		{[]string{"tasks", "stray"}, exitUsage, `unexpected argument "stray"`},
		{[]string{"serve", "-log-level", "loud"}, exitUsage, "bad -log-level"},
		{[]string{"serve", "-url", "ftp://x"}, exitFail, "asyncagents serve:"},
		{[]string{"serve", "-url", "http://127.0.0.1:1", "-listen", "0.0.0.0:0"}, exitFail, "asyncagents serve:"},
	} {
		code, out, errOut := runCmd(t, tc.args...)
		if code != tc.code || !strings.Contains(out+errOut, tc.want) {
			t.Errorf("%q: exit %d, output %q; want exit %d and %q", tc.args, code, out+errOut, tc.code, tc.want)
		}
	}
}

func TestListenLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", "192.0.2.1:80", ":4097", "example.com:80"} {
		if ln, err := listenLoopback(addr); err == nil {
			ln.Close()
			t.Errorf("listenLoopback(%q) accepted", addr)
		}
	}
	ln, err := listenLoopback("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
}

func TestMergeMCP(t *testing.T) {
	entry := json.RawMessage(`{"type":"remote","url":"http://127.0.0.1:4097/mcp"}`)
	other := json.RawMessage(`{"type":"remote","url":"http://elsewhere"}`)
	for _, tc := range []struct {
		name, in string
		force    bool
		action   string
		want     string // the merged file, or "" for the input unchanged
		wantErr  string
	}{
		{name: "no file", in: "", action: "added",
			want: "{\n  \"$schema\": \"https://opencode.ai/config.json\",\n  \"mcp\": {\n    \"asyncagents\": {\n      \"type\": \"remote\",\n      \"url\": \"http://127.0.0.1:4097/mcp\"\n    }\n  }\n}\n"},
		{name: "keys kept in order", in: `{"model":"a/b","mcp":{"x":{"type":"local"}},"agent":{}}`, action: "added",
			want: "{\n  \"model\": \"a/b\",\n  \"mcp\": {\n    \"x\": {\n      \"type\": \"local\"\n    },\n    \"asyncagents\": {\n      \"type\": \"remote\",\n      \"url\": \"http://127.0.0.1:4097/mcp\"\n    }\n  },\n  \"agent\": {}\n}\n"},
		{name: "same entry", in: `{"mcp":{"asyncagents":{"url":"http://127.0.0.1:4097/mcp","type":"remote"}}}`, action: "unchanged"},
		{name: "other entry kept", in: `{"mcp":{"asyncagents":` + string(other) + `}}`, action: "differs"},
		{name: "other entry forced", in: `{"mcp":{"asyncagents":` + string(other) + `}}`, force: true, action: "replaced",
			want: "{\n  \"mcp\": {\n    \"asyncagents\": {\n      \"type\": \"remote\",\n      \"url\": \"http://127.0.0.1:4097/mcp\"\n    }\n  }\n}\n"},
		{name: "comments", in: "{\n // a comment\n \"model\": \"a/b\"}", wantErr: "not plain JSON"},
		{name: "array", in: `[]`, wantErr: "not plain JSON"},
		{name: "duplicate key", in: `{"a":1,"a":2}`, wantErr: "twice"},
		{name: "mcp not an object", in: `{"mcp":[]}`, wantErr: `"mcp"`},
		{name: "trailing text", in: `{} {}`, wantErr: "not plain JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, action, err := mergeMCP([]byte(tc.in), "asyncagents", entry, tc.force)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || action != tc.action {
				t.Fatalf("action %q, err %v; want %q", action, err, tc.action)
			}
			want := tc.want
			if want == "" {
				want = tc.in
			}
			if string(got) != want {
				t.Errorf("merged:\n%s\nwant:\n%s", got, want)
			}
			if !json.Valid(got) {
				t.Errorf("merged file is not JSON")
			}
		})
	}
}

// B-3, B-4: install writes the entry and the plugin, keeps what is there, changes nothing
// on a second run, and refuses to overwrite what differs.
func TestInstall(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(t.TempDir(), "state", "token")
	cfg := filepath.Join(dir, "opencode.json")
	if err := os.WriteFile(cfg, []byte(`{"model":"scripted/m","mcp":{"other":{"type":"local","command":["x"]}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"install", "-dir", dir, "-token-file", tokenFile}

	code, out, errOut := runCmd(t, append(args, "-dry-run")...)
	if code != exitOK || !strings.Contains(out, "dry run") || !strings.Contains(out, `"asyncagents"`) {
		t.Fatalf("dry run: exit %d\n%s%s", code, out, errOut)
	}
	if b, _ := os.ReadFile(cfg); strings.Contains(string(b), "asyncagents") {
		t.Fatal("dry run changed opencode.json")
	}
	if _, err := os.Stat(tokenFile); err == nil {
		t.Fatal("dry run created the token file")
	}

	code, out, errOut = runCmd(t, args...)
	if code != exitOK {
		t.Fatalf("install: exit %d\n%s%s", code, out, errOut)
	}
	var got struct {
		Model string
		MCP   map[string]struct {
			Type    string
			URL     string
			OAuth   bool
			Headers map[string]string
			Command []string
		}
	}
	b, _ := os.ReadFile(cfg)
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	e := got.MCP["asyncagents"]
	if got.Model != "scripted/m" || len(got.MCP["other"].Command) != 1 || e.Type != "remote" || e.URL != "http://"+DefaultListen+"/mcp" ||
		e.Headers["Authorization"] != "Bearer {file:"+tokenFile+"}" {
		t.Errorf("opencode.json after install:\n%s", b)
	}
	if tok, err := loadToken(tokenFile, false); err != nil || len(tok) != 2*tokenBytes {
		t.Errorf("token file: %q, %v", tok, err)
	}
	if st, _ := os.Stat(tokenFile); st == nil || st.Mode().Perm() != 0o600 {
		t.Errorf("token file mode: %v", st)
	}
	plugin, err := os.ReadFile(filepath.Join(dir, ".opencode", "plugin", "asyncagents.js"))
	if err != nil || string(plugin) != mcpserver.Plugin("asyncagents", mcpserver.WithTokenFile(tokenFile)) {
		t.Errorf("plugin file: %v", err)
	}

	code, out, _ = runCmd(t, args...)
	if code != exitOK || strings.Count(out, "unchanged") != 2 {
		t.Errorf("second install: exit %d\n%s", code, out)
	}

	code, _, errOut = runCmd(t, "install", "-dir", dir, "-token-file", tokenFile, "-url", "http://127.0.0.1:9/mcp")
	after, _ := os.ReadFile(cfg)
	if code != exitFail || !strings.Contains(errOut, "-force") || !bytes.Equal(after, b) {
		t.Errorf("install over a different entry: exit %d, %s; file changed: %v", code, errOut, !bytes.Equal(after, b))
	}
	code, _, errOut = runCmd(t, "install", "-dir", dir, "-token-file", tokenFile, "-url", "http://127.0.0.1:9/mcp", "-force")
	after, _ = os.ReadFile(cfg)
	if code != exitOK || !strings.Contains(string(after), "127.0.0.1:9") {
		t.Errorf("install -force: exit %d, %s\n%s", code, errOut, after)
	}
}

func TestInstallRefusesJSONC(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "opencode.jsonc"), []byte("{\n// mine\n}"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCmd(t, "install", "-dir", dir, "-token-file", filepath.Join(t.TempDir(), "token"))
	if code != exitFail || !strings.Contains(errOut, "opencode.jsonc") || !strings.Contains(out, `"asyncagents"`) {
		t.Errorf("exit %d\n%s%s", code, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, "opencode.json")); err == nil {
		t.Error("opencode.json written beside opencode.jsonc")
	}
}

func TestLoadToken(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "token")
	if _, err := loadToken(p, false); err == nil {
		t.Error("missing token file without create: no error")
	}
	a, err := loadToken(p, true)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := loadToken(p, true); err != nil || b != a {
		t.Errorf("second load = %q, %v; want %q", b, err, a)
	}
	if err := os.WriteFile(p, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadToken(p, false); err == nil {
		t.Error("short token accepted")
	}
}

// Issue 17: install and serve take the prefixes asyncagents.WithToolPrefix takes, and no
// other: a prefix names the plugin file, so "../../x" would write outside the project.
// install and serve refuse before they write or contact anything (exit 2).
func TestPrefixChecked(t *testing.T) {
	client := opencodetest.NewFakeClient()
	defer client.Close()
	for _, p := range []string{"asyncagents", "a", "A-b_9", strings.Repeat("x", 40),
		"", strings.Repeat("x", 41), "../../x", "a/b", `a\b`, "a.b", "a b", "é", "a\x1b"} {
		m, err := asyncagents.New(client, asyncagents.WithToolPrefix(p))
		if err == nil {
			if cerr := m.Close(context.Background()); cerr != nil {
				t.Fatal(cerr)
			}
		}
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		if got := checkPrefix(fs, p); (got == nil) != (err == nil) {
			t.Errorf("prefix %q: checkPrefix %v, asyncagents.New %v", p, got, err)
		}
	}

	dir := t.TempDir()
	project := filepath.Join(dir, "a", "b", "project")
	if err := os.MkdirAll(project, 0o700); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "state", "token")
	code, out, errOut := runCmd(t, "install", "-dir", project, "-token-file", tokenFile, "-prefix", "../../x")
	if code != exitUsage || !strings.Contains(errOut, `bad -prefix "../../x"`) {
		t.Errorf("install -prefix ../../x: exit %d\n%s%s", code, out, errOut)
	}
	var files []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if d != nil && !d.IsDir() {
			files = append(files, p)
		}
		return nil
	})
	if len(files) > 0 {
		t.Errorf("install with a bad prefix wrote %q", files)
	}
	code, _, errOut = runCmd(t, "serve", "-url", "http://127.0.0.1:1", "-prefix", "a/b", "-token-file", tokenFile)
	if code != exitUsage || !strings.Contains(errOut, `bad -prefix "a/b"`) {
		t.Errorf("serve -prefix a/b: exit %d, %s", code, errOut)
	}
}
