package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// userService is the user service install -service sets up, so that the daemon runs from
// the user's login rather than from the first OpenCode that needs it: a systemd user unit on
// Linux, a launchd agent on macOS.
type userService struct {
	path    string     // the unit or the agent's plist
	content []byte     // what install writes there
	enable  [][]string // the commands that start it now and at each login
	disable [][]string // the commands that stop it, before the file is removed
}

// serviceName names the service: the systemd unit and the launchd label.
const (
	serviceUnit  = "asyncagents.service"
	serviceLabel = "dev.asyncagents.daemon"
)

// newUserService returns the user service that runs `exe daemon -daemon-socket socket -idle 0`
// on this system, or an error where there is none (Windows, the BSDs).
func newUserService(exe, socket string) (*userService, error) {
	args := []string{exe, "daemon", "-daemon-socket", socket, "-idle", "0"}
	switch runtime.GOOS {
	case "linux":
		dir := os.Getenv("XDG_CONFIG_HOME")
		if dir == "" || !filepath.IsAbs(dir) {
			home, err := os.UserHomeDir()
			if err != nil {
				return nil, err
			}
			dir = filepath.Join(home, ".config")
		}
		quoted := make([]string, len(args))
		for i, a := range args {
			quoted[i] = fmt.Sprintf("%q", a) // systemd takes C-style quoted words
		}
		unit := "[Unit]\n" +
			"Description=asyncagents daemon: background tasks for every OpenCode of this user\n" +
			"Documentation=https://github.com/asyncagents/asyncagents/blob/main/docs/opencode.md\n\n" +
			"[Service]\nExecStart=" + strings.Join(quoted, " ") + "\nRestart=on-failure\n\n" +
			"[Install]\nWantedBy=default.target\n"
		return &userService{path: filepath.Join(dir, "systemd", "user", serviceUnit), content: []byte(unit),
			enable:  [][]string{{"systemctl", "--user", "daemon-reload"}, {"systemctl", "--user", "enable", "--now", serviceUnit}},
			disable: [][]string{{"systemctl", "--user", "disable", "--now", serviceUnit}}}, nil
	case "darwin":
		home, err := os.UserHomeDir()
		if err != nil {
			return nil, err
		}
		var b bytes.Buffer
		b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>` + "\n" +
			`<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">` + "\n" +
			"<plist version=\"1.0\">\n<dict>\n\t<key>Label</key>\n\t<string>" + serviceLabel + "</string>\n" +
			"\t<key>ProgramArguments</key>\n\t<array>\n")
		for _, a := range args {
			b.WriteString("\t\t<string>" + xmlEscape(a) + "</string>\n")
		}
		b.WriteString("\t</array>\n\t<key>RunAtLoad</key>\n\t<true/>\n\t<key>KeepAlive</key>\n\t<true/>\n</dict>\n</plist>\n")
		path := filepath.Join(home, "Library", "LaunchAgents", serviceLabel+".plist")
		return &userService{path: path, content: b.Bytes(),
			enable:  [][]string{{"launchctl", "load", "-w", path}},
			disable: [][]string{{"launchctl", "unload", "-w", path}}}, nil
	}
	return nil, fmt.Errorf("no user service on %s: the plugin starts the daemon when it is needed", runtime.GOOS)
}

// runServiceCommand runs systemctl or launchctl (a test replaces it: tests touch no
// service of the user's).
var runServiceCommand = func(c []string) ([]byte, error) { return exec.Command(c[0], c[1:]...).CombinedOutput() }

func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&apos;").Replace(s)
}

// install writes the service's file and enables it. A command that fails (no user systemd,
// as in a container) is reported with what to run, and is no error: the plugin starts the
// daemon anyway.
func (s *userService) install(out io.Writer) error {
	if err := os.MkdirAll(filepath.Dir(s.path), 0o755); err != nil {
		return err
	}
	if err := writeFile(s.path, s.content); err != nil {
		return err
	}
	fmt.Fprintf(out, "%s: written\n", quote(s.path))
	for _, c := range s.enable {
		if b, err := runServiceCommand(c); err != nil {
			fmt.Fprintf(out, "%s failed (%v: %s); run it yourself when you can. Until then the plugin starts the daemon.\n",
				strings.Join(c, " "), err, strings.TrimSpace(string(b)))
			return nil
		}
	}
	fmt.Fprintln(out, "The daemon now runs as a user service.")
	return nil
}

// remove disables the service, if its file is there, and removes the file.
func (s *userService) remove(out io.Writer) error {
	if _, err := os.Stat(s.path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	for _, c := range s.disable {
		_, _ = runServiceCommand(c) // a service that cannot be reached is not running
	}
	if err := os.Remove(s.path); err != nil {
		return err
	}
	fmt.Fprintf(out, "%s: removed\n", quote(s.path))
	return nil
}
