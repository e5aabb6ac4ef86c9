package asyncagents

import (
	"bytes"
	"context"
	"encoding/json"
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asyncagents/asyncagents/internal/scan"
	"github.com/asyncagents/asyncagents/opencode"
)

// A run that ends with a reply is decided from what the event stream carried of it, when the
// stream carried all of it: the run's message.updated and message.part.updated events are
// recorded (runLog), and on the run's idle event a runMirror rebuilt from them gives its
// messages to manager.Decide as a read's would, without the read. When the server ends many
// runs at once, it answers the reads one after another; the events have already arrived.
//
// A mirror decides only a reply that is complete in it: the newest message of the run is an
// assistant message with a completion time and a finish other than "tool-calls", without an
// error, and every part of it that was seen is final (a text or reasoning part with its end
// time, a tool part completed or failed).
//
// The stream must also have carried the whole run, and that is decided from what it carried,
// never from how fast the server answers. The server publishes a run's events in order, after
// its prompt arrives, and a connection delivers, in the order published, every event published
// after it subscribed. So a connection carries the whole run when it delivered, before the
// run's idle and on the same connection as every frame recorded of the run, an event the
// server published before the prompt reached it. The Manager knows two such events:
//   - any event delivered before the prompt was sent (Manager.live: OpenCode sends
//     server.connected before the subscription is live, so a connection counts from the first
//     other event it delivers), which binds the run's log to the connection when the log is
//     created or when the prompt is first sent;
//   - the session.created of the task's own session, published while the Manager's
//     POST /session was answered, before the prompt was sent: it binds the log of a launch
//     to the connection that delivers it, however late, so that runs launched right after
//     New, before the stream delivered anything, are followed too.
//
// Anything else — an error, which OpenCode may add after the first idle, an abort, a halt, an
// early idle, a removed message, a frame that does not decode, a frame or an idle on another
// connection than the one the log is bound to, a log bound to none — leaves the run to a
// read, as before.

// mirrors is the part of the Manager that follows runs on the event stream: per task session,
// the log of its current run, written under Manager.mu and mu and read under mu alone by the
// goroutine reading the stream; the numbers of the stream's connections (epoch) and of the
// one delivering events (live, 0 while none does); how many runs were completed from their
// logs; and tried, closed once the stream's first connection attempt is over.
type mirrors struct {
	mu          sync.RWMutex
	logs        map[string]*runLog
	epoch, live atomic.Uint64
	decided     atomic.Int64
	tried       chan struct{}
	triedOnce   sync.Once
}

// firstTryOver closes tried, once.
func (ms *mirrors) firstTryOver() { ms.triedOnce.Do(func() { close(ms.tried) }) }

// awaitStream waits until the event stream's first connection attempt is over, at most
// timeout (the quick request timeout, which also bounds the attempt's handshake), until ctx is
// done or until stop is closed (the Manager closes). A launch waits for it before it creates the task's session: a task
// launched right after New then has its session created while the stream is open, and the
// stream usually delivers its session.created, which binds its run to the stream (OpenCode
// may subscribe a moment after it answers: a session created then is not delivered, and its
// run is read). Later launches do not wait.
func (ms *mirrors) awaitStream(ctx context.Context, timeout time.Duration, stop <-chan struct{}) {
	select {
	case <-ms.tried:
		return
	default:
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-ms.tried:
	case <-t.C:
	case <-ctx.Done():
	case <-stop:
	}
}

// hashSeed hashes the message.updated events of mirrors, to skip repeated ones.
var hashSeed = maphash.MakeSeed()

// maxMirrored bounds the messages a mirror keeps (the run's user messages and its newest);
// a run with more is decided from a read.
const maxMirrored = 64

// runMirror is what the event stream carried of one run of a task session: the infos of the
// run's user messages and of its newest message, and the parts of the newest message (text
// parts whole, the others only as final or not: [manager.Decide] reads no other part). It is
// built by replay from a runLog.
type runMirror struct {
	baseline string // the messages up to this id belong to earlier runs

	msgs   []opencode.Message // oldest first: user messages, then the newest if it is not one
	parts  []mirroredPart     // of the newest message, when it is an assistant message
	last   uint64             // hash of the last message.updated applied: OpenCode sends some twice
	done   []opencode.Message // the run's messages once an idle event found its reply complete
	broken bool               // something it cannot follow was seen: decide from a read
}

// mirroredPart is a part of the newest message: a text part whole, others by id alone.
type mirroredPart struct {
	part  opencode.Part
	final bool
}

// runLog is what the event stream carried of one run of a task session, as it came: the
// goroutine reading the stream only records the frames a runMirror needs (message.updated,
// and the updates of text, reasoning and tool parts; a tool part already decoded for
// progress), and the reconciler that takes the run's idle event replays them into a mirror.
// So a burst of run ends costs the reader a copy per frame, and the decoding is spread over
// the reconcilers. It is created before the run's prompt is sent, replaced when the next run
// starts and dropped when the run ends; only the reader appends to it.
type runLog struct {
	// bound is the connection known to carry the whole run (see above), or 0 while none
	// is; set once.
	bound    atomic.Uint64
	baseline string // the messages up to this id belong to earlier runs
	from     uint64 // the connection that delivered the frames (0 before the first)
	frames   []logFrame
	size     int  // bytes held by frames
	broken   bool // something it cannot follow was seen: decide from a read
}

// bind records that connection epoch carries the whole run, unless the log is bound already.
// A zero epoch (no connection delivering) binds nothing.
func (l *runLog) bind(epoch uint64) {
	if epoch != 0 {
		l.bound.CompareAndSwap(0, epoch)
	}
}

// logFrame is one recorded frame: the properties of a message.updated event (msg) or of a
// text or reasoning part's update, or a tool part decoded.
type logFrame struct {
	props []byte
	msg   bool
	tool  *partEvent
}

// Bounds of a runLog: a run that streams more is decided from a read. The bytes counted are
// the properties'; the frames kept hold their envelopes too (the stream's data of each event,
// a few tens of bytes more).
const (
	maxLogBytes  = 1 << 20
	maxLogFrames = 4096
)

// add records a frame delivered by connection epoch, or gives up on the run when the log is
// full or the frames come from more than one connection.
func (l *runLog) add(f logFrame, epoch uint64) {
	if l.broken {
		return
	}
	if l.from == 0 {
		l.from = epoch
	}
	if l.size += len(f.props); l.size > maxLogBytes || len(l.frames) >= maxLogFrames || l.from != epoch {
		l.broken, l.frames = true, nil
		return
	}
	l.frames = append(l.frames, f) // the stream does not reuse the props (EventStream's contract)
}

// snapshot returns the frames recorded so far when connection epoch, which delivered the idle
// event asking, is the one the log is bound to and delivered them all, and nothing broke it;
// nil otherwise. The frames returned are not changed by later appends.
func (l *runLog) snapshot(epoch uint64) []logFrame {
	if epoch == 0 || l.bound.Load() != epoch || l.from != epoch || l.broken || len(l.frames) == 0 {
		return nil
	}
	return l.frames[:len(l.frames):len(l.frames)]
}

// replay returns the run's messages as a read would return what Decide reads, from the frames
// the stream carried of a run after baseline, when they hold its complete reply; nil otherwise.
//
// Only the last frame of a message or of a text or reasoning part is decoded: a later frame of
// the same message or part replaces what an earlier one said. An earlier frame of a message
// still places it (its id and whether it is a user message are read in place); one of a part
// is skipped (the part's last frame places it). So replay decides as applying every frame
// does, except that it is not checked whether an earlier frame decodes, or whether a part's
// earlier frame came before its message's first (OpenCode writes a message before its parts).
func replay(frames []logFrame, baseline string) []opencode.Message {
	r := &runMirror{baseline: baseline}
	later := superseded(frames)
	for i, f := range frames {
		switch {
		case f.tool != nil:
			r.part(f.tool, true)
		case f.msg && later[i]:
			r.placed(f.props)
		case f.msg:
			r.message(f.props)
		case later[i]:
		default:
			p, ok := decodePart(f.props)
			r.part(&p, ok)
		}
	}
	return r.reply()
}

// superseded reports, for each frame, whether a later frame of frames is of the same message
// (message.updated) or the same part (text and reasoning updates), found by the ids OpenCode
// writes first; a frame of another shape is never superseded.
func superseded(frames []logFrame) []bool {
	later := make([]bool, len(frames))
	seen := make(map[string]struct{}, 8)
	for i := len(frames) - 1; i >= 0; i-- {
		f := &frames[i]
		var id []byte
		switch {
		case f.tool != nil:
			continue
		case f.msg:
			id = scan.LeadingInfoID(f.props)
		default:
			id = scan.LeadingPartID(f.props)
		}
		if id == nil {
			continue
		}
		if _, ok := seen[string(id)]; ok {
			later[i] = true
		} else {
			seen[string(id)] = struct{}{}
		}
	}
	return later
}

// whole returns the log of session sid's run and its frames when connection epoch carried the
// whole run (runLog.snapshot); nil otherwise.
func (ms *mirrors) whole(sid string, epoch uint64) (*runLog, []logFrame) {
	l := ms.of([]byte(sid))
	if l == nil {
		return nil, nil
	}
	frames := l.snapshot(epoch)
	if frames == nil {
		return nil, nil
	}
	return l, frames
}

// of returns the log of the current run of the task session sid, or nil. It does not
// allocate.
func (ms *mirrors) of(sid []byte) *runLog {
	if len(sid) == 0 {
		return nil
	}
	ms.mu.RLock()
	defer ms.mu.RUnlock()
	return ms.logs[string(sid)]
}

// start gives e's run, whose prompt is about to be sent, a new log, bound to the connection
// delivering events, if any (under Manager.mu). The log is in the map before live is read: when the
// reader, which stores live before it looks a session's log up, missed the log, it stored
// live before this reads it.
func (ms *mirrors) start(e *entry) {
	ms.drop(e)
	e.run.mirror = &runLog{baseline: e.run.baseline}
	ms.mu.Lock()
	ms.logs[e.task.SessionID] = e.run.mirror
	ms.mu.Unlock()
	e.run.mirror.bind(ms.live.Load())
}

// drop forgets the log of e's run, which has ended (under Manager.mu).
func (ms *mirrors) drop(e *entry) {
	if e.run.mirror != nil {
		ms.mu.Lock()
		if ms.logs[e.task.SessionID] == e.run.mirror {
			delete(ms.logs, e.task.SessionID)
		}
		ms.mu.Unlock()
	}
	e.run.mirror, e.run.streamed = nil, nil
}

// messageEvent is what a mirror reads of a message.updated event: what Decide reads of the
// info (id, the user message an assistant message answers, role, completion time, finish,
// error).
type messageEvent struct {
	Info struct {
		ID       string `json:"id"`
		ParentID string `json:"parentID"`
		Role     string `json:"role"`
		Finish   string `json:"finish"`
		Time     struct {
			Completed int64 `json:"completed"`
		} `json:"time"`
		Error *opencode.Error `json:"error"`
	} `json:"info"`
}

// message applies the properties of a message.updated event.
func (r *runMirror) message(props []byte) {
	if !r.following() {
		return
	}
	if h := maphash.Bytes(hashSeed, props); h != r.last {
		r.last = h
	} else {
		return
	}
	var ev messageEvent
	if f, ok := scan.MessageInfo(props); ok && !f.Error { // most are read so, without a decode
		ev.Info.ID, ev.Info.ParentID, ev.Info.Role, ev.Info.Finish, ev.Info.Time.Completed = f.ID, f.ParentID, f.Role, f.Finish, f.Completed
	} else if err := json.Unmarshal(props, &ev); err != nil {
		r.broken = true
		return
	}
	info := &ev.Info
	if info.ID == "" || bytes.Contains(props, compactionSummary) { // a compaction mid-run: leave it to a read
		r.broken = true
		return
	}
	if in := r.place(info.ID, info.Role == opencode.RoleUser); in != nil {
		in.Role, in.ParentID, in.Finish, in.Time.Completed, in.Error = info.Role, info.ParentID, info.Finish, info.Time.Completed, info.Error
	}
}

// userRole is how a message.updated event of OpenCode says a user message's role, and
// compactionSummary how it marks a compaction summary: keys and values that cannot occur
// inside a JSON string, where quotes are escaped.
var (
	userRole          = []byte(`"role":"user"`)
	compactionSummary = []byte(`"summary":true`)
)

// placed applies a message.updated event that a later frame of the same message supersedes:
// it places the message, with its role, and nothing else. props start with the message id
// (scan.LeadingInfoID).
func (r *runMirror) placed(props []byte) {
	if !r.following() {
		return
	}
	var user bool
	if f, ok := scan.MessageInfo(props); ok {
		user = f.Role == opencode.RoleUser
	} else {
		user = bytes.Contains(props, userRole)
	}
	if in := r.place(string(scan.LeadingInfoID(props)), user); in != nil && in.Role == "" {
		in.Role = opencode.RoleAssistant
		if user {
			in.Role = opencode.RoleUser
		}
	}
}

// place finds message id among the mirrored messages or adds it, and returns its info to
// update; nil when the mirror does not keep it (a message of an earlier run, an older
// assistant message) or gave up.
func (r *runMirror) place(id string, user bool) *opencode.MessageInfo {
	if id <= r.baseline {
		return nil
	}
	i, found := slices.BinarySearchFunc(r.msgs, id, func(m opencode.Message, id string) int { return strings.Compare(m.Info.ID, id) })
	switch {
	case found:
	case i < len(r.msgs): // older than the newest: Decide reads no such assistant message
		if !user {
			return nil
		}
	default: // the newest: an assistant message before it is no longer needed
		if n := len(r.msgs); n > 0 && r.msgs[n-1].Info.Role != opencode.RoleUser {
			r.msgs = r.msgs[:n-1]
			i--
		}
		r.parts = r.parts[:0]
	}
	if !found {
		if len(r.msgs) == maxMirrored || user && slices.ContainsFunc(r.msgs, func(m opencode.Message) bool { return m.Info.Role == opencode.RoleUser }) {
			r.removed() // too long, or a second user message (the run's end is its reply): leave it to a read
			return nil
		}
		r.msgs = slices.Insert(r.msgs, i, opencode.Message{Info: opencode.MessageInfo{ID: id}})
	}
	return &r.msgs[i].Info
}

// partEvent is what the Manager reads of a message.part.updated event's part: what progress
// counts (a tool part's id and tool) and what a mirror keeps; the rest (a tool's input and
// output) is skipped.
type partEvent struct{ scan.PartFacts }

// decodePart reads the part of a message.part.updated event's properties (scan.ReadPart:
// scanned, or else decoded); ok is false when they hold none, or one without an id or type.
func decodePart(props []byte) (p partEvent, ok bool) {
	f, ok := scan.ReadPart(props)
	return partEvent{f}, ok && f.ID != "" && f.Type != ""
}

// final reports whether a part will not change: streamed text and reasoning end with an end
// time, a tool call when it completed or failed; other parts are written once.
func (p *partEvent) final() bool {
	switch p.Type {
	case opencode.PartText, opencode.PartReasoning:
		return p.End != 0
	case opencode.PartTool:
		return p.Status == opencode.ToolCompleted || p.Status == opencode.ToolError
	}
	return true
}

// part applies a message.part.updated event, read by decodePart.
func (r *runMirror) part(p *partEvent, ok bool) {
	if !r.following() {
		return
	}
	if !ok || p.MessageID == "" {
		r.broken = true
		return
	}
	if p.MessageID <= r.baseline {
		return
	}
	n := len(r.msgs)
	if n == 0 || r.msgs[n-1].Info.ID < p.MessageID { // a part of a message not seen
		r.broken = true
		return
	}
	if last := &r.msgs[n-1].Info; last.ID != p.MessageID || last.Role == opencode.RoleUser {
		return // an older message's, or a prompt's: Decide reads neither
	}
	i, found := slices.BinarySearchFunc(r.parts, p.ID, func(q mirroredPart, id string) int { return strings.Compare(q.part.ID, id) })
	if !found {
		r.parts = slices.Insert(r.parts, i, mirroredPart{part: opencode.Part{ID: p.ID, MessageID: p.MessageID, Type: p.Type}})
	}
	mp := &r.parts[i]
	mp.final = p.final()
	if mp.part.Type == opencode.PartText {
		mp.part.Text, mp.part.Ignored = p.Text, p.Ignored
	}
}

// following reports whether the mirror still takes events: it neither lost track of the run
// nor holds its reply.
func (r *runMirror) following() bool { return !r.broken && r.done == nil }

// removed applies message.removed and message.part.removed: the mirror no longer follows.
func (r *runMirror) removed() { r.broken, r.msgs, r.parts = true, nil, nil }

// reply returns the run's messages, oldest first, as a read of them would return what
// Decide reads, when the mirror holds a complete reply; nil otherwise. (Whether the stream
// carried the whole run is the log's to say: runLog.snapshot.) Once it found the reply
// complete, the mirror keeps those messages and follows the run no further: an idle event
// ends the run.
func (r *runMirror) reply() []opencode.Message {
	if r.done != nil || r.broken {
		return r.done
	}
	n := len(r.msgs)
	if n == 0 {
		return nil
	}
	last := r.msgs[n-1].Info
	if last.Role != opencode.RoleAssistant || last.Error != nil || last.Time.Completed == 0 ||
		last.Finish == "" || last.Finish == "tool-calls" || last.Finish == "unknown" {
		return nil
	}
	var parts []opencode.Part
	for _, p := range r.parts {
		if !p.final || p.part.Type == opencode.PartTool { // a step that called a tool goes on, whatever its finish
			return nil
		}
		if p.part.Type == opencode.PartText {
			parts = append(parts, p.part)
		}
	}
	r.done, r.msgs, r.parts = r.msgs, nil, nil
	r.done[n-1].Parts = parts
	return r.done
}
