package manager

import (
	"bytes"
	"strings"
	"time"

	"github.com/asyncagents/asyncagents/opencode"
)

// Run is what a task runner knows about a run besides its session's messages.
type Run struct {
	// Baseline is the id of the session's last message before the run's prompt; only the
	// messages after it belong to the run. Empty when the run started the session.
	Baseline string
	// SessionError is the message of the last session.error event for the session during
	// the run ("" for none).
	SessionError string
	// Idle reports that the session was seen idle: a session.idle or session.status idle
	// event, or its absence from GET /session/status.
	Idle bool
	// Confirmed reports that GET /session/status, asked after the messages were read, did
	// not list the session: its agent loop is not running.
	Confirmed bool
	// Prompt is the id of the run's prompt message, when the runner chose it
	// (PromptRequest.MessageID); "" when unknown. With it Decide can tell a prompt the
	// server never stored ([Unsent]).
	Prompt string
	// ServerStarted is when the OpenCode server that answers now started; zero when
	// unknown. A run whose last step was aborted before then (MessageAbortedError) was cut
	// by an earlier server's stop, not by anyone's abort: Decide makes it [Interrupted].
	ServerStarted time.Time
}

// Outcome says how a run stands.
type Outcome int8

// Outcomes of [Decide].
const (
	Running    Outcome = iota // not decided yet: no reply, or a step is still streaming
	Completed                 // the last assistant message finished without error
	Failed                    // the run ended with an error
	Unfinished                // idle with an unfinished last step: confirm, then decide again
	Unsent                    // confirmed idle and the prompt is not there: send it again
)

// Verdict is what [Decide] concludes.
type Verdict struct {
	Outcome Outcome
	Result  string // Completed: the final reply's text parts joined by "\n"
	Error   string // Failed: the error message
	// Ended is when the run ended, by the server's clock: its last reply's time.completed for
	// Completed and for Failed with the reply's own error, the last reply's last time for
	// [Interrupted]; zero otherwise.
	Ended time.Time
}

// Interrupted is the error of a run whose session is idle while its last step never
// finished, or was aborted before the server that answers now started: a server's stop (it
// quit, restarted or crashed) ended the agent loop mid-step.
const Interrupted = "interrupted: OpenCode stopped before the run finished (it quit, restarted or crashed); resume the task to go on"

// HaltedAfterToolCall is the error of a run whose agent loop stopped after a tool-calls
// step, which OpenCode does when a permission was rejected.
const HaltedAfterToolCall = "the agent loop stopped after a tool call (a permission was rejected)"

// Decide reads the end of a run from the latest messages of its session, oldest first
// (GET /session/{id}/message?limit=N; a handful is enough).
//
//   - The last message of the run is the prompt (no reply yet): Running — an early or
//     duplicate idle is not a completion — unless the session was seen idle after a
//     session.error (an unknown agent or model: no reply will come), then Failed.
//   - With Run.Prompt set, none of the messages is the prompt, a reply to it (parentID) or
//     newer than it: the server has not stored the prompt. Running; when the session was
//     seen idle, Unfinished, and with Run.Confirmed [Unsent]: the prompt was lost on its
//     way (or OpenCode accepted it and dropped it) and may be sent again. A session.error
//     seen with the idle makes it Failed instead, as above.
//   - The last assistant message has an error (a model error, or MessageAbortedError
//     after an abort): Failed with its message; an abort before Run.ServerStarted is
//     [Interrupted], ended at the message's last time.
//   - It has no finish or no completion time: Running while the step streams. When the
//     session was seen idle, Unfinished: the caller confirms with GET /session/status
//     that the loop is not running, reads the messages again and decides with
//     Run.Confirmed, which makes a step still unfinished Failed with [Interrupted], ended at
//     the message's last time (not when the server came back).
//   - It finished as OpenCode's loop does not stop at — with "tool-calls" or "unknown" (a
//     stream cut without a finish), or with a tool part whatever its finish (a provider may
//     say "stop" for a step that called a tool): Running while the loop goes on to the next
//     step; when the session was seen idle, Unfinished, and with Run.Confirmed Failed with
//     [HaltedAfterToolCall]: the loop halted. A compaction summary is not an end either (the
//     loop goes on with "Continue…"): Unfinished when idle, and with Run.Confirmed Failed with
//     [Interrupted]. Nor is a step that does not answer the newest user message (its
//     parentID): one stored after the step was set up (a steer, a message posted into the
//     session), which OpenCode's loop answers in one more step.
//   - Otherwise Completed, with its text parts (ignored parts left out) as the result — once
//     the session was seen idle or Run.Confirmed: a read that no idle asked for (after a
//     reconnect) may fall between two steps, and is Unfinished, to be confirmed.
func Decide(msgs []opencode.Message, run Run) Verdict {
	if run.Prompt != "" && !promptStored(msgs, run.Prompt) {
		if run.SessionError != "" && run.Idle {
			return Verdict{Outcome: Failed, Error: run.SessionError}
		}
		return onIdle(run, Verdict{Outcome: Unsent})
	}
	msgs = afterBaseline(msgs, run.Baseline)
	if len(msgs) == 0 || msgs[len(msgs)-1].Info.Role != opencode.RoleAssistant {
		if run.SessionError != "" && run.Idle {
			return Verdict{Outcome: Failed, Error: run.SessionError}
		}
		return Verdict{}
	}
	last := &msgs[len(msgs)-1]
	switch {
	case last.Info.Error != nil && last.Info.Error.Name == "MessageAbortedError" && lastActivity(last).Before(run.ServerStarted):
		return Verdict{Outcome: Failed, Error: Interrupted, Ended: lastActivity(last)}
	case last.Info.Error != nil:
		return Verdict{Outcome: Failed, Error: last.Info.Error.Message(), Ended: completedAt(last)}
	case last.Info.Time.Completed == 0 || last.Info.Finish == "":
		return onIdle(run, Verdict{Outcome: Failed, Error: Interrupted, Ended: lastActivity(last)})
	case !final(last): // OpenCode's loop goes on after such a step: an idle now would be stale
		return onIdle(run, Verdict{Outcome: Failed, Error: HaltedAfterToolCall})
	case last.Info.IsSummary(): // a compaction in the middle of the run: "Continue…" comes next
		return onIdle(run, Verdict{Outcome: Failed, Error: Interrupted})
	case !answersNewestUser(msgs, last): // OpenCode's loop ends only on a reply to its newest user message
		return onIdle(run, Verdict{Outcome: Failed, Error: Interrupted})
	case !run.Idle && !run.Confirmed:
		// A read nothing idle asked for (after a reconnect) may fall between two steps of a
		// step OpenCode would take for final: confirm the loop is not running first.
		return Verdict{Outcome: Unfinished}
	}
	return Verdict{Outcome: Completed, Result: replyText(last), Ended: completedAt(last)}
}

// answersNewestUser reports whether assistant message last answers the newest user message
// of msgs, as OpenCode 1.18.33's loop requires before it stops (its newest assistant
// message's parentID is its newest user message's id); true when msgs hold no user message
// (a long run's prompt is older than the messages read) or last names no parent.
func answersNewestUser(msgs []opencode.Message, last *opencode.Message) bool {
	for i := len(msgs) - 1; i >= 0; i-- {
		if in := &msgs[i].Info; in.Role == opencode.RoleUser {
			return last.Info.ParentID == "" || last.Info.ParentID == in.ID
		}
	}
	return true
}

// completedAt returns when message m was completed, or the zero time.
func completedAt(m *opencode.Message) time.Time {
	if m.Info.Time.Completed == 0 {
		return time.Time{}
	}
	return time.UnixMilli(m.Info.Time.Completed)
}

// lastActivity is the last time m shows: its completion, else its creation; zero when it
// shows none.
func lastActivity(m *opencode.Message) time.Time {
	if ms := max(m.Info.Time.Completed, m.Info.Time.Created); ms > 0 {
		return time.UnixMilli(ms)
	}
	return time.Time{}
}

// final reports whether a finished step ends the run as OpenCode's loop decides it: a finish
// other than "tool-calls" and "unknown" (a stream cut without one), and no tool part but an
// interrupted one (a step that called a tool goes on whatever its finish: a provider may say
// "stop" or "length" for it).
func final(m *opencode.Message) bool {
	if m.Info.Finish == "tool-calls" || m.Info.Finish == "unknown" {
		return false
	}
	for i := range m.Parts {
		if p := &m.Parts[i]; p.Type == opencode.PartTool && !interrupted(p) {
			return false
		}
	}
	return true
}

// interrupted reports whether tool part p failed because its step was cut short (OpenCode
// marks it with metadata.interrupted).
func interrupted(p *opencode.Part) bool {
	return p.State != nil && p.State.Status == opencode.ToolError && bytes.Contains(p.State.Metadata, []byte(`"interrupted":true`))
}

// onIdle is the verdict on a run that has not ended by the look of its messages: Running while
// the session was not seen idle, Unfinished when it was, and final once that was confirmed.
func onIdle(run Run, final Verdict) Verdict {
	switch {
	case run.Idle && run.Confirmed:
		return final
	case run.Idle:
		return Verdict{Outcome: Unfinished}
	}
	return Verdict{}
}

// afterBaseline returns the messages after the one with id baseline (all of them when it is
// empty or not among them).
func afterBaseline(msgs []opencode.Message, baseline string) []opencode.Message {
	if baseline == "" {
		return msgs
	}
	start := 0
	for i := range msgs {
		if msgs[i].Info.ID == baseline {
			start = i + 1
		}
	}
	return msgs[start:]
}

// replyText joins the text parts of a reply that the model sees (ignored ones left out).
func replyText(m *opencode.Message) string {
	var texts []string
	for _, p := range m.Parts {
		if p.Type == opencode.PartText && !p.Ignored {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, "\n")
}

// promptStored reports whether msgs, the newest messages of a session, show that the
// session has the prompt with id prompt: the prompt itself, a reply to it, or a newer user
// message or reply to one (the prompt is then older than the messages read, or something
// else was sent after it). A reply to an older message is no proof, however new its id: the
// prompt's id was chosen by its sender, and a step the server started after that may end
// before the prompt lands (a steer on its way when the run ends). Message ids of one server
// sort in creation order.
func promptStored(msgs []opencode.Message, prompt string) bool {
	for i := range msgs {
		in := &msgs[i].Info
		if in.ID == prompt || in.ParentID == prompt ||
			in.ID > prompt && (in.Role == opencode.RoleUser || in.ParentID > prompt) {
			return true
		}
	}
	return false
}
