package asyncagents

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/sync/errgroup"

	"github.com/asyncagents/asyncagents/opencode"
)

// The records a Manager reads from its store are input, not code: a store that other hosts
// share (a LeaseStore) is written by every one of them, and anyone who can write its database
// could write a row. A record is checked before the Manager acts on it:
//
//   - its shape (checkRecord): ids of OpenCode's shape, a known status, the sizes a Manager
//     keeps, notifications of the task itself;
//   - with a record key ([WithRecordKey]), its seal: an HMAC-SHA256 that the Manager computes
//     over the rest of the record whenever it saves one, so that a row no host with the key
//     wrote is refused;
//   - with a LeaseStore, before the Manager acts on a task it claimed (sends a prompt, posts a
//     notification into the parent, aborts): its session, on the server (GET /session/{id}),
//     must be the task's — a child of the task's parent titled as the Manager titles tasks,
//     or, for a native fork, a copy without a parent — in the task's directory.
//
// A record that fails is not taken in: it is logged and left as it is.

// maxStoredNotes bounds the notifications of one stored record, and maxNoteChars each text
// of one.
const (
	maxStoredNotes = 64
	maxNoteChars   = 16 << 10
)

var messageIDRE = regexp.MustCompile(`^msg_[A-Za-z0-9]{1,64}$`)

// checkRecord returns what is wrong with t, a record read from a store, or nil.
func checkRecord(t *Task) error {
	var errs []error
	bad := func(cond bool, format string, args ...any) {
		if cond {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	bad(!taskIDRE.MatchString(t.ID), "id %s is not a task id", echo(t.ID))
	bad(t.SessionID != "" && !sessionIDRE.MatchString(t.SessionID), "session %s is not a session id", echo(t.SessionID))
	bad(!sessionIDRE.MatchString(t.ParentSessionID), "parent %s is not a session id", echo(t.ParentSessionID))
	bad(t.AnchorSessionID != "" && !sessionIDRE.MatchString(t.AnchorSessionID), "anchor %s is not a session id", echo(t.AnchorSessionID))
	bad(t.SessionID == t.ParentSessionID || t.ID == t.ParentSessionID, "the task is its own parent")
	bad(strings.HasPrefix(t.ID, sessionPrefix) && t.SessionID != "" && t.SessionID != t.ID, "id %s names another session than its session %s", echo(t.ID), echo(t.SessionID))
	bad(!t.Status.valid(), "status %s", echo(string(t.Status)))
	bad(checkText("agent", t.Agent, maxAgentName, true) != nil, "agent %s", echo(t.Agent))
	bad(utf8.RuneCountInString(t.Description) > MaxDescriptionChars || strings.ContainsAny(t.Description, "\r\n"), "description of %d characters", utf8.RuneCountInString(t.Description))
	bad(utf8.RuneCountInString(t.Prompt) > MaxPromptChars, "prompt of %d characters", utf8.RuneCountInString(t.Prompt))
	bad(utf8.RuneCountInString(t.Result) > MaxResultChars+100, "result of %d characters", utf8.RuneCountInString(t.Result))
	bad(utf8.RuneCountInString(t.Error) > MaxErrorChars+100, "error of %d characters", utf8.RuneCountInString(t.Error))
	bad(t.PromptID != "" && !messageIDRE.MatchString(t.PromptID), "prompt id %s", echo(t.PromptID))
	bad(!checkLaunchKey(t.LaunchKey), "launch key %s", echo(t.LaunchKey))
	bad(t.Depth < 0 || t.Depth > MaxNestingDepth, "depth %d", t.Depth)
	bad(len(t.FollowUps) > MaxFollowUps, "%d follow-ups", len(t.FollowUps))
	for _, f := range t.FollowUps {
		bad(utf8.RuneCountInString(f) > MaxPromptChars, "a follow-up of %d characters", utf8.RuneCountInString(f))
	}
	if _, err := parseModel(t.Model); err != nil {
		errs = append(errs, err)
	}
	bad(len(t.Notifications) > maxStoredNotes, "%d notifications", len(t.Notifications))
	for _, n := range t.Notifications {
		bad(!strings.HasPrefix(n.Key, t.ID+"/"), "a notification of another task (%s)", echo(n.Key))
		bad(len(n.Visible) > maxNoteChars || len(n.Hidden) > maxNoteChars, "a notification of %d bytes", len(n.Visible)+len(n.Hidden))
		bad(n.MessageID != "" && !messageIDRE.MatchString(n.MessageID), "notification message id %s", echo(n.MessageID))
		bad(n.TurnID != "" && !messageIDRE.MatchString(n.TurnID), "turn message id %s", echo(n.TurnID))
	}
	if w := t.Worktree; w != nil {
		errs = append(errs, w.check())
	}
	return errors.Join(errs...)
}

// seal returns the seal of t with key: the hex HMAC-SHA256 of t's JSON form with Seal empty.
func seal(t Task, key []byte) string {
	t.Seal, t.DisplayID, t.QueuePosition = "", "", 0
	b, _ := json.Marshal(t)
	mac := hmac.New(sha256.New, key)
	mac.Write(b)
	return hex.EncodeToString(mac.Sum(nil))
}

// checkSeal returns an error when key is set (the Manager's record key) and t's seal is not
// the one it gives.
func checkSeal(t *Task, key []byte) error {
	if key == nil {
		return nil
	}
	if want := seal(*t, key); !hmac.Equal([]byte(t.Seal), []byte(want)) {
		return errors.New("its seal is not the record key's: no host with the key wrote it")
	}
	return nil
}

// acceptRecords returns the records of stored that the Manager may act on, and logs the
// others (see above). With check, the sessions of the tasks it would act on are checked on
// the server, up to 16 at once.
func (m *Manager) acceptRecords(ctx context.Context, stored []Task, check bool) []Task {
	ok := make([]bool, len(stored))
	var g errgroup.Group
	g.SetLimit(16)
	for i := range stored {
		t := &stored[i]
		if err := errors.Join(checkRecord(t), checkSeal(t, m.cfg.recordKey)); err != nil {
			m.cfg.logger.Error("asyncagents: a stored task record was refused", "task", echo(t.ID), "err", err)
			continue
		}
		t.upgrade()
		if !check || !actsOn(t) {
			ok[i] = true
			continue
		}
		g.Go(func() error {
			if err := checkSession(ctx, m.client, m.cfg.requestTimeout, t); err != nil {
				m.cfg.logger.Error("asyncagents: a stored task record was refused", "task", t.ID, "err", err)
				return nil
			}
			ok[i] = true
			return nil
		})
	}
	g.Wait()
	var out []Task
	for i, t := range stored {
		if ok[i] {
			out = append(out, t)
		}
	}
	return out
}

// actsOn reports whether the Manager would act on the server for t, taken in: send its
// prompt, read or abort its run, post its notifications or send its follow-ups.
func actsOn(t *Task) bool {
	if !t.Status.Terminal() || len(t.FollowUps) > 0 {
		return true
	}
	for _, n := range t.Notifications {
		if n.State == NotificationPending || n.Turn == TurnOwed {
			return true
		}
	}
	return false
}

// checkSession returns an error unless the server's session t.SessionID is t's: in t's directory,
// and a child of t's parent titled "Background…", or, for a native fork, a session without a
// parent titled as OpenCode titles a fork. A task that has no session yet (a start a stopped
// host left undone) must name a parent session in its directory and, when it names one, a
// message of that parent (GET /session/{id}/message/{messageID}).
func checkSession(ctx context.Context, client opencode.Client, timeout time.Duration, t *Task) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if t.SessionID == "" {
		p, err := client.GetSession(ctx, t.ParentSessionID)
		if err != nil {
			return fmt.Errorf("its parent session: %w", err)
		}
		if t.Directory != "" && p.Directory != t.Directory {
			return fmt.Errorf("its parent session is in %s, not in %s", echo(p.Directory), echo(t.Directory))
		}
		if t.ParentMessageID != "" {
			if _, err := client.Message(ctx, t.ParentSessionID, t.ParentMessageID); err != nil {
				return fmt.Errorf("its launching message: %w", err)
			}
		}
		return nil
	}
	s, err := client.GetSession(ctx, t.SessionID)
	if err != nil {
		return fmt.Errorf("its session: %w", err)
	}
	return sessionIs(s, t)
}

// sessionIs returns an error unless s can be t's session.
func sessionIs(s *opencode.Session, t *Task) error {
	if t.Directory != "" && s.Directory != t.Directory {
		return fmt.Errorf("its session is in %s, not in %s", echo(s.Directory), echo(t.Directory))
	}
	if t.ForkMode == ForkNative {
		if s.ParentID != "" || !strings.Contains(s.Title, "(fork #") {
			return errors.New("its session is not a fork")
		}
		return nil
	}
	if s.ParentID != t.ParentSessionID {
		return fmt.Errorf("its session is not a child of %s", t.ParentSessionID)
	}
	if !strings.HasPrefix(s.Title, "Background") {
		return errors.New("its session is not titled as a task's")
	}
	return nil
}
