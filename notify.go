package asyncagents

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"time"

	"github.com/asyncagents/asyncagents/opencode"
)

// NotificationState is where a parent notification stands.
type NotificationState string

// Notification states.
const (
	NotificationPending   NotificationState = "pending"   // waiting for delivery, or retried
	NotificationDelivered NotificationState = "delivered" // the parent session has it
	NotificationFailed    NotificationState = "failed"    // given up; Error says why
)

// Notification is what a task's parent session receives when a run of the task ends: a
// visible text part and a synthetic hint for the parent's model, in a user message (how it
// asks for the parent's turn is the [NotifyPolicy]). A prompt ([NotifyPerRun]) is a message
// of its own. Posted without reply, a parent's notifications that are due together share a
// message, up to 128 of them and 64 KiB of text, each its visible part followed by its hint:
// a burst of run ends costs a request per message, not per run end. Notifications are part
// of the task's record, so a notification still pending when the Manager closes or the host
// crashes is delivered by the next Manager on the same [Store].
//
// Each is posted with a message id chosen by the Manager once (MessageID, newer than the
// parent's last message), and part ids made from it. Before a retry the Manager asks the
// server for that message (GET /session/{parent}/message/{id}): when an earlier attempt
// landed although its answer was lost, it is not posted again; otherwise it is posted again
// under the same ids, which OpenCode stores in place of the earlier post should that one
// still land. The parent never gets a notification twice, on any host.
type Notification struct {
	// Key names the run end: "<task id>/<resume count>/<status>".
	Key     string            `json:"key"`
	State   NotificationState `json:"state"`
	Visible string            `json:"visible"` // the visible part
	Hidden  string            `json:"hidden"`  // the synthetic hint
	// MessageID is the id of the parent's message that carries the notification (and the
	// others merged into it), set before it is first posted.
	MessageID string    `json:"messageID,omitempty"`
	Attempts  int       `json:"attempts,omitempty"` // delivery attempts so far, and failed ones at its turn prompt
	Created   time.Time `json:"created"`            // when the run ended
	Next      time.Time `json:"next,omitzero"`      // the next attempt, while pending
	Delivered time.Time `json:"delivered,omitzero"` // when the parent got it
	Error     string    `json:"error,omitempty"`    // the last failure
	// Turn is where the parent's turn for a notification posted without reply stands
	// ([NotifyPerWave]); "" when none is owed (the notification was its own prompt, or the
	// policy is [NotifyNoReply]).
	Turn TurnState `json:"turn,omitempty"`
	// TurnID is the id of the prompt that asks the parent for the turn that covers this
	// notification, set before that prompt is first posted.
	TurnID string `json:"turnID,omitempty"`
}

// TurnState is where the parent's turn for a delivered notification stands.
type TurnState string

// Turn states.
const (
	TurnOwed  TurnState = "owed"  // no turn of the parent has seen it yet
	TurnAsked TurnState = "asked" // a prompt (TurnID) asked the parent for a turn after it
	TurnSeen  TurnState = "seen"  // a turn of the parent saw it without being asked
	// TurnRetrieved: the host read the task's result ([Manager.Output]) before a turn was
	// asked for it, so none is.
	TurnRetrieved TurnState = "retrieved"
)

// NotifyPolicy is how a parent's notifications ask for its model's turn. OpenCode runs the
// parent's model for a prompt (POST /session/{id}/prompt_async), not for a message posted
// with noReply (POST /session/{id}/message), and each turn sends the parent's whole context
// to the model again: a policy trades turns for how soon the model hears of a run end.
type NotifyPolicy int

// Notification policies.
const (
	// NotifyPerWave posts each notification with noReply the moment its run ends (the parent
	// shows it at once; those due together share a message), then asks for one turn for all the notifications its model has not
	// seen: when the parent has no active task left, or when no run of its ended for the wave
	// window ([WithWaveWindow]) and at most 5 windows after the first unseen one. The turn is
	// a short prompt naming the tasks that ended since the parent's last turn and those still
	// running. When a turn of the parent saw them anyway (the parent was busy: OpenCode
	// answers what was posted during a turn in one more step of it), no prompt is posted.
	NotifyPerWave NotifyPolicy = iota
	// NotifyPerRun posts each notification as a prompt: one parent turn per run end.
	NotifyPerRun
	// NotifyNoReply posts each notification with noReply (those due together share a
	// message) and never asks for a turn; the
	// parent's model reads them at its next turn, whatever starts it.
	NotifyNoReply
)

var policyNames = [...]string{NotifyPerWave: "wave", NotifyPerRun: "run", NotifyNoReply: "none"}

// String returns "wave", "run" or "none".
func (p NotifyPolicy) String() string {
	if p < 0 || int(p) >= len(policyNames) {
		return "NotifyPolicy(" + strconv.Itoa(int(p)) + ")"
	}
	return policyNames[p]
}

// MarshalText returns the policy's name (String).
func (p NotifyPolicy) MarshalText() ([]byte, error) {
	if p < 0 || int(p) >= len(policyNames) {
		return nil, fmt.Errorf("%w: notification policy %d", ErrInvalidInput, int(p))
	}
	return []byte(policyNames[p]), nil
}

// UnmarshalText sets p from a name: "wave", "run" or "none"; any other is an error matching
// [ErrInvalidInput], and p is unchanged.
func (p *NotifyPolicy) UnmarshalText(b []byte) error {
	for i, n := range policyNames {
		if string(b) == n {
			*p = NotifyPolicy(i)
			return nil
		}
	}
	return fmt.Errorf("%w: notification policy %s: want wave, run or none", ErrInvalidInput, echo(string(b)))
}

// noteLocked returns the notification key of e, or nil.
func noteLocked(e *entry, key string) *Notification {
	for i := range e.task.Notifications {
		if e.task.Notifications[i].Key == key {
			return &e.task.Notifications[i]
		}
	}
	return nil
}

// notePartIDs returns the ids of the visible part and the hint of note in message id: the
// same for every attempt (made from the run end's time and key, which never change), and in
// the order the run ends were, visible part first.
func notePartIDs(id string, note *Notification) (visible, hidden string) {
	h := fnv.New32a()
	h.Write([]byte(note.Key))
	name := fmt.Sprintf("%016x%08x", uint64(note.Created.UnixNano()), h.Sum32())
	return opencode.PartID(id, name+"a"), opencode.PartID(id, name+"b")
}
