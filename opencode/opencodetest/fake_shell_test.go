package opencodetest

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// Outputs and exit codes the real server's bash tool gave (opencode 1.18.33, Debian).
func TestRunShellMatchesBash(t *testing.T) {
	cases := []struct {
		cmd  string
		out  string
		exit int
	}{
		{"echo hi", "hi\n", 0},
		{"false", "", 1},
		{"nosuchcommand-xyz", "/bin/bash: line 1: nosuchcommand-xyz: command not found\n", 127},
		{"pwd", "/p/proj\n", 0},
		{`printf "a\nb"`, "a\nb", 0},
		{"printf '%s-%d%%' x 3", "x-3%", 0},
		{"echo -n x", "x", 0},
		{"ls /missing", "ls: cannot access '/missing': No such file or directory\n", 2},
		{"cat missing.txt", "cat: missing.txt: No such file or directory\n", 1},
		{`echo "quoted  words"`, "quoted  words\n", 0},
		{"echo a && echo b", "a\nb\n", 0},
		{"false && echo no || echo yes", "yes\n", 0},
		{"exit 3; echo never", "", 3},
		{"echo hidden > out.txt; echo shown", "shown\n", 0},
		{`echo it\'s`, "it's\n", 0},
	}
	for _, tc := range cases {
		out, exit, _ := runShell(tc.cmd, "/p/proj")
		if out != tc.out || exit != tc.exit {
			t.Errorf("%s: %q, exit %d; want %q, exit %d", tc.cmd, out, exit, tc.out, tc.exit)
		}
	}
	if _, _, d := runShell("sleep 1.5 && sleep 2", "/p"); d != 3500*time.Millisecond {
		t.Errorf("sleep = %v", d)
	}
}

// The folders OpenCode asked external_directory for, for the same commands.
func TestExternalDirs(t *testing.T) {
	cases := map[string][]string{
		"cat /no/such/file.txt":       {"/no/such"},
		"cat /etc/os-release":         {"/etc"},
		"cd /nonexistent":             {"/"},
		"mkdir /proc/x":               {"/proc"},
		"ls /missing":                 nil,
		"rm -rf /var/tmp/x":           {"/var/tmp"},
		"cat ../x":                    {"/p"},
		"cat sub/a.txt /p/proj/b":     nil,
		"cat '/a b/c' && cat /a b/c2": {"/a b", "/"},
		"cat /etc/*.conf /etc/hosts":  {"/etc"},
		"echo hi > /etc/x":            nil,
		"chmod +x /opt/run.sh":        {"/opt"},
		"cat $HOME/x ~/y":             nil,
	}
	for cmd, want := range cases {
		if got := externalDirs(cmd, "/p/proj"); !cmp.Equal(got, want) {
			t.Errorf("%s: %q, want %q", cmd, got, want)
		}
	}
}

func TestWildcard(t *testing.T) {
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"*", "/etc/*", true},
		{"/etc/*", "/etc/*", true},
		{"/etc/*", "/etcetera/*", false},
		{"asyncagents_*", "asyncagents_task", true},
		{"a?c", "abc", true},
		{"a.c", "abc", false},
	} {
		if got := wildcard(tc.pattern, tc.s); got != tc.want {
			t.Errorf("wildcard(%q, %q) = %v", tc.pattern, tc.s, got)
		}
	}
}
