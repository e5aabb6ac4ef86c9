package opencodetest

import (
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/asyncagents/asyncagents/opencode"
)

// ToolFunc decides the outcome of a tool call in a [FakeClient]. Returning ok == false leaves
// the call to the fake's defaults: the simulated shell for "bash", and for any other tool a
// completed part with an empty output. It is called without locks held and must not block.
type ToolFunc func(call ToolCall) (result ToolResult, ok bool)

// ToolResult is the outcome of a tool call in a [FakeClient].
type ToolResult struct {
	// Output is the tool part's state.output when it completes.
	Output string
	// Title is state.title; the bash default is the command.
	Title string
	// Metadata is state.metadata; the bash default is {"output", "exit", "truncated"}.
	Metadata map[string]any
	// Error, when not empty, ends the part with status "error" and this text instead.
	Error string
	// Permission, when not empty, makes the call ask this permission for Patterns first, as
	// external_directory is asked for a bash command outside the project: permission.asked,
	// the session stays busy until a reply or an abort. The session's permission rules are
	// checked first: "allow" runs the call, "deny" ends it with status "error".
	Permission string
	Patterns   []string
	// Sleep is how long the call runs (real time; an abort ends it).
	Sleep time.Duration
}

func toolTitle(p *partJSON) string {
	if p.Tool == "bash" {
		var in struct {
			Command string `json:"command"`
		}
		_ = json.Unmarshal(p.State.Input, &in)
		return in.Command
	}
	return p.State.Title
}

// runTool runs one tool call of the current step: pending, running, a permission request if
// one is needed, then completed (or error). It reports turnHalted when a rejection without a
// message stops the loop, and false when the run was stopped.
func (f *FakeClient) runTool(r *fakeRun, call ToolCall) (turnEnd, bool) {
	s := r.s
	input := json.RawMessage(call.Arguments)
	if !json.Valid(input) {
		input = json.RawMessage(`{}`)
	}
	p := f.addPart(r, &partJSON{Type: opencode.PartTool, Tool: call.Name, CallID: call.ID,
		State: &stateJSON{Status: opencode.ToolPending, Input: json.RawMessage(`{}`), Raw: ptr("")}})
	p.State = &stateJSON{Status: opencode.ToolRunning, Input: input, Time: &partTimeJSON{Start: f.ms()}}
	r.tool = p
	f.emitPart(s, p)

	res, ok := ToolResult{}, false
	if fn := f.cfg.tool; fn != nil {
		f.mu.Unlock()
		res, ok = fn(call)
		f.mu.Lock()
		if r.aborted {
			return turnStopped, false
		}
	}
	if !ok {
		res = f.defaultTool(call, s.info.Directory)
	}
	if res.Permission != "" {
		switch f.evaluate(s, res.Permission, res.Patterns) {
		case "deny":
			res = ToolResult{Error: "The user has specified a rule which prevents you from using this specific tool call. " +
				"Here are some of the relevant rules " + f.relevantRules(s, res.Permission)}
		case "ask":
			reply, ok := f.ask(r, p, call, res)
			if !ok {
				return turnStopped, false
			}
			switch {
			case reply.Reply == opencode.ReplyAlways:
				for _, pat := range res.Patterns {
					s.always = append(s.always, opencode.PermissionRule{Permission: res.Permission, Pattern: pat, Action: "allow"})
				}
			case reply.Reply == opencode.ReplyReject && reply.Message != "":
				res = ToolResult{Error: "The user rejected permission to use this specific tool call with the following feedback: " + reply.Message}
			case reply.Reply == opencode.ReplyReject:
				f.toolError(r, p, "The user rejected permission to use this specific tool call.")
				return turnHalted, true
			}
		}
	}
	if res.Error != "" {
		f.toolError(r, p, res.Error)
		return turnDone, true
	}
	p.State.Metadata = map[string]any{"output": ""}
	f.emitPart(s, p)
	if res.Sleep > 0 && !f.wait(r, nil, res.Sleep) {
		return turnStopped, false
	}
	if res.Output != "" && res.Output != "(no output)" {
		p.State.Metadata = map[string]any{"output": res.Output}
		f.emitPart(s, p)
	}
	if res.Metadata == nil {
		res.Metadata = map[string]any{}
	}
	p.State = &stateJSON{Status: opencode.ToolCompleted, Input: input, Output: ptr(res.Output), Title: res.Title,
		Metadata: res.Metadata, Time: &partTimeJSON{Start: p.State.Time.Start, End: f.ms()}}
	r.tool = nil
	f.emitPart(s, p)
	return turnDone, true
}

func (f *FakeClient) toolError(r *fakeRun, p *partJSON, msg string) {
	p.State = &stateJSON{Status: opencode.ToolError, Input: p.State.Input, Error: msg,
		Time: &partTimeJSON{Start: p.State.Time.Start, End: f.ms()}}
	r.tool = nil
	f.emitPart(r.s, p)
}

// ask emits permission.asked for the call and waits for the reply.
func (f *FakeClient) ask(r *fakeRun, p *partJSON, call ToolCall, res ToolResult) (opencode.PermissionReply, bool) {
	meta := map[string]any{}
	if res.Permission == "external_directory" {
		var in struct {
			Command string `json:"command"`
		}
		_ = json.Unmarshal(p.State.Input, &in)
		dirs := make([]string, len(res.Patterns))
		for i, pat := range res.Patterns {
			dirs[i] = strings.TrimSuffix(strings.TrimSuffix(pat, "*"), "/")
			if dirs[i] == "" {
				dirs[i] = "/"
			}
		}
		meta = map[string]any{"command": in.Command, "directories": dirs, "patterns": res.Patterns}
	}
	perm := &fakePermission{ID: f.ids.next("per", false, f.now()), SessionID: r.s.info.ID, Permission: res.Permission,
		Patterns: slices.Clone(res.Patterns), Metadata: meta, Tool: opencode.PermissionTool{MessageID: r.asst.info.ID, CallID: call.ID}, run: r}
	f.permissions = append(f.permissions, perm)
	r.perm, r.permReply = perm, nil
	f.emit(opencode.EventPermissionAsked, perm.json())
	for r.permReply == nil {
		if !f.wait(r, r.wake, 0) {
			return opencode.PermissionReply{}, false
		}
	}
	reply := *r.permReply
	r.perm, r.permReply, perm.run = nil, nil, nil
	return reply, true
}

// agentRules are the rules of the default agents that the fake evaluates.
var agentRules = []opencode.PermissionRule{
	{Permission: "*", Pattern: "*", Action: "allow"},
	{Permission: "external_directory", Pattern: "*", Action: "ask"},
}

// evaluate decides a permission as OpenCode does: for each pattern the last matching rule of
// the agent's, then the session's rules wins; any "deny" denies, any "ask" asks.
func (f *FakeClient) evaluate(s *fakeSession, permission string, patterns []string) string {
	rules := slices.Concat(agentRules, s.info.Permission, s.always)
	verdict := "allow"
	for _, pat := range patterns {
		action := "ask"
		for _, rule := range slices.Backward(rules) {
			if wildcard(rule.Permission, permission) && wildcard(rule.Pattern, pat) {
				action = rule.Action
				break
			}
		}
		switch {
		case action == "deny":
			return "deny"
		case action == "ask":
			verdict = "ask"
		}
	}
	return verdict
}

func (f *FakeClient) relevantRules(s *fakeSession, permission string) string {
	var rel []opencode.PermissionRule
	for _, rule := range slices.Concat(agentRules, s.info.Permission) {
		if wildcard(rule.Permission, permission) {
			rel = append(rel, rule)
		}
	}
	b, _ := json.Marshal(rel)
	return string(b)
}

// wildcard matches s against pattern, where * matches any run of characters (slashes too)
// and ? one character, as OpenCode's Wildcard.match.
func wildcard(pattern, s string) bool {
	var b strings.Builder
	b.WriteString("^")
	for _, r := range pattern {
		switch r {
		case '*':
			b.WriteString(".*")
		case '?':
			b.WriteString(".")
		default:
			b.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	b.WriteString("$")
	ok, _ := regexp.MatchString(b.String(), s)
	return ok
}

// defaultTool is the fake's own outcome for a call in dir: the simulated shell for bash.
func (f *FakeClient) defaultTool(call ToolCall, dir string) ToolResult {
	if call.Name != "bash" {
		return ToolResult{}
	}
	var in struct {
		Command string `json:"command"`
	}
	_ = json.Unmarshal([]byte(call.Arguments), &in)
	out, exit, sleep := runShell(in.Command, dir)
	if out == "" {
		out = "(no output)"
	}
	res := ToolResult{Output: out, Title: in.Command, Sleep: sleep,
		Metadata: map[string]any{"output": out, "exit": exit, "truncated": false}}
	if dirs := externalDirs(in.Command, dir); len(dirs) > 0 {
		res.Permission = "external_directory"
		for _, d := range dirs {
			res.Patterns = append(res.Patterns, path.Join(d, "*"))
		}
	}
	return res
}

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
