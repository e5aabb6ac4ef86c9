package opencodetest

import (
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
)

// pathCommands are the commands whose path arguments OpenCode checks against the project
// directory before running a bash command.
var pathCommands = []string{"cd", "chdir", "popd", "pushd", "rm", "cp", "mv", "mkdir", "touch", "chmod", "chown", "cat"}

// externalDirs returns the folders outside dir that command's path arguments touch, in order,
// as OpenCode's bash tool collects them for the external_directory permission. The fake has no
// file system: a path ending in "/" counts as a folder, any other path as a file in its parent.
func externalDirs(command, dir string) []string {
	var dirs []string
	for _, seg := range splitShell(command) {
		args := seg.words
		if len(args) == 0 || !slices.Contains(pathCommands, args[0]) {
			continue
		}
		for _, a := range args[1:] {
			if folder, ok := externalDir(args[0], a, dir); ok && !slices.Contains(dirs, folder) {
				dirs = append(dirs, folder)
			}
		}
	}
	return dirs
}

// externalDir returns the folder that argument a of the path command name touches, when
// that folder is outside dir. Options, variables, substitutions, home paths and arguments
// that start with a glob touch none; a glob later in a path is cut off.
func externalDir(name, a, dir string) (string, bool) {
	if strings.HasPrefix(a, "-") || (name == "chmod" && strings.HasPrefix(a, "+")) ||
		strings.ContainsAny(a, "$`(") || strings.HasPrefix(a, "~") {
		return "", false
	}
	if i := strings.IndexAny(a, "?*["); i >= 0 {
		if i == 0 {
			return "", false
		}
		a = a[:i]
	}
	p := a
	if !path.IsAbs(p) {
		p = path.Join(dir, p)
	}
	folder := path.Clean(p)
	if !strings.HasSuffix(a, "/") {
		folder = path.Dir(folder)
	}
	if path.Clean(p) == dir || strings.HasPrefix(path.Clean(p), strings.TrimSuffix(dir, "/")+"/") {
		return "", false
	}
	return folder, true
}

// shellSegment is one simple command of a command line and the operator before it.
type shellSegment struct {
	op    string // "", "&&", "||", ";", "|"
	words []string
	out   string // a redirection target ("> file"): the output is not shown
}

// splitShell splits a command line into simple commands at ;, &&, ||, | and newlines, and
// each into words, honouring single and double quotes and backslashes.
func splitShell(line string) []shellSegment {
	sp := &shellSplitter{rs: []rune(line)}
	for ; sp.i < len(sp.rs); sp.i++ {
		sp.step()
	}
	sp.flush()
	sp.segs = append(sp.segs, sp.cur)
	return sp.segs
}

// shellSplitter is the state of splitShell: the line, the position in it, the segments
// done, the current segment and word.
type shellSplitter struct {
	rs       []rune
	i        int
	segs     []shellSegment
	cur      shellSegment
	word     strings.Builder
	inWord   bool
	redirect bool // the current word is a redirection target
}

// step reads the character at sp.i (and any it belongs with: a quoted run, an escaped
// character, a two-character operator), leaving sp.i on the last one read.
func (sp *shellSplitter) step() {
	c := sp.rs[sp.i]
	switch {
	case c == '\'' || c == '"':
		sp.quoted(c)
	case c == '\\' && sp.i+1 < len(sp.rs):
		sp.inWord = true
		sp.i++
		sp.word.WriteRune(sp.rs[sp.i])
	case c == ' ' || c == '\t':
		sp.flush()
	case sp.operator(c):
	default:
		sp.inWord = true
		sp.word.WriteRune(c)
	}
}

// quoted reads a run quoted with q; within double quotes a backslash escapes ", \, $ and `.
func (sp *shellSplitter) quoted(q rune) {
	sp.inWord = true
	for sp.i++; sp.i < len(sp.rs) && sp.rs[sp.i] != q; sp.i++ {
		if q == '"' && sp.rs[sp.i] == '\\' && sp.i+1 < len(sp.rs) && strings.ContainsRune(`"\$`+"`", sp.rs[sp.i+1]) {
			sp.i++
		}
		sp.word.WriteRune(sp.rs[sp.i])
	}
}

// operator handles c when it starts an operator (;, newline, &&, ||, |, >, >>) and
// reports whether it did.
func (sp *shellSplitter) operator(c rune) bool {
	switch {
	case c == ';' || c == '\n':
		sp.next(";")
	case c == '&' && sp.peek('&'):
		sp.i++
		sp.next("&&")
	case c == '|' && sp.peek('|'):
		sp.i++
		sp.next("||")
	case c == '|':
		sp.next("|")
	case c == '>':
		sp.flush()
		if sp.peek('>') {
			sp.i++
		}
		sp.redirect = true
	default:
		return false
	}
	return true
}

// peek reports whether the character after sp.i is r.
func (sp *shellSplitter) peek(r rune) bool { return sp.i+1 < len(sp.rs) && sp.rs[sp.i+1] == r }

// flush ends the current word: a word of the segment, or its redirection target.
func (sp *shellSplitter) flush() {
	if !sp.inWord {
		return
	}
	if sp.redirect {
		sp.cur.out, sp.redirect = sp.word.String(), false
	} else {
		sp.cur.words = append(sp.cur.words, sp.word.String())
	}
	sp.word.Reset()
	sp.inWord = false
}

// next ends the current segment; the next one follows operator op.
func (sp *shellSplitter) next(op string) {
	sp.flush()
	sp.segs = append(sp.segs, sp.cur)
	sp.cur = shellSegment{op: op}
}

// runShell simulates bash running command in dir: the combined output, the exit code and
// how long it sleeps. It knows echo, printf, pwd, true, false, :, exit, sleep, cd, cat and ls
// (the project is empty and every file is missing); any other command is not found (exit 127).
func runShell(command, dir string) (output string, exit int, sleep time.Duration) {
	var out strings.Builder
	for _, seg := range splitShell(command) {
		if len(seg.words) == 0 {
			continue
		}
		switch {
		case seg.op == "&&" && exit != 0, seg.op == "||" && exit == 0:
			continue
		}
		text, code, d, stop := runCommand(seg.words, dir)
		sleep += d
		exit = code
		if seg.out == "" {
			out.WriteString(text)
		}
		if stop {
			break
		}
	}
	return out.String(), exit, sleep
}

// runCommand runs one simple command of the simulated shell (see runShell); stop reports
// that it ends the command line (exit).
func runCommand(words []string, dir string) (out string, exit int, sleep time.Duration, stop bool) {
	name, args := words[0], words[1:]
	switch name {
	case "echo":
		out = echo(args)
	case "printf":
		if len(args) > 0 {
			out = printf(args[0], args[1:])
		}
	case "pwd":
		out = dir + "\n"
	case "true", ":", "cd":
	case "false":
		exit = 1
	case "exit":
		if len(args) > 0 {
			exit, _ = strconv.Atoi(args[0])
		}
		stop = true
	case "sleep":
		sleep = sleepTime(args)
	case "cat":
		out, exit = cat(args)
	case "ls":
		out, exit = ls(args)
	default:
		out, exit = "/bin/bash: line 1: "+name+": command not found\n", 127
	}
	return out, exit, sleep, stop
}

// echo is bash's echo with the options -n, -e and -E.
func echo(args []string) string {
	newline, escapes := true, false
	for len(args) > 0 && (args[0] == "-n" || args[0] == "-e" || args[0] == "-E") {
		newline = newline && args[0] != "-n"
		escapes = args[0] == "-e" || (escapes && args[0] != "-E")
		args = args[1:]
	}
	out := strings.Join(args, " ")
	if escapes {
		out = unescape(out)
	}
	if newline {
		out += "\n"
	}
	return out
}

// sleepTime is how long sleep args sleeps: the sum of its arguments in seconds; arguments
// that are not numbers count nothing.
func sleepTime(args []string) time.Duration {
	var d time.Duration
	for _, a := range args {
		if secs, err := strconv.ParseFloat(a, 64); err == nil {
			d += time.Duration(secs * float64(time.Second))
		}
	}
	return d
}

// cat is cat in the empty project: every file argument is missing.
func cat(args []string) (out string, exit int) {
	for _, a := range args {
		out += "cat: " + a + ": No such file or directory\n"
		exit = 1
	}
	return out, exit
}

// ls is ls in the empty project: every argument but the options is missing.
func ls(args []string) (out string, exit int) {
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			out += "ls: cannot access '" + a + "': No such file or directory\n"
			exit = 2
		}
	}
	return out, exit
}

func unescape(s string) string {
	return strings.NewReplacer(`\n`, "\n", `\t`, "\t", `\\`, `\`, `\"`, `"`).Replace(s)
}

// printf applies a format with %s, %d and %% verbs and backslash escapes.
func printf(format string, args []string) string {
	var b strings.Builder
	f := unescape(format)
	for i := 0; i < len(f); i++ {
		if f[i] != '%' || i+1 == len(f) {
			b.WriteByte(f[i])
			continue
		}
		i++
		switch f[i] {
		case '%':
			b.WriteByte('%')
		case 's', 'd':
			if len(args) > 0 {
				b.WriteString(args[0])
				args = args[1:]
			} else if f[i] == 'd' {
				b.WriteByte('0')
			}
		default:
			fmt.Fprintf(&b, "%%%c", f[i])
		}
	}
	return b.String()
}
