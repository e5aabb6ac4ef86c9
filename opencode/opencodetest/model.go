package opencodetest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"
)

// ModelID is the model id the scripted model serves; the provider is ProviderID. A prompt may
// name it as opencode.Model{ProviderID: ProviderID, ModelID: ModelID}.
const (
	ProviderID = "scripted"
	ModelID    = "m1"
)

// Kinds of requests.
const (
	KindChat       Kind = iota // an agent step (with tools)
	KindTitle                  // session title generation
	KindCompaction             // a compaction summary (POST /session/{id}/summarize, auto compaction)
)

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

func (m *Model) models(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list",
		"data":   []map[string]any{{"id": ModelID, "object": "model", "owned_by": ProviderID}},
	})
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

// stream writes reply as an OpenAI chat.completion.chunk stream.
func (m *Model) stream(w http.ResponseWriter, hr *http.Request, req *Request, reply Reply, seq int) {
	fl, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	cw := &chunkWriter{w: w, fl: fl, hr: hr, id: fmt.Sprintf("chatcmpl-%d", seq), created: time.Now().Unix(), model: req.Model}
	// Realistic usage lets OpenCode's auto compaction work: about 4 bytes per token.
	prompt := max(1, len(req.Body)/4)
	usage := map[string]int{"prompt_tokens": prompt, "completion_tokens": 20, "total_tokens": prompt + 20}

	if reply.Reasoning != "" && !cw.send(map[string]any{"role": "assistant", "reasoning_content": reply.Reasoning}, nil, nil) {
		return
	}
	if len(reply.ToolCalls) > 0 {
		cw.toolCalls(reply.ToolCalls, usage)
		return
	}
	cw.text(reply, usage)
}

// chunkWriter writes the chunks of one streamed chat completion.
type chunkWriter struct {
	w       http.ResponseWriter
	fl      http.Flusher // nil when w cannot flush
	hr      *http.Request
	id      string
	created int64
	model   string
}

// send writes one chunk with delta, finish_reason finish and, when not nil, usage. It
// reports false when the write failed or the request ended.
func (cw *chunkWriter) send(delta map[string]any, finish any, usage any) bool {
	chunk := map[string]any{
		"id": cw.id, "object": "chat.completion.chunk", "created": cw.created, "model": cw.model,
		"choices": []map[string]any{{"index": 0, "delta": delta, "finish_reason": finish}},
	}
	if usage != nil {
		chunk["usage"] = usage
	}
	b, _ := json.Marshal(chunk)
	if _, err := fmt.Fprintf(cw.w, "data: %s\n\n", b); err != nil {
		return false
	}
	if cw.fl != nil {
		cw.fl.Flush()
	}
	return cw.hr.Context().Err() == nil
}

// toolCalls streams calls in one chunk, then the finish tool_calls.
func (cw *chunkWriter) toolCalls(toolCalls []ToolCall, usage any) {
	calls := make([]map[string]any, len(toolCalls))
	for i, tc := range toolCalls {
		cid := tc.ID
		if cid == "" {
			cid = fmt.Sprintf("call_%s_%d", cw.id, i)
		}
		calls[i] = map[string]any{"index": i, "id": cid, "type": "function",
			"function": map[string]any{"name": tc.Name, "arguments": tc.Arguments}}
	}
	if cw.send(map[string]any{"role": "assistant", "tool_calls": calls}, nil, nil) {
		cw.send(map[string]any{}, "tool_calls", usage)
		fmt.Fprint(cw.w, "data: [DONE]\n\n")
	}
}

// text streams reply.Text, spread over reply.Delay ("working", a dot every 250 ms, then
// the text), then the finish stop. It stops early when the request ends.
func (cw *chunkWriter) text(reply Reply, usage any) {
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
			case <-cw.hr.Context().Done():
				return
			}
		}
		if !cw.send(map[string]any{"role": "assistant", "content": c}, nil, nil) {
			return
		}
	}
	cw.send(map[string]any{}, "stop", usage)
	fmt.Fprint(cw.w, "data: [DONE]\n\n")
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
