package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/mcpserver"
)

const installHelp = `Sets up a project for asyncagents: adds the bridge's entry to the "mcp" object of
<dir>/opencode.json (other keys and entries are kept, in their order) and writes the
companion plugin to <dir>/.opencode/plugin/<prefix>.js. The plugin tells the bridge which
session calls; without it (-no-plugin) the bridge finds the caller by a lookup that refuses
to guess when two sessions make the same call at once.
The entry reads the token from -token-file ({file:…}), which is created when missing, so
opencode.json holds no secret (on Unix the file must be yours, mode 0600, in directories
others cannot write, as ssh asks of a private key). -prefix names the entry, the tools and
the plugin file: 1 to 40 letters, digits, _ or -. An existing entry or plugin that differs
is left alone unless -force. -dry-run prints what would change and writes nothing.
Restart OpenCode afterwards (or run asyncagents serve -dir <dir>, which reconnects it).`

type installConfig struct {
	dir, url, tokenFile, prefix string
	noPlugin, force, dryRun     bool
}

func runInstall(_ context.Context, fs *flag.FlagSet, args []string, out, _ io.Writer) error {
	var c installConfig
	fs.StringVar(&c.dir, "dir", ".", "the project `directory`")
	fs.StringVar(&c.url, "url", "http://"+DefaultListen+"/mcp", "the bridge's URL (asyncagents serve -listen, path /mcp)")
	fs.StringVar(&c.tokenFile, "token-file", defaultPath("token"), "the bearer token file (created when missing)")
	fs.StringVar(&c.prefix, "prefix", asyncagents.DefaultToolPrefix, "the MCP server name and tool prefix: 1 to 40 letters, digits, _ or -")
	fs.BoolVar(&c.noPlugin, "no-plugin", false, "do not write the companion plugin")
	fs.BoolVar(&c.force, "force", false, "replace an entry or plugin that differs")
	fs.BoolVar(&c.dryRun, "dry-run", false, "print what would change; write nothing")
	if err := parse(fs, args, installHelp); err != nil {
		return err
	}
	if err := checkPrefix(fs, c.prefix); err != nil {
		return err
	}
	return install(c, out)
}

// errDiffers is returned when install would overwrite something the user has.
var errDiffers = errors.New("differs from what asyncagents would write; see above, or rerun with -force")

func install(c installConfig, out io.Writer) error {
	if !prefixRE.MatchString(c.prefix) { // names the plugin file: never a path
		return fmt.Errorf("bad prefix %q: want 1 to 40 letters, digits, _ or -", c.prefix)
	}
	dir, err := filepath.Abs(c.dir)
	if err != nil {
		return err
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return fmt.Errorf("project directory %s: not a directory", dir)
	}
	if c.tokenFile == "" {
		return errors.New("no token file: set -token-file")
	}
	tokenFile, err := filepath.Abs(c.tokenFile)
	if err != nil {
		return err
	}
	entry, err := json.Marshal(projectEntry(c.url, tokenFile))
	if err != nil {
		return err
	}

	cfgPath := filepath.Join(dir, "opencode.json")
	if _, err := os.Stat(cfgPath); errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Stat(filepath.Join(dir, "opencode.jsonc")); err == nil {
			printEntry(out, c.prefix, entry)
			return fmt.Errorf("%s has opencode.jsonc, whose comments a merge would lose: add the entry above by hand", dir)
		}
	}
	old, err := os.ReadFile(cfgPath)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	merged, action, err := mergeMCP(old, c.prefix, entry, c.force)
	if err != nil {
		printEntry(out, c.prefix, entry)
		return fmt.Errorf("%s: %w", cfgPath, err)
	}
	fmt.Fprintf(out, "%s: mcp.%s %s\n", cfgPath, c.prefix, action)

	pluginPath := filepath.Join(dir, ".opencode", "plugin", c.prefix+".js")
	plugin := []byte(mcpserver.Plugin(c.prefix, mcpserver.WithTokenFile(tokenFile))) // signs its _caller with the token
	writePlugin := false
	if !c.noPlugin {
		have, err := os.ReadFile(pluginPath)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			writePlugin = true
			fmt.Fprintf(out, "%s: written\n", pluginPath)
		case err != nil:
			return err
		case bytes.Equal(have, plugin):
			fmt.Fprintf(out, "%s: unchanged\n", pluginPath)
		case c.force:
			writePlugin = true
			fmt.Fprintf(out, "%s: replaced\n", pluginPath)
		default:
			return fmt.Errorf("%s %w", pluginPath, errDiffers)
		}
	}
	if action == "differs" {
		return fmt.Errorf("mcp.%s in %s %w", c.prefix, cfgPath, errDiffers)
	}
	if c.dryRun {
		if action != "unchanged" {
			fmt.Fprintf(out, "\n%s would read:\n%s", cfgPath, merged)
		}
		fmt.Fprintln(out, "\n(dry run: nothing written)")
		return nil
	}
	if _, err := loadToken(tokenFile, true); err != nil {
		return err
	}
	if action != "unchanged" {
		if err := writeFile(cfgPath, merged); err != nil {
			return err
		}
	}
	if writePlugin {
		if err := os.MkdirAll(filepath.Dir(pluginPath), 0o755); err != nil {
			return err
		}
		if err := writeFile(pluginPath, plugin); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "\nNext: run `asyncagents serve -dir %s`, then restart OpenCode or let serve reconnect it.\n", dir)
	if !c.noPlugin {
		fmt.Fprintln(out, "Offline: OpenCode installs @opencode-ai/plugin into .opencode/ at its first prompt and, without a\n"+
			"network, waits about 70 s for npm to give up; start it with npm_config_offline=true to skip the wait.")
	}
	return nil
}

func printEntry(out io.Writer, name string, entry []byte) {
	var b bytes.Buffer
	_ = json.Indent(&b, entry, "    ", "  ")
	fmt.Fprintf(out, "The entry for opencode.json:\n  \"mcp\": {\n    %q: %s\n  }\n", name, b.Bytes())
}

// writeFile replaces path with data through a temporary file in the same folder, keeping
// the mode of the file it replaces.
func writeFile(path string, data []byte) error {
	mode := fs.FileMode(0o644)
	if st, err := os.Stat(path); err == nil {
		mode = st.Mode().Perm()
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
