package dashboard

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/asyncagents/asyncagents"
)

//go:embed index.html
var pageHTML []byte

// Handler serves the status API and the page of one [asyncagents.Manager]. Create one
// with [New]; it is safe for concurrent use. It owns one goroutine, which reads the
// Manager's changes; [Handler.Close] stops it and ends the open event streams.
type Handler struct {
	m    *asyncagents.Manager
	cfg  config
	root http.Handler // routes, behind the token check and the middlewares
	page []byte       // index.html with the read-only flag set
	csp  string

	tokenHash [32]byte // sha256 of the token
	sessions  *sessions

	stop      chan struct{} // closed by Close
	hubDone   chan struct{} // closed when the hub goroutine returns
	closeOnce sync.Once

	mu       sync.Mutex
	epoch    string                      // names the current run of the hub's subscription
	last     uint64                      // number of the last change of the epoch
	ring     []record                    // the last len(ring) changes: change n at (n-1)%len(ring)
	tasks    map[string]asyncagents.Task // the tasks as of change last
	wake     chan struct{}               // closed and replaced at every change and at the end
	ended    bool                        // the hub stopped: Close, or the Manager closed
	closing  bool                        // Close was called: no new streams
	nstreams int                         // open event streams, at most cfg.maxStreams
	streams  sync.WaitGroup              // open event streams
}

// record is one change, encoded once for every stream.
type record struct {
	n    uint64
	data []byte
}

// New returns a handler for m's tasks and starts the goroutine that reads m's changes
// ([asyncagents.Manager.Subscribe]). Errors: [asyncagents.ErrInvalidInput] for a nil
// Manager or a bad option, [asyncagents.ErrClosed] when m is closed.
func New(m *asyncagents.Manager, opts ...Option) (*Handler, error) {
	if m == nil {
		return nil, fmt.Errorf("%w: dashboard: nil manager", asyncagents.ErrInvalidInput)
	}
	cfg := defaultConfig()
	for _, o := range opts {
		o.apply(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	sub, tasks, err := m.Subscribe(cfg.subBuffer)
	if err != nil {
		return nil, fmt.Errorf("dashboard: subscribe: %w", err)
	}
	h := &Handler{
		m:       m,
		cfg:     cfg,
		stop:    make(chan struct{}),
		hubDone: make(chan struct{}),
		ring:    make([]record, cfg.history),
		wake:    make(chan struct{}),
	}
	h.sessions = newSessions(&h.cfg)
	if cfg.hasToken {
		h.tokenHash = sha256.Sum256([]byte(cfg.token))
		h.cfg.token = "" // kept only as a hash
	}
	h.page, h.csp = preparePage(cfg.readOnly)
	h.resetLocked(tasks)

	mux := http.NewServeMux()
	mux.HandleFunc("/{$}", h.servePage)
	mux.HandleFunc("/api/tasks", h.open(h.serveList))
	mux.HandleFunc("/api/tasks/{id}", h.open(h.serveTask))
	mux.HandleFunc("/api/tasks/{id}/cancel", h.open(h.serveCancel))
	mux.HandleFunc("/api/events", h.serveEvents) // checks h.closing itself
	mux.HandleFunc("/api/login-link", h.open(h.serveLoginLink))
	mux.HandleFunc("/api/logout", h.serveLogout)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such route")
	})
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusForbidden, "cross-origin request refused")
	}))
	var root http.Handler = h.checkHost(cop.Handler(h.authenticate(mux)))
	for i := len(cfg.middlewares) - 1; i >= 0; i-- {
		root = cfg.middlewares[i](root)
	}
	h.root = root

	go h.run(sub)
	return h, nil
}

// ServeHTTP serves the routes listed in the package documentation.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.root.ServeHTTP(w, r)
}

// Close stops the handler's goroutine and ends the open event streams, and waits for
// both. A stream blocked writing to a client that does not read ends when its write times
// out (10 s). Afterwards the API answers 503 and the page still loads. Close is idempotent
// and always returns nil; it does not close the Manager.
func (h *Handler) Close() error {
	h.closeOnce.Do(func() {
		h.mu.Lock()
		h.closing = true
		h.mu.Unlock()
		close(h.stop)
		<-h.hubDone
		h.streams.Wait()
	})
	return nil
}

// --- the hub: one goroutine that turns the Manager's changes into records ---

// run reads the Manager's changes until Close or the Manager closes. When it falls
// behind (asyncagents.ErrLagged) it subscribes again and starts a new epoch, which sends
// every stream a snapshot.
func (h *Handler) run(sub *asyncagents.Subscription) {
	defer close(h.hubDone)
	defer h.end()
	var seq uint64
	for {
		select {
		case <-h.stop:
			sub.Close()
			return
		case c, ok := <-sub.Changes():
			if ok && (seq == 0 || c.Seq == seq+1) {
				if h.cfg.beforeChange != nil {
					h.cfg.beforeChange()
				}
				seq = c.Seq
				h.add(c)
				continue
			}
			err := sub.Err()
			sub.Close()
			if ok || errors.Is(err, asyncagents.ErrLagged) {
				h.cfg.logger.Warn("dashboard: fell behind the manager's changes; subscribing again", "seq", seq)
				next, tasks, err := h.m.Subscribe(h.cfg.subBuffer)
				if err != nil {
					h.cfg.logger.Info("dashboard: subscription ended", "err", err)
					return
				}
				sub, seq = next, 0
				h.mu.Lock()
				h.resetLocked(tasks)
				h.wakeLocked()
				h.mu.Unlock()
				continue
			}
			// The Manager was closed (ErrClosed).
			h.cfg.logger.Info("dashboard: subscription ended", "err", err)
			return
		}
	}
}

// resetLocked starts a new epoch with tasks as its state.
func (h *Handler) resetLocked(tasks []asyncagents.Task) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	h.epoch = hex.EncodeToString(b[:])
	h.last = 0
	clear(h.ring)
	h.tasks = make(map[string]asyncagents.Task, len(tasks))
	for _, t := range tasks {
		h.tasks[t.ID] = t
	}
}

// add records one change and wakes the streams.
func (h *Handler) add(c asyncagents.Change) {
	data, err := json.Marshal(changeJSON{Seq: c.Seq, Task: view(c.Task), Removed: c.Removed})
	if err != nil { // a Task always encodes; keep the stream whole all the same
		data = []byte(`{"seq":0}`)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.last++
	h.ring[(h.last-1)%uint64(len(h.ring))] = record{n: h.last, data: data}
	if c.Removed {
		delete(h.tasks, c.Task.ID)
	} else {
		h.tasks[c.Task.ID] = c.Task
	}
	h.wakeLocked()
}

func (h *Handler) wakeLocked() {
	close(h.wake)
	h.wake = make(chan struct{})
}

// end marks the hub stopped and wakes the streams so they finish.
func (h *Handler) end() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ended = true
	h.wakeLocked()
}

// --- JSON shapes ---

// taskJSON is a Task in the API: its own JSON form plus the fields the Manager computes
// for the copies it returns.
type taskJSON struct {
	asyncagents.Task
	DisplayID     string `json:"displayID"`
	QueuePosition int    `json:"queuePosition,omitempty"`
}

func view(t asyncagents.Task) taskJSON {
	return taskJSON{Task: t, DisplayID: t.DisplayID, QueuePosition: t.QueuePosition}
}

func views(ts []asyncagents.Task) []taskJSON {
	out := make([]taskJSON, len(ts))
	for i, t := range ts {
		out[i] = view(t)
	}
	return out
}

type listJSON struct {
	Tasks []taskJSON `json:"tasks"`
}

type changeJSON struct {
	Seq     uint64   `json:"seq"`
	Task    taskJSON `json:"task"`
	Removed bool     `json:"removed,omitempty"`
}

type snapshotJSON struct {
	Time     time.Time  `json:"time"`
	ReadOnly bool       `json:"readOnly"`
	Tasks    []taskJSON `json:"tasks"`
}

type errorJSON struct {
	Error string `json:"error"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		status, data = http.StatusInternalServerError, []byte(`{"error":"encoding failed"}`)
	}
	hd := w.Header()
	hd.Set("Content-Type", "application/json; charset=utf-8")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(data, '\n'))
}

// writeError answers {"error": msg}; msg never holds more than a short id of the request.
func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, errorJSON{Error: msg})
}

// allow answers 405 unless r's method is one of methods.
func allow(w http.ResponseWriter, r *http.Request, methods ...string) bool {
	for _, m := range methods {
		if r.Method == m {
			return true
		}
	}
	w.Header().Set("Allow", strings.Join(methods, ", "))
	writeError(w, http.StatusMethodNotAllowed, "method "+shortMethod(r.Method)+" not allowed; use "+strings.Join(methods, " or "))
	return false
}

func shortMethod(m string) string {
	if len(m) > 16 {
		return m[:16] + "…"
	}
	return m
}

// idPattern is what a task or session id may look like ("tsk_…", "ses_…" and the like).
var idPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,100}$`)

// managerError answers an error of the Manager.
func managerError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, asyncagents.ErrTaskNotFound):
		writeError(w, http.StatusNotFound, "task not found")
	case errors.Is(err, asyncagents.ErrNotRunning):
		writeError(w, http.StatusConflict, "task is not queued, running or resumed")
	case errors.Is(err, asyncagents.ErrClosed):
		writeError(w, http.StatusServiceUnavailable, "manager closed")
	case errors.Is(err, asyncagents.ErrInvalidInput):
		writeError(w, http.StatusBadRequest, "invalid request")
	default:
		writeError(w, http.StatusBadGateway, "the OpenCode server failed the request")
	}
}

// --- routes ---

// open answers 503 once Close was called, and passes the request on before.
func (h *Handler) open(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		closing := h.closing
		h.mu.Unlock()
		if closing {
			writeError(w, http.StatusServiceUnavailable, "dashboard closed")
			return
		}
		next(w, r)
	}
}

func (h *Handler) servePage(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodGet, http.MethodHead) {
		return
	}
	q := r.URL.Query()
	if _, ok := q["token"]; ok {
		w.Header().Set("Referrer-Policy", "no-referrer")
		writeError(w, http.StatusBadRequest, "a token is not accepted in a URL: open a login link")
		return
	}
	if codes, ok := q["login"]; ok {
		h.serveLogin(w, r, codes)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", "text/html; charset=utf-8")
	hd.Set("Cache-Control", "no-cache")
	hd.Set("Content-Security-Policy", h.csp)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("X-Frame-Options", "DENY")
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(h.page))
}

func (h *Handler) serveList(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodGet, http.MethodHead) {
		return
	}
	q := r.URL.Query()
	parent, status := q.Get("parent"), q.Get("status")
	if parent != "" && !idPattern.MatchString(parent) {
		writeError(w, http.StatusBadRequest, "invalid parent: want a session id")
		return
	}
	if status != "" && !validStatus(asyncagents.Status(status)) {
		writeError(w, http.StatusBadRequest, "invalid status: want queued, running, resumed, completed, error or cancelled")
		return
	}
	tasks, err := h.m.ListAll(asyncagents.Status(status))
	if err != nil {
		managerError(w, err)
		return
	}
	if parent != "" {
		kept := tasks[:0]
		for _, t := range tasks {
			if t.ParentSessionID == parent {
				kept = append(kept, t)
			}
		}
		tasks = kept
	}
	writeJSON(w, http.StatusOK, listJSON{Tasks: views(tasks)})
}

func validStatus(s asyncagents.Status) bool {
	return s.Terminal() || s.Active() || s == asyncagents.StatusQueued
}

// task returns the task the path's {id} names, or answers an error.
func (h *Handler) task(w http.ResponseWriter, r *http.Request) (asyncagents.Task, bool) {
	id := r.PathValue("id")
	if !idPattern.MatchString(id) {
		writeError(w, http.StatusBadRequest, "invalid task id")
		return asyncagents.Task{}, false
	}
	t, err := h.m.Get(id)
	if err != nil {
		managerError(w, err)
		return asyncagents.Task{}, false
	}
	return t, true
}

func (h *Handler) serveTask(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodGet, http.MethodHead) {
		return
	}
	if t, ok := h.task(w, r); ok {
		writeJSON(w, http.StatusOK, view(t))
	}
}

func (h *Handler) serveCancel(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodPost) {
		return
	}
	if h.cfg.readOnly {
		writeError(w, http.StatusForbidden, "read-only dashboard")
		return
	}
	t, ok := h.task(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), asyncagents.DefaultRequestTimeout)
	defer cancel()
	caller := asyncagents.Caller{SessionID: t.ParentSessionID, Agent: t.ParentAgent}
	ct, err := h.m.Cancel(ctx, caller, t.ID)
	if err != nil {
		h.cfg.logger.Warn("dashboard: cancel failed", "task", t.ID, "err", err)
		managerError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, view(ct))
}

// --- the page ---

// preparePage returns the page with its read-only flag set, and a Content-Security-Policy
// that allows its one inline script and style and nothing from elsewhere.
func preparePage(readOnly bool) ([]byte, string) {
	page := pageHTML
	if readOnly {
		page = bytes.Replace(page, []byte(`<meta name="asyncagents-read-only" content="false">`),
			[]byte(`<meta name="asyncagents-read-only" content="true">`), 1)
	}
	hash := func(start, end string) string {
		_, rest, ok1 := bytes.Cut(page, []byte(start))
		body, _, ok2 := bytes.Cut(rest, []byte(end))
		if !ok1 || !ok2 {
			panic("dashboard: index.html lacks " + start) // the embedded file is ours
		}
		s := sha256.Sum256(body)
		return "'sha256-" + base64.StdEncoding.EncodeToString(s[:]) + "'"
	}
	csp := "default-src 'none'; script-src " + hash("<script>", "</script>") +
		"; style-src " + hash("<style>", "</style>") +
		"; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
	return page, csp
}
