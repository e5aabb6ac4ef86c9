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
			if strings.HasPrefix(a, "-") || (args[0] == "chmod" && strings.HasPrefix(a, "+")) ||
				strings.ContainsAny(a, "$`(") || strings.HasPrefix(a, "~") {
				continue
			}
			if i := strings.IndexAny(a, "?*["); i >= 0 {
				if i == 0 {
					continue
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
				continue
			}
			if !slices.Contains(dirs, folder) {
				dirs = append(dirs, folder)
			}
		}
	}
	return dirs
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
	var segs []shellSegment
	cur := shellSegment{}
	var word strings.Builder
	inWord, redirect := false, false
	flush := func() {
		if !inWord {
			return
		}
		if redirect {
			cur.out, redirect = word.String(), false
		} else {
			cur.words = append(cur.words, word.String())
		}
		word.Reset()
		inWord = false
	}
	next := func(op string) {
		flush()
		segs = append(segs, cur)
		cur = shellSegment{op: op}
	}
	rs := []rune(line)
	for i := 0; i < len(rs); i++ {
		c := rs[i]
		switch {
		case c == '\'':
			inWord = true
			for i++; i < len(rs) && rs[i] != '\''; i++ {
				word.WriteRune(rs[i])
			}
		case c == '"':
			inWord = true
			for i++; i < len(rs) && rs[i] != '"'; i++ {
				if rs[i] == '\\' && i+1 < len(rs) && strings.ContainsRune(`"\$`+"`", rs[i+1]) {
					i++
				}
				word.WriteRune(rs[i])
			}
		case c == '\\' && i+1 < len(rs):
			inWord = true
			i++
			word.WriteRune(rs[i])
		case c == ' ' || c == '\t':
			flush()
		case c == ';' || c == '\n':
			next(";")
		case c == '&' && i+1 < len(rs) && rs[i+1] == '&':
			i++
			next("&&")
		case c == '|' && i+1 < len(rs) && rs[i+1] == '|':
			i++
			next("||")
		case c == '|':
			next("|")
		case c == '>':
			flush()
			if i+1 < len(rs) && rs[i+1] == '>' {
				i++
			}
			redirect = true
		default:
			inWord = true
			word.WriteRune(c)
		}
	}
	flush()
	segs = append(segs, cur)
	return segs
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

func runCommand(words []string, dir string) (out string, exit int, sleep time.Duration, stop bool) {
	name, args := words[0], words[1:]
	switch name {
	case "echo":
		newline, escapes := true, false
		for len(args) > 0 && (args[0] == "-n" || args[0] == "-e" || args[0] == "-E") {
			newline = newline && args[0] != "-n"
			escapes = args[0] == "-e" || (escapes && args[0] != "-E")
			args = args[1:]
		}
		out = strings.Join(args, " ")
		if escapes {
			out = unescape(out)
		}
		if newline {
			out += "\n"
		}
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
		for _, a := range args {
			if secs, err := strconv.ParseFloat(a, 64); err == nil {
				sleep += time.Duration(secs * float64(time.Second))
			}
		}
	case "cat":
		for _, a := range args {
			out += "cat: " + a + ": No such file or directory\n"
			exit = 1
		}
	case "ls":
		for _, a := range args {
			if !strings.HasPrefix(a, "-") {
				out += "ls: cannot access '" + a + "': No such file or directory\n"
				exit = 2
			}
		}
	default:
		out, exit = "/bin/bash: line 1: "+name+": command not found\n", 127
	}
	return out, exit, sleep, stop
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
