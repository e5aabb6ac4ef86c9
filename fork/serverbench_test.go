package fork_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents/fork"
	"github.com/asyncagents/asyncagents/opencode"
	"github.com/asyncagents/asyncagents/opencode/opencodetest"
)

// BenchmarkForkRead (P-4) measures what a forked launch spends reading its parent from a real
// server: parents of 1,000, 5,000 and 20,000 generated messages (see session), imported with
// `opencode import`, without compaction and with a compaction boundary 500 messages from the
// end, read whole (GET /session/{id}/message, then Run) and page by page (SessionPages, then
// RunPages). Each reports, per read, the milliseconds spent waiting for the server (until the
// body is in), decoding JSON and in the pipeline, the messages fetched (msgs) and those the
// pipeline needed (used), and the requests. The generated messages are large, so the default
// budget stops a paged read before a boundary 500 messages back: paged-no-budget-limit reads
// those parents with a pipeline whose budget never fills, to show the stop at the boundary.
// paged-client is the paged read through opencode.HTTPClient, whose decoding streams from
// the connection, so only its total is reported. Importing the parents takes minutes, so it
// runs only with ASYNCAGENTS_BENCH_FORK=1 (make bench-fork).
func BenchmarkForkRead(b *testing.B) {
	if os.Getenv("ASYNCAGENTS_BENCH_FORK") != "1" {
		b.Skip("set ASYNCAGENTS_BENCH_FORK=1 (make bench-fork) to import parents into a real server and measure forked reads")
	}
	srv := opencodetest.Start(b)
	type parent struct {
		name, id string
	}
	var parents []parent
	for _, n := range []int{1000, 5000, 20000} {
		for _, boundary := range []int{0, 500} {
			name := fmt.Sprintf("%d/no-compaction", n)
			if boundary > 0 {
				name = fmt.Sprintf("%d/boundary-%d-from-end", n, boundary)
			}
			id := fmt.Sprintf("ses_benchfork%012d%05d", n, boundary) // 26 characters after ses_, as OpenCode's
			start := time.Now()
			importSession(b, srv, id, importMessages(n, boundary, id))
			b.Logf("imported %s (%s) in %v", name, id, time.Since(start).Round(time.Millisecond))
			parents = append(parents, parent{name, id})
		}
	}
	p, err := fork.New()
	if err != nil {
		b.Fatal(err)
	}
	unbounded, err := fork.New(fork.WithBudget(1 << 40))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for _, par := range parents {
		var full fork.Result
		b.Run(par.name+"/full", func(b *testing.B) {
			r := &timedReader{base: srv.URL, dir: srv.Directory}
			for b.Loop() {
				r.measure(func() { full = p.Run(r.all(ctx, b, par.id)) })
				r.used += full.Stats.OriginalMessages
			}
			r.report(b)
		})
		b.Run(par.name+"/paged", func(b *testing.B) {
			r := &timedReader{base: srv.URL, dir: srv.Directory}
			var paged fork.Result
			for b.Loop() {
				r.measure(func() {
					var err error
					if paged, err = p.RunPages(ctx, fork.SessionPages(r, par.id)); err != nil {
						b.Fatal(err)
					}
				})
				r.used += paged.Stats.OriginalMessages
			}
			r.report(b)
			if full.Context != "" && (paged.Context != full.Context || paged.Preamble != full.Preamble) {
				b.Fatal("the paged read gives another context or preamble than the full one")
			}
		})
		if strings.Contains(par.name, "boundary") {
			// Where the boundary alone stops the read: no budget to stop it first.
			b.Run(par.name+"/paged-no-budget-limit", func(b *testing.B) {
				r := &timedReader{base: srv.URL, dir: srv.Directory}
				for b.Loop() {
					r.measure(func() {
						res, err := unbounded.RunPages(ctx, fork.SessionPages(r, par.id))
						if err != nil || !res.Stats.CompactionDetected {
							b.Fatalf("RunPages = %+v, %v; want the boundary found", res.Stats, err)
						}
						r.used += res.Stats.OriginalMessages
					})
				}
				r.report(b)
			})
		}
		b.Run(par.name+"/paged-client", func(b *testing.B) {
			c := srv.Client()
			for b.Loop() {
				if _, err := p.RunPages(ctx, fork.SessionPages(c, par.id)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// timedReader reads messages as opencode.HTTPClient does, but reads each body whole before
// decoding it, to time the server and the decoding apart.
type timedReader struct {
	base, dir string

	ops                   int
	server, decode, total time.Duration
	msgs, requests, used  int
}

// measure runs one read and adds its time to the total.
func (r *timedReader) measure(read func()) {
	start := time.Now()
	read()
	r.total += time.Since(start)
	r.ops++
}

func (r *timedReader) report(b *testing.B) {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / float64(r.ops) }
	b.ReportMetric(ms(r.server), "server-ms/op")
	b.ReportMetric(ms(r.decode), "decode-ms/op")
	b.ReportMetric(ms(r.total-r.server-r.decode), "pipeline-ms/op")
	b.ReportMetric(float64(r.msgs)/float64(r.ops), "msgs/op")
	b.ReportMetric(float64(r.requests)/float64(r.ops), "requests/op")
	b.ReportMetric(float64(r.used)/float64(r.ops), "used-msgs/op")
}

func (r *timedReader) get(ctx context.Context, sessionID string, q url.Values) ([]opencode.Message, string, error) {
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.base+"/session/"+sessionID+"/message?"+q.Encode(), nil)
	if err != nil {
		return nil, "", err
	}
	req.Header.Set("x-opencode-directory", r.dir)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, "", err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil, "", fmt.Errorf("GET %s: %d %v %.200s", req.URL, resp.StatusCode, err, body)
	}
	r.server += time.Since(start)
	start = time.Now()
	var msgs []opencode.Message
	if err := json.Unmarshal(body, &msgs); err != nil {
		return nil, "", err
	}
	r.decode += time.Since(start)
	r.msgs += len(msgs)
	r.requests++
	return msgs, resp.Header.Get("X-Next-Cursor"), nil
}

func (r *timedReader) all(ctx context.Context, b *testing.B, sessionID string) []opencode.Message {
	msgs, _, err := r.get(ctx, sessionID, nil)
	if err != nil {
		b.Fatal(err)
	}
	return msgs
}

func (r *timedReader) MessagesBefore(ctx context.Context, sessionID string, limit int, before string) ([]opencode.Message, string, error) {
	q := url.Values{"limit": {fmt.Sprint(limit)}}
	if before != "" {
		q.Set("before", before)
	}
	return r.get(ctx, sessionID, q)
}

// importMessages returns session(n) as `opencode export` writes a session (the fields its
// import requires), as session id, with a compaction (marker and summary, the summary
// boundary messages before the end) when boundary > 0.
func importMessages(n, boundary int, id string) []byte {
	msgs := sessionMessages(n)
	tokens := map[string]any{"total": 1020, "input": 1000, "output": 20, "reasoning": 0, "cache": map[string]any{"read": 0, "write": 0}}
	assistant := func(info map[string]any) {
		info["modelID"], info["providerID"], info["cost"], info["tokens"] = opencodetest.ModelID, opencodetest.ProviderID, 0, tokens
		info["path"] = map[string]any{"cwd": "/", "root": "/"}
		if info["mode"] == nil {
			info["mode"], info["agent"] = "build", "build"
		}
	}
	if boundary > 0 {
		at := len(msgs) - boundary + 1 // the marker's index: the summary follows it
		prev := msgs[at-1]["info"].(map[string]any)
		created := prev["time"].(map[string]any)["created"]
		mid, sid := prev["id"].(string)+"a", prev["id"].(string)+"b" // between prev and the next
		marker := map[string]any{
			"info":  map[string]any{"id": mid, "role": "user", "time": map[string]any{"created": created}, "agent": "build"},
			"parts": []any{map[string]any{"id": "prt_" + mid, "type": "compaction", "auto": false}},
		}
		summary := map[string]any{
			"info": map[string]any{"id": sid, "role": "assistant", "parentID": mid, "summary": true, "mode": "compaction", "agent": "compaction",
				"finish": "stop", "time": map[string]any{"created": created, "completed": created}},
			"parts": []any{map[string]any{"id": "prt_" + sid, "type": "text", "text": "## Objective\n- Make the checks pass.\n\n## Work State\n" + strings.Repeat("- fixed a failing test\n", 40)}},
		}
		msgs = append(msgs[:at], append([]map[string]any{marker, summary}, msgs[at:]...)...)
	}
	// Message and part ids are global: each parent gets its own, in the same order.
	tag := id[len("ses_"):]
	reID := func(v any) any {
		if s, ok := v.(string); ok && len(s) > 4 && s[3] == '_' {
			return s[:4] + tag + s[4:]
		}
		return v
	}
	for _, m := range msgs {
		info := m["info"].(map[string]any)
		info["sessionID"], info["id"] = id, reID(info["id"])
		if info["parentID"] != nil {
			info["parentID"] = reID(info["parentID"])
		}
		if info["role"] == opencode.RoleUser {
			info["model"] = map[string]any{"providerID": opencodetest.ProviderID, "modelID": opencodetest.ModelID}
		} else {
			assistant(info)
		}
		for _, p := range m["parts"].([]any) {
			p := p.(map[string]any)
			p["sessionID"], p["messageID"], p["id"] = id, info["id"], reID(p["id"])
			switch p["type"] {
			case opencode.PartStepFinish:
				p["cost"], p["tokens"] = 0, tokens
			case opencode.PartReasoning:
				p["time"] = map[string]any{"start": 1, "end": 2}
			}
		}
	}
	b, err := json.Marshal(map[string]any{
		"info": map[string]any{"id": id, "slug": "bench-fork", "projectID": "global", "directory": "/", "title": "bench-fork parent",
			"version": "1.18.33", "time": map[string]any{"created": 1, "updated": 2}},
		"messages": msgs,
	})
	if err != nil {
		panic(err)
	}
	return b
}

// importSession imports a session file into srv's data folder with `opencode import`.
func importSession(b testing.TB, srv *opencodetest.Server, id string, data []byte) {
	file := filepath.Join(b.TempDir(), id+".json")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		b.Fatal(err)
	}
	bin := os.Getenv("OPENCODE_BIN")
	if bin == "" {
		bin = filepath.Join("..", ".cache", "opencode", "node_modules", ".bin", "opencode")
	}
	bin, err := filepath.Abs(bin)
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, "import", file)
	cmd.Dir = srv.Directory
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "HOME" && !strings.HasPrefix(k, "XDG_") && !strings.HasPrefix(k, "OPENCODE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "HOME="+srv.Home,
		"XDG_CONFIG_HOME="+filepath.Join(srv.Home, ".config"), "XDG_DATA_HOME="+filepath.Join(srv.Home, ".local", "share"),
		"XDG_CACHE_HOME="+filepath.Join(srv.Home, ".cache"), "XDG_STATE_HOME="+filepath.Join(srv.Home, ".local", "state"),
		"OPENCODE_DISABLE_AUTOUPDATE=1", "OPENCODE_DISABLE_MODELS_FETCH=1", "OPENCODE_DISABLE_SHARE=1")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "Imported session: "+id) {
		b.Fatalf("opencode import: %v\n%s", err, out)
	}
}
