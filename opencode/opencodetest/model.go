package opencodetest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ModelID is the model id the scripted model serves; the provider is ProviderID. A prompt may
// name it as opencode.Model{ProviderID: ProviderID, ModelID: ModelID}.
const (
	ProviderID = "scripted"
	ModelID    = "m1"
)

// Kind tells what OpenCode asked the model for.
type Kind int

// Kinds of requests.
const (
	KindChat       Kind = iota // an agent step (with tools)
	KindTitle                  // session title generation
	KindCompaction             // a compaction summary (POST /session/{id}/summarize, auto compaction)
)

func (k Kind) String() string {
	switch k {
	case KindTitle:
		return "title"
	case KindCompaction:
		return "compaction"
	}
	return "chat"
}

// ChatMessage is one message of a chat-completions request, as OpenCode sent it. Content is
// the text of a string or text-array content.
type ChatMessage struct {
	Role       string     `json:"role"`
	Content    string     `json:"content"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

// ToolCall is a function call the model makes: Name and Arguments (a JSON object text).
type ToolCall struct {
	ID        string `json:"id,omitempty"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Request is one request the model received (from a real server, or made by a FakeClient).
type Request struct {
	Kind     Kind
	Time     time.Time
	Model    string
	Messages []ChatMessage
	Tools    []string // names of the tools offered
	Body     []byte   // the raw request body; empty for requests of a FakeClient
}

// System returns the text of the request's system messages.
func (r *Request) System() string {
	var b strings.Builder
	for _, m := range r.Messages {
		if m.Role == "system" {
			b.WriteString(m.Content)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// LastUser returns the index and text of the last user message (-1 when there is none).
func (r *Request) LastUser() (int, string) {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role == "user" {
			return i, r.Messages[i].Content
		}
	}
	return -1, ""
}

// ToolResultsSinceUser returns the tool results after the last user message, in order.
func (r *Request) ToolResultsSinceUser() []string {
	i, _ := r.LastUser()
	var out []string
	for _, m := range r.Messages[i+1:] {
		if m.Role == "tool" {
			out = append(out, m.Content)
		}
	}
	return out
}

// Contains reports whether any message of the request contains s.
func (r *Request) Contains(s string) bool {
	for _, m := range r.Messages {
		if strings.Contains(m.Content, s) {
			return true
		}
	}
	return false
}

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

// Model is a scripted OpenAI-compatible chat-completions server (POST /v1/chat/completions,
// streaming; GET /v1/models) for OpenCode's @ai-sdk/openai-compatible provider. It records
// every request. Safe for concurrent use.
//
// Without a script or queued reply, a chat request is answered from directives in the text
// of the last user message, so concurrent sessions can each be driven by their prompt:
//
//	RUN:cmd1 ||| cmd2   one bash tool call per step, then "Ran N command(s); last output: …"
//	TOOL:name {json}    one call of any tool with JSON arguments, then "Called name."
//	QUOTE:prefix        replies with the first line starting with prefix found in an earlier
//	                    message of the request (the inherited context), or "QUOTE: not found"
//	SLEEP:n             streams for n seconds (float), then "slept n"
//	FAIL:status         answers that HTTP status
//	THINK               adds reasoning to the text reply
//
// anything else gets "reply to <first 120 characters of the text>". Title requests get
// "Scripted title"; compaction requests get a Markdown summary that names how many tool calls
// the transcript held.
type Model struct {
	srv    *httptest.Server
	script script
}

// NewModel starts a scripted model on a loopback port. Close stops it.
func NewModel() *Model {
	m := &Model{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", m.models)
	mux.HandleFunc("POST /v1/chat/completions", m.chat)
	m.srv = httptest.NewServer(mux)
	return m
}

// BaseURL is the OpenAI-compatible base URL, ending in /v1.
func (m *Model) BaseURL() string { return m.srv.URL + "/v1" }

// Close stops the server, ending streams in progress.
func (m *Model) Close() {
	m.srv.CloseClientConnections()
	m.srv.Close()
}

// Requests returns a copy of the requests received so far, oldest first.
func (m *Model) Requests() []Request { return m.script.requestsCopy() }

// Enqueue queues replies for the next chat requests (title and compaction requests are not
// taken from the queue). Queued replies come before the script and the directives.
func (m *Model) Enqueue(replies ...Reply) { m.script.enqueue(replies) }

// SetScript sets a function that decides chat replies (nil removes it). It is called on the
// HTTP handler's goroutine, without locks held.
func (m *Model) SetScript(f ScriptFunc) { m.script.set(f) }

// FailNext makes the next n requests of any kind answer HTTP status.
func (m *Model) FailNext(n, status int) { m.script.failNext(n, status) }

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

func (m *Model) models(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list",
		"data":   []map[string]any{{"id": ModelID, "object": "model", "owned_by": ProviderID}},
	})
}

type chatBody struct {
	Model    string `json:"model"`
	Messages []struct {
		Role       string          `json:"role"`
		Content    json.RawMessage `json:"content"`
		ToolCallID string          `json:"tool_call_id"`
		ToolCalls  []struct {
			ID       string `json:"id"`
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"messages"`
	Tools []struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
}

func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) == nil {
		var b strings.Builder
		for i, p := range parts {
			if p.Type == "text" {
				if i > 0 {
					b.WriteByte('\n')
				}
				b.WriteString(p.Text)
			}
		}
		return b.String()
	}
	return ""
}

func parseRequest(body []byte) (*Request, error) {
	var cb chatBody
	if err := json.Unmarshal(body, &cb); err != nil {
		return nil, err
	}
	r := &Request{Time: time.Now(), Model: cb.Model, Body: body}
	for _, t := range cb.Tools {
		r.Tools = append(r.Tools, t.Function.Name)
	}
	for _, cm := range cb.Messages {
		msg := ChatMessage{Role: cm.Role, Content: contentText(cm.Content), ToolCallID: cm.ToolCallID}
		for _, tc := range cm.ToolCalls {
			msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
		r.Messages = append(r.Messages, msg)
	}
	_, last := r.LastUser()
	switch sys := r.System(); {
	case strings.Contains(sys, "summarization agent") || strings.Contains(last, "<conversation>"),
		// Before 1.18 (checked on 1.14.41 and 1.17.19): "You are an anchored context
		// summarization assistant", the history as chat messages before the instruction.
		strings.Contains(sys, "summarization assistant"):
		r.Kind = KindCompaction
	case len(r.Tools) == 0 && strings.Contains(strings.ToLower(sys), "title"):
		r.Kind = KindTitle
	}
	return r, nil
}

func (m *Model) chat(w http.ResponseWriter, hr *http.Request) {
	body, err := io.ReadAll(hr.Body)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, openAIError("bad body: "+err.Error(), "invalid_request_error"))
		return
	}
	req, err := parseRequest(body)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, openAIError("bad JSON: "+err.Error(), "invalid_request_error"))
		return
	}
	reply, seq := m.script.decide(req)
	if reply.Status >= 400 {
		writeJSON(w, reply.Status, failureBody(reply.Status))
		return
	}
	m.stream(w, hr, req, reply, seq)
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
		cmds := splitCommands(afterDirective(text, "RUN:"))
		if len(results) < len(cmds) {
			return Bash(cmds[len(results)])
		}
		last := ""
		if len(results) > 0 {
			last = strings.TrimSpace(results[len(results)-1])
		}
		return Reply{Text: fmt.Sprintf("Ran %d command(s); last output: %s", len(cmds), last), Reasoning: think}
	case strings.Contains(text, "TOOL:"):
		spec := afterDirective(text, "TOOL:")
		name, args, _ := strings.Cut(spec, " ")
		if len(results) == 0 {
			if strings.TrimSpace(args) == "" {
				args = "{}"
			}
			return CallTool(name, strings.TrimSpace(args))
		}
		return Reply{Text: "Called " + name + ".", Reasoning: think}
	case strings.Contains(text, "QUOTE:"):
		prefix := strings.TrimSpace(afterDirective(text, "QUOTE:"))
		for _, msg := range req.Messages[:max(idx, 0)] {
			for line := range strings.SplitSeq(msg.Content, "\n") {
				if j := strings.Index(line, prefix); j >= 0 && prefix != "" {
					return Reply{Text: "Found in the inherited context: " + strings.TrimSpace(line[j:]), Reasoning: think}
				}
			}
		}
		return Reply{Text: "QUOTE: not found", Reasoning: think}
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

// stream writes reply as an OpenAI chat.completion.chunk stream.
func (m *Model) stream(w http.ResponseWriter, hr *http.Request, req *Request, reply Reply, seq int) {
	fl, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	id := fmt.Sprintf("chatcmpl-%d", seq)
	created := time.Now().Unix()
	send := func(delta map[string]any, finish any, usage any) bool {
		chunk := map[string]any{
			"id": id, "object": "chat.completion.chunk", "created": created, "model": req.Model,
			"choices": []map[string]any{{"index": 0, "delta": delta, "finish_reason": finish}},
		}
		if usage != nil {
			chunk["usage"] = usage
		}
		b, _ := json.Marshal(chunk)
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return false
		}
		if fl != nil {
			fl.Flush()
		}
		return hr.Context().Err() == nil
	}
	// Realistic usage lets OpenCode's auto compaction work: about 4 bytes per token.
	prompt := max(1, len(req.Body)/4)
	usage := map[string]int{"prompt_tokens": prompt, "completion_tokens": 20, "total_tokens": prompt + 20}

	if reply.Reasoning != "" && !send(map[string]any{"role": "assistant", "reasoning_content": reply.Reasoning}, nil, nil) {
		return
	}
	if len(reply.ToolCalls) > 0 {
		calls := make([]map[string]any, len(reply.ToolCalls))
		for i, tc := range reply.ToolCalls {
			cid := tc.ID
			if cid == "" {
				cid = fmt.Sprintf("call_%s_%d", id, i)
			}
			calls[i] = map[string]any{"index": i, "id": cid, "type": "function",
				"function": map[string]any{"name": tc.Name, "arguments": tc.Arguments}}
		}
		if send(map[string]any{"role": "assistant", "tool_calls": calls}, nil, nil) {
			send(map[string]any{}, "tool_calls", usage)
			fmt.Fprint(w, "data: [DONE]\n\n")
		}
		return
	}
	chunks := []string{reply.Text}
	var gap time.Duration
	if reply.Delay > 0 {
		const step = 250 * time.Millisecond
		n := int(reply.Delay / step)
		chunks = append([]string{"working "}, make([]string, 0, n+1)...)
		for range n {
			chunks = append(chunks, ".")
		}
		chunks = append(chunks, " "+reply.Text)
		gap = step
	}
	for i, c := range chunks {
		if i > 0 && gap > 0 {
			select {
			case <-time.After(gap):
			case <-hr.Context().Done():
				return
			}
		}
		if !send(map[string]any{"role": "assistant", "content": c}, nil, nil) {
			return
		}
	}
	send(map[string]any{}, "stop", usage)
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func openAIError(msg, kind string) map[string]any {
	return map[string]any{"error": map[string]any{"message": msg, "type": kind, "code": "scripted"}}
}

// failureMessage is the error message of a scripted failure with HTTP status.
func failureMessage(status int) string { return fmt.Sprintf("scripted failure (HTTP %d)", status) }

// failureBody is the JSON body of a scripted failure with HTTP status.
func failureBody(status int) map[string]any {
	kind := "invalid_request_error"
	if status >= 500 {
		kind = "server_error"
	}
	return openAIError(failureMessage(status), kind)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
