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

const installHelp = `Without -dir (the usual way): sets OpenCode up for asyncagents, once for the user. It
writes the asyncagents plugin to OpenCode's global plugin folder
($XDG_CONFIG_HOME/opencode/plugin/asyncagents.js, else ~/.config/opencode/plugin/): every
OpenCode the user starts afterwards, in any project, with or without --port, gives its agents
the asyncagents tools and starts the asyncagents daemon when none runs (see asyncagents help
daemon). Nothing is needed per project: no password to export, no port to pick, no second
command to run. A plugin file of that name that asyncagents did not write is left alone unless
-force; one of an earlier install is replaced. Restart the OpenCode processes that run.
-service also sets the daemon up as a user service (a systemd user unit on Linux, a launchd
agent on macOS), so that it runs from the login on rather than from the first OpenCode.

With -dir: sets up one project for asyncagents serve (the server-side path): adds the bridge's entry to the "mcp" object of
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
	service                     bool // without dir: also a user service for the daemon
}

func runInstall(_ context.Context, fs *flag.FlagSet, args []string, out, _ io.Writer) error {
	var c installConfig
	fs.StringVar(&c.dir, "dir", "", "set up this project `directory` for asyncagents serve, instead of OpenCode for the user")
	fs.StringVar(&c.url, "url", "http://"+DefaultListen+"/mcp", "the bridge's URL (asyncagents serve -listen, path /mcp)")
	fs.StringVar(&c.tokenFile, "token-file", defaultPath("token"), "the bearer token file (created when missing)")
	fs.StringVar(&c.prefix, "prefix", asyncagents.DefaultToolPrefix, "the MCP server name and tool prefix: 1 to 40 letters, digits, _ or -")
	fs.BoolVar(&c.noPlugin, "no-plugin", false, "do not write the companion plugin")
	fs.BoolVar(&c.force, "force", false, "replace an entry or plugin that differs")
	fs.BoolVar(&c.dryRun, "dry-run", false, "print what would change; write nothing")
	fs.BoolVar(&c.service, "service", false, "without -dir: also run the daemon as a user service (systemd --user on Linux, launchd on macOS), from the login on")
	if err := parse(fs, args, installHelp); err != nil {
		return err
	}
	if err := checkPrefix(fs, c.prefix); err != nil {
		return err
	}
	if c.dir == "" {
		return installGlobal(c, out)
	}
	return install(c, out)
}

// errDiffers is returned when install would overwrite something the user has.
var errDiffers = errors.New("differs from what asyncagents would write; see above, or rerun with -force")

// install sets up c.dir for asyncagents, printing each step to out: it resolves the
// paths, merges the bridge's entry into the project's opencode.json, decides about the
// plugin, and then, unless something differs or c.dryRun, writes the token file, the
// config and the plugin.
func install(c installConfig, out io.Writer) error {
	p, err := newInstallPlan(c)
	if err != nil {
		return err
	}
	if err := p.mergeConfig(c.prefix, c.force, out); err != nil {
		return err
	}
	if !c.noPlugin {
		if err := p.decidePlugin(c.force, out); err != nil {
			return err
		}
	}
	if p.action == "differs" {
		return fmt.Errorf("mcp.%s in %s %w", c.prefix, p.cfgPath, errDiffers)
	}
	if c.dryRun {
		p.printDryRun(out)
		return nil
	}
	if err := p.write(); err != nil {
		return err
	}
	printNext(out, p.dir, !c.noPlugin)
	return nil
}

// installPlan is what install found and will write.
type installPlan struct {
	dir, tokenFile      string // absolute
	cfgPath, pluginPath string // <dir>/opencode.json, <dir>/.opencode/plugin/<prefix>.js
	entry               []byte // the bridge's entry for opencode.json (projectEntry)
	plugin              []byte // the companion plugin
	merged              []byte // opencode.json with the entry (mergeConfig)
	action              string // what happens to the entry (mergeMCP): added, unchanged, replaced or differs
	writePlugin         bool   // the plugin is missing, or differs and is to be replaced (decidePlugin)
}

// newInstallPlan resolves the paths of c, the project directory (which must exist) and
// the token file, and makes the entry and the plugin that name them.
func newInstallPlan(c installConfig) (*installPlan, error) {
	if !prefixRE.MatchString(c.prefix) { // names the plugin file: never a path
		return nil, fmt.Errorf("bad prefix %q: want 1 to 40 letters, digits, _ or -", c.prefix)
	}
	dir, err := filepath.Abs(c.dir)
	if err != nil {
		return nil, err
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("project directory %s: not a directory", dir)
	}
	if c.tokenFile == "" {
		return nil, errors.New("no token file: set -token-file")
	}
	tokenFile, err := filepath.Abs(c.tokenFile)
	if err != nil {
		return nil, err
	}
	entry, err := json.Marshal(projectEntry(c.url, tokenFile))
	if err != nil {
		return nil, err
	}
	return &installPlan{
		dir:        dir,
		tokenFile:  tokenFile,
		cfgPath:    filepath.Join(dir, "opencode.json"),
		pluginPath: filepath.Join(dir, ".opencode", "plugin", c.prefix+".js"),
		entry:      entry,
		plugin:     []byte(mcpserver.Plugin(c.prefix, mcpserver.WithTokenFile(tokenFile))), // signs its _caller with the token
	}, nil
}

// mergeConfig merges the entry, as mcp.<name>, into the project's opencode.json (in
// memory; mergeMCP) and prints what happens to it. When the project has opencode.jsonc
// and no opencode.json, or its opencode.json is not plain JSON, it prints the entry for
// the user to add by hand and returns an error.
func (p *installPlan) mergeConfig(name string, force bool, out io.Writer) error {
	if _, err := os.Stat(p.cfgPath); errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Stat(filepath.Join(p.dir, "opencode.jsonc")); err == nil {
			printEntry(out, name, p.entry)
			return fmt.Errorf("%s has opencode.jsonc, whose comments a merge would lose: add the entry above by hand", p.dir)
		}
	}
	old, err := os.ReadFile(p.cfgPath)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if p.merged, p.action, err = mergeMCP(old, name, p.entry, force); err != nil {
		printEntry(out, name, p.entry)
		return fmt.Errorf("%s: %w", p.cfgPath, err)
	}
	fmt.Fprintf(out, "%s: mcp.%s %s\n", p.cfgPath, name, p.action)
	return nil
}

// decidePlugin decides whether to write the plugin, and prints it: written when missing,
// unchanged when the file holds it already, replaced when the file differs and force. A
// file that differs without force is errDiffers.
func (p *installPlan) decidePlugin(force bool, out io.Writer) error {
	have, err := os.ReadFile(p.pluginPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		p.writePlugin = true
		fmt.Fprintf(out, "%s: written\n", p.pluginPath)
	case err != nil:
		return err
	case bytes.Equal(have, p.plugin):
		fmt.Fprintf(out, "%s: unchanged\n", p.pluginPath)
	case force:
		p.writePlugin = true
		fmt.Fprintf(out, "%s: replaced\n", p.pluginPath)
	default:
		return fmt.Errorf("%s %w", p.pluginPath, errDiffers)
	}
	return nil
}

// printDryRun prints what the config would read, when it changes, and that nothing was
// written.
func (p *installPlan) printDryRun(out io.Writer) {
	if p.action != "unchanged" {
		fmt.Fprintf(out, "\n%s would read:\n%s", p.cfgPath, p.merged)
	}
	fmt.Fprintln(out, "\n(dry run: nothing written)")
}

// write makes the token file when missing, then writes the config unless it is unchanged
// and the plugin when decided (writeFile).
func (p *installPlan) write() error {
	if _, err := loadToken(p.tokenFile, true); err != nil {
		return err
	}
	if p.action != "unchanged" {
		if err := writeFile(p.cfgPath, p.merged); err != nil {
			return err
		}
	}
	if !p.writePlugin {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(p.pluginPath), 0o755); err != nil {
		return err
	}
	return writeFile(p.pluginPath, p.plugin)
}

// printNext tells the user what to do after install in dir, and, with a plugin, how to
// spare OpenCode its wait for npm when offline.
func printNext(out io.Writer, dir string, plugin bool) {
	fmt.Fprintf(out, "\nNext: run `asyncagents serve -dir %s`, then restart OpenCode or let serve reconnect it.\n", dir)
	if plugin {
		fmt.Fprintln(out, "Offline: OpenCode installs @opencode-ai/plugin into .opencode/ at its first prompt and, without a\n"+
			"network, waits about 70 s for npm to give up; start it with npm_config_offline=true to skip the wait.")
	}
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
