package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// openCodeConfigDir returns OpenCode's global config folder: $XDG_CONFIG_HOME/opencode, else
// ~/.config/opencode (OpenCode uses that path on every system).
func openCodeConfigDir() (string, error) {
	if d := os.Getenv("XDG_CONFIG_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "opencode"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, ".config", "opencode"), nil
}

// globalPluginPath is where install puts the plugin: <OpenCode's config>/plugin/asyncagents.js.
func globalPluginPath() (string, error) {
	d, err := openCodeConfigDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "plugin", companionName), nil
}

// installGlobal writes the plugin to OpenCode's global plugin folder (see installHelp).
func installGlobal(c installConfig, out io.Writer) error {
	if !socketSupported {
		return errors.New("install without -dir needs Unix sockets; on Windows set up a project for serve with -dir")
	}
	path, err := globalPluginPath()
	if err != nil {
		return err
	}
	socket := defaultPath("daemon.sock")
	if socket == "" {
		return errors.New("no state folder (set XDG_STATE_HOME or HOME)")
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	if exe, err = filepath.EvalSymlinks(exe); err != nil {
		return err
	}
	plugin := []byte(companionPlugin(socket, []string{exe, "daemon", "-detach", "-daemon-socket", socket}, buildVersion()))
	have, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		fmt.Fprintf(out, "%s: written\n", quote(path))
	case err != nil:
		return err
	case bytes.Equal(have, plugin):
		fmt.Fprintf(out, "%s: unchanged\n", quote(path))
	case bytes.Contains(have, []byte(companionMark)) || c.force:
		fmt.Fprintf(out, "%s: replaced\n", quote(path))
	default:
		fmt.Fprintf(out, "%s: a plugin asyncagents did not write\n", quote(path))
		return fmt.Errorf("%s %w", quote(path), errDiffers)
	}
	noteProjectInstall(out)
	if c.dryRun {
		fmt.Fprintln(out, "Dry run: nothing written.")
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := writeFile(path, plugin); err != nil {
		return err
	}
	if c.service {
		svc, err := newUserService(exe, socket)
		if err != nil {
			return err
		}
		if err := svc.install(out); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "\nDone. Start OpenCode as usual (restart the ones that run): its agents get the asyncagents tools,\n"+
		"and the daemon starts with the first of them (log: %s).\n", quote(filepath.Join(filepath.Dir(socket), "daemon.log")))
	return nil
}

// noteProjectInstall tells of a per-project setup for serve in the working directory, which
// install leaves alone: with both, that project's agents see the tools twice.
func noteProjectInstall(out io.Writer) {
	dir, err := os.Getwd()
	if err != nil {
		return
	}
	cfg, _ := os.ReadFile(filepath.Join(dir, "opencode.json"))
	if _, err := os.Stat(filepath.Join(dir, ".opencode", "plugin", companionName)); err == nil || bytes.Contains(cfg, []byte(`"asyncagents"`)) {
		fmt.Fprintf(out, "Note: %s has a setup for asyncagents serve (its opencode.json or .opencode/plugin/%s), left as it is.\n"+
			"Without serve, remove the \"asyncagents\" MCP entry and that plugin file, or its agents see the tools twice.\n", quote(dir), companionName)
	}
}

const uninstallHelp = `Undoes asyncagents install: removes the asyncagents plugin from OpenCode's global plugin
folder (only a file asyncagents wrote), disables and removes the user service of -service, and
stops the daemon. The tasks' files in the state
folder are kept; OpenCode processes that run keep the tools until they restart.`

func runUninstall(ctx context.Context, flags *flag.FlagSet, args []string, out, _ io.Writer) error {
	if err := parse(flags, args, uninstallHelp); err != nil {
		return err
	}
	path, err := globalPluginPath()
	if err != nil {
		return err
	}
	have, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		fmt.Fprintf(out, "%s: not there\n", quote(path))
	case err != nil:
		return err
	case !bytes.Contains(have, []byte(companionMark)):
		return fmt.Errorf("%s was not written by asyncagents: left alone", quote(path))
	default:
		if err := os.Remove(path); err != nil {
			return err
		}
		fmt.Fprintf(out, "%s: removed\n", quote(path))
	}
	socket := defaultPath("daemon.sock")
	if socket == "" || !socketSupported {
		return nil
	}
	if svc, err := newUserService("", socket); err == nil {
		if err := svc.remove(out); err != nil {
			return err
		}
	}
	return stopDaemon(ctx, daemonConfig{socket: socket, stateDir: filepath.Dir(socket)}, out)
}
