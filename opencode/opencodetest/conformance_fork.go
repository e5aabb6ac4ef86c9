package opencodetest

import (
	"errors"

	"github.com/asyncagents/asyncagents/opencode"
)

// checkFork: ForkSession copies a finished run (user, tool step, text step) into a session of
// its own with no parent: new ids, the same texts, each assistant copy answering the user
// copy; with a message id, only the messages before it; an unknown session is ErrNotFound.
func checkFork(k *checker) {
	s := k.session(opencode.CreateSessionRequest{Title: "conformance fork"})
	if s == nil {
		return
	}
	if _, err := k.c.Prompt(k.ctx, s.ID, opencode.PromptRequest{Parts: text("RUN:echo conformance-fork")}); !k.ok(err, "Prompt") {
		return
	}
	orig := k.messages(s.ID, 0)
	if len(orig) != 3 {
		k.errorf("messages before the fork = %d, want 3", len(orig))
		return
	}
	f, err := k.c.ForkSession(k.ctx, s.ID, opencode.ForkSessionRequest{})
	if !k.ok(err, "ForkSession") {
		return
	}
	if f.ID == s.ID || f.ParentID != "" || f.Directory != s.Directory {
		k.errorf("fork = %+v: want a new session in %s, with no parent", f, s.Directory)
	}
	copies := k.messages(f.ID, 0)
	if len(copies) != len(orig) {
		k.errorf("fork holds %d messages, want %d", len(copies), len(orig))
		return
	}
	for i := range copies {
		c, o := copies[i], orig[i]
		if c.Info.ID == o.Info.ID || c.Info.SessionID != f.ID || c.Info.Role != o.Info.Role || len(c.Parts) != len(o.Parts) {
			k.errorf("copy %d = %+v of %+v: want a new id in the fork, the same role and parts", i, c.Info, o.Info)
		}
		if c.Info.Role == opencode.RoleAssistant && c.Info.ParentID != copies[0].Info.ID {
			k.errorf("copy %d answers %s, want the user message's copy %s", i, c.Info.ParentID, copies[0].Info.ID)
		}
	}
	if copies[0].Parts[0].Text != orig[0].Parts[0].Text {
		k.errorf("copied prompt %q, want %q", copies[0].Parts[0].Text, orig[0].Parts[0].Text)
	}
	if part, err := k.c.ForkSession(k.ctx, s.ID, opencode.ForkSessionRequest{MessageID: orig[2].Info.ID}); k.ok(err, "ForkSession at a message") {
		if n := len(k.messages(part.ID, 0)); n != 2 {
			k.errorf("fork before the third message holds %d messages, want 2", n)
		}
	}
	if _, err := k.c.ForkSession(k.ctx, "ses_conformanceUnknown0000", opencode.ForkSessionRequest{}); !errors.Is(err, opencode.ErrNotFound) {
		k.errorf("ForkSession of an unknown session = %v, want ErrNotFound", err)
	}
}
