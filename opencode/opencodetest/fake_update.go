package opencodetest

import (
	"context"
	"net/http"

	"github.com/asyncagents/asyncagents/opencode"
)

// The fake's session changes: PATCH and DELETE /session/{id}.

// UpdateSession appends req's permission rules to the session's, as PATCH /session/{id}
// does on OpenCode 1.18.33 (rules are added, never taken away), and returns the session.
func (f *FakeClient) UpdateSession(ctx context.Context, id string, req opencode.UpdateSessionRequest) (*opencode.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	path := sessionPath(id, "")
	if err := f.enter(ctx, "UpdateSession", http.MethodPatch, path); err != nil {
		return nil, err
	}
	s, err := f.session(http.MethodPatch, path, id)
	if err != nil {
		return nil, err
	}
	s.info.Permission = append(s.info.Permission, req.Permission...)
	return s.session(), nil
}

// DeleteSession deletes a session and its children, as DELETE /session/{id} does, with a
// session.deleted event for each. Like OpenCode 1.18.33 it does not stop a busy session's run:
// Abort first.
func (f *FakeClient) DeleteSession(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	path := sessionPath(id, "")
	if err := f.enter(ctx, "DeleteSession", http.MethodDelete, path); err != nil {
		return err
	}
	s, err := f.session(http.MethodDelete, path, id)
	if err != nil {
		return err
	}
	f.deleteLocked(s)
	return nil
}

// deleteLocked deletes s and, first, its children.
func (f *FakeClient) deleteLocked(s *fakeSession) {
	for _, c := range f.sessions {
		if c.info.ParentID == s.info.ID {
			f.deleteLocked(c)
		}
	}
	delete(f.sessions, s.info.ID)
	f.emit(opencode.EventSessionDeleted, sessionEvent{SessionID: s.info.ID, Info: s.info})
}

// SessionCount returns how many sessions the fake has.
func (f *FakeClient) SessionCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.sessions)
}
