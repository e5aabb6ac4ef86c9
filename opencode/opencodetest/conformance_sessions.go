package opencodetest

import (
	"errors"
	"regexp"
	"slices"
	"strings"

	"github.com/asyncagents/asyncagents/opencode"
)

const unknownSession = "ses_zzzzzzzzzzzzzzzzzzzzzzzzzz"

var sessionIDShape = regexp.MustCompile(`^ses_[0-9a-f]{12}[0-9A-Za-z]{14}$`)

// checkSessions: created sessions have OpenCode's id shape (a newer one sorts first), the
// project directory, a version and times; GetSession finds them; an untitled session gets
// the default title; child sessions keep their parent and permission rules; an unknown id is
// a 404 NotFoundError for every call that names it.
func checkSessions(k *checker) {
	a := k.session(opencode.CreateSessionRequest{Title: "conformance a"})
	b := k.session(opencode.CreateSessionRequest{Title: "conformance b"})
	if a == nil || b == nil {
		return
	}
	checkCreatedSessions(k, a, b)
	if got, err := k.c.GetSession(k.ctx, a.ID); k.ok(err, "GetSession") && (got.ID != a.ID || got.Title != "conformance a" || got.Directory != k.h.Directory) {
		k.errorf("GetSession = %+v, want %+v", got, a)
	}
	if s := k.session(opencode.CreateSessionRequest{}); s != nil && !strings.HasPrefix(s.Title, "New session - ") {
		k.errorf("untitled session title %q, want \"New session - <time>\"", s.Title)
	}
	checkChildSessions(k, a)
	checkUnknownSession(k)
}

// checkCreatedSessions checks two sessions created one after the other, a then b.
func checkCreatedSessions(k *checker, a, b *opencode.Session) {
	for _, s := range []*opencode.Session{a, b} {
		if !sessionIDShape.MatchString(s.ID) {
			k.errorf("session id %q, want ses_ + 12 hex digits + 14 base62 characters", s.ID)
		}
		if s.Directory != k.h.Directory || s.Version == "" || s.Time.Created <= 0 || s.Time.Updated < s.Time.Created || s.ParentID != "" {
			k.errorf("created session = %+v, want directory %s, a version and times", s, k.h.Directory)
		}
	}
	if !(b.ID < a.ID) {
		k.errorf("session ids %s then %s: a newer session must sort first", a.ID, b.ID)
	}
}

// checkChildSessions: a child of parent keeps its parent, directory, title and permission
// rules, also as GetSession reads it; an untitled child gets the default child title; a
// parent id that is not a session id is HTTP 400.
func checkChildSessions(k *checker, parent *opencode.Session) {
	rules := []opencode.PermissionRule{{Permission: "asyncagents_*", Pattern: "*", Action: "deny"}}
	child := k.session(opencode.CreateSessionRequest{ParentID: parent.ID, Title: "conformance child", Permission: rules})
	if child != nil {
		got, err := k.c.GetSession(k.ctx, child.ID)
		for _, s := range []*opencode.Session{child, got} {
			if err == nil && (s.ParentID != parent.ID || s.Directory != k.h.Directory || s.Title != "conformance child" || !slices.Equal(s.Permission, rules)) {
				k.errorf("child session = %+v, want parent %s and the permission rules", s, parent.ID)
			}
		}
		k.ok(err, "GetSession(child)")
	}
	if s := k.session(opencode.CreateSessionRequest{ParentID: parent.ID}); s != nil && !strings.HasPrefix(s.Title, "Child session - ") {
		k.errorf("untitled child title %q, want \"Child session - <time>\"", s.Title)
	}
	if _, err := k.c.CreateSession(k.ctx, opencode.CreateSessionRequest{ParentID: "bogus"}); !isAPIError(err, 400) {
		k.errorf("CreateSession(parent \"bogus\") = %v, want HTTP 400", err)
	}
}

// checkUnknownSession: GetSession of an unknown id is a 404 NotFoundError naming it, and
// Messages, PromptAsync and Prompt of it match ErrNotFound.
func checkUnknownSession(k *checker) {
	_, err := k.c.GetSession(k.ctx, unknownSession)
	var ae *opencode.APIError
	if !errors.Is(err, opencode.ErrNotFound) || !errors.As(err, &ae) || ae.StatusCode != 404 || ae.Name != "NotFoundError" ||
		ae.Message != "Session not found: "+unknownSession {
		k.errorf("GetSession(unknown) = %v, want a 404 NotFoundError", err)
	}
	if _, err := k.c.Messages(k.ctx, unknownSession, 0); !errors.Is(err, opencode.ErrNotFound) {
		k.errorf("Messages(unknown) = %v, want ErrNotFound", err)
	}
	if err := k.c.PromptAsync(k.ctx, unknownSession, opencode.PromptRequest{Parts: text("x")}); !errors.Is(err, opencode.ErrNotFound) {
		k.errorf("PromptAsync(unknown) = %v, want ErrNotFound", err)
	}
	if _, err := k.c.Prompt(k.ctx, unknownSession, opencode.PromptRequest{Parts: text("x")}); !errors.Is(err, opencode.ErrNotFound) {
		k.errorf("Prompt(unknown) = %v, want ErrNotFound", err)
	}
}
