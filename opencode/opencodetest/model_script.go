package opencodetest

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Reply is what the model answers. With Status ≥ 400 it fails with that HTTP status and a
// JSON error body (OpenCode retries 5xx up to 5 times). Otherwise it streams Reasoning,
// then ToolCalls (finish "tool_calls") or Text (finish "stop"), spread over Delay.
type Reply struct {
	Text      string
	Reasoning string
	ToolCalls []ToolCall
	Delay     time.Duration
	Status    int
}

// Text returns a reply with text.
func Text(s string) Reply { return Reply{Text: s} }

// Bash returns a reply that calls OpenCode's bash tool with command.
func Bash(command string) Reply {
	args, _ := json.Marshal(map[string]string{"command": command, "description": "scripted step"})
	return Reply{ToolCalls: []ToolCall{{Name: "bash", Arguments: string(args)}}}
}

// CallTool returns a reply that calls tool name with JSON arguments args.
func CallTool(name, args string) Reply {
	return Reply{ToolCalls: []ToolCall{{Name: name, Arguments: args}}}
}

// Fail returns a reply that answers HTTP status.
func Fail(status int) Reply { return Reply{Status: status} }

// Slow returns a text reply streamed over d.
func Slow(d time.Duration, text string) Reply { return Reply{Text: text, Delay: d} }

// ScriptFunc decides the reply to a request. Returning ok == false falls back to the
// directives (see Model).
type ScriptFunc func(r *Request) (reply Reply, ok bool)

// script holds what decides the replies of a Model or a FakeClient: queued replies, a
// ScriptFunc, injected failures, and the requests seen. Safe for concurrent use.
type script struct {
	mu       sync.Mutex
	requests []Request
	queue    []Reply
	fn       ScriptFunc
	failures []int
	seq      int
}

func (s *script) requestsCopy() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

func (s *script) enqueue(replies []Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue = append(s.queue, replies...)
}

func (s *script) set(f ScriptFunc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fn = f
}

func (s *script) failNext(n, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.failures = append(s.failures, status)
	}
}

// decide records the request and picks its reply: an injected failure, the fixed title and
// compaction answers, a queued reply, the script, then the directives. It returns the
// request's sequence number (1 for the first).
func (s *script) decide(req *Request) (Reply, int) {
	s.mu.Lock()
	s.requests = append(s.requests, *req)
	s.seq++
	seq := s.seq
	if len(s.failures) > 0 {
		st := s.failures[0]
		s.failures = s.failures[1:]
		s.mu.Unlock()
		return Fail(st), seq
	}
	switch req.Kind {
	case KindTitle:
		s.mu.Unlock()
		return Text("Scripted title"), seq
	case KindCompaction:
		s.mu.Unlock()
		return compactionReply(req), seq
	}
	if len(s.queue) > 0 {
		r := s.queue[0]
		s.queue = s.queue[1:]
		s.mu.Unlock()
		return r, seq
	}
	fn := s.fn
	s.mu.Unlock()
	if fn != nil {
		if r, ok := fn(req); ok {
			return r, seq
		}
	}
	return Directive(req), seq
}

func compactionReply(req *Request) Reply {
	_, conv := req.LastUser()
	n := strings.Count(conv, "[Assistant tool call]")
	if !strings.Contains(conv, "<conversation>") {
		// Before 1.18 the transcript is the request's own messages.
		for _, m := range req.Messages {
			n += len(m.ToolCalls)
		}
	}
	prior := strings.Contains(conv, "<prior-summary>") || strings.Contains(conv, "<previous-summary>")
	return Text(fmt.Sprintf("## Objective\n- Scripted work.\n\n## Important Details\n"+
		"- Scripted summary; tool calls in transcript: %d; prior summary: %t\n\n"+
		"## Work State\n- Ran the requested commands.\n\n## Next Move\n1. Continue.\n", n, prior))
}

var (
	reSleep = regexp.MustCompile(`SLEEP:(\d+(?:\.\d+)?)`)
	reFail  = regexp.MustCompile(`FAIL:(\d{3})`)
)

// Directive computes the reply the directives in the last user message ask for (see Model).
// Scripts may call it to fall back to the default behaviour.
func Directive(req *Request) Reply {
	idx, text := req.LastUser()
	results := req.ToolResultsSinceUser()
	think := ""
	if strings.Contains(text, "THINK") {
		think = "thinking about the request"
	}
	switch {
	case reFail.MatchString(text):
		st, _ := strconv.Atoi(reFail.FindStringSubmatch(text)[1])
		return Fail(st)
	case strings.Contains(text, "RUN:"):
		return runDirective(afterDirective(text, "RUN:"), results, think)
	case strings.Contains(text, "TOOL:"):
		return toolDirective(afterDirective(text, "TOOL:"), results, think)
	case strings.Contains(text, "QUOTE:"):
		return quoteDirective(req.Messages[:max(idx, 0)], strings.TrimSpace(afterDirective(text, "QUOTE:")), think)
	case reSleep.MatchString(text):
		secs, _ := strconv.ParseFloat(reSleep.FindStringSubmatch(text)[1], 64)
		return Reply{Text: fmt.Sprintf("slept %g", secs), Delay: time.Duration(secs * float64(time.Second)), Reasoning: think}
	}
	r := []rune(text)
	if len(r) > 120 {
		r = r[:120]
	}
	return Reply{Text: "reply to " + string(r), Reasoning: think}
}

// runDirective answers RUN:spec: the next command of spec to run after the tool results so
// far, then the summary of the last output.
func runDirective(spec string, results []string, think string) Reply {
	cmds := splitCommands(spec)
	if len(results) < len(cmds) {
		return Bash(cmds[len(results)])
	}
	last := ""
	if len(results) > 0 {
		last = strings.TrimSpace(results[len(results)-1])
	}
	return Reply{Text: fmt.Sprintf("Ran %d command(s); last output: %s", len(cmds), last), Reasoning: think}
}

// toolDirective answers TOOL:name args: the call first, then "Called name.".
func toolDirective(spec string, results []string, think string) Reply {
	name, args, _ := strings.Cut(spec, " ")
	if len(results) == 0 {
		if strings.TrimSpace(args) == "" {
			args = "{}"
		}
		return CallTool(name, strings.TrimSpace(args))
	}
	return Reply{Text: "Called " + name + ".", Reasoning: think}
}

// quoteDirective answers QUOTE:prefix with the first line of the earlier messages that
// holds prefix, from prefix on.
func quoteDirective(earlier []ChatMessage, prefix, think string) Reply {
	for _, msg := range earlier {
		for line := range strings.SplitSeq(msg.Content, "\n") {
			if j := strings.Index(line, prefix); j >= 0 && prefix != "" {
				return Reply{Text: "Found in the inherited context: " + strings.TrimSpace(line[j:]), Reasoning: think}
			}
		}
	}
	return Reply{Text: "QUOTE: not found", Reasoning: think}
}

func afterDirective(text, directive string) string {
	_, rest, _ := strings.Cut(text, directive)
	line, _, _ := strings.Cut(rest, "\n")
	return line
}

func splitCommands(spec string) []string {
	var cmds []string
	for c := range strings.SplitSeq(spec, "|||") {
		if c = strings.TrimSpace(c); c != "" {
			cmds = append(cmds, c)
		}
	}
	return cmds
}
