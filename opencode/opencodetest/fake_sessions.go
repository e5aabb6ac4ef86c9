package opencodetest

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"

	"github.com/asyncagents/asyncagents/opencode"
)

func sessionPath(id, rest string) string { return "/session/" + url.PathEscape(id) + rest }

// session looks up a session for a call; like the real server, an id without the "ses"
// prefix is an unexpected server error and an unknown one is not found. f.mu must be held.
func (f *FakeClient) session(method, path, id string) (*fakeSession, error) {
	if !strings.HasPrefix(id, "ses") {
		return nil, unknownError(method, path)
	}
	s := f.sessions[id]
	if s == nil {
		return nil, notFound(method, path, id)
	}
	return s, nil
}

// CreateSession creates a session in req.Directory (the fake's directory when empty), as
// POST /session does, and emits session.created. A ParentID must start with "ses"
// (otherwise HTTP 400) but need not exist. A directory must be a clean absolute
// slash-separated path (otherwise HTTP 400; the real server accepts more).
func (f *FakeClient) CreateSession(ctx context.Context, req opencode.CreateSessionRequest) (*opencode.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter(ctx, "CreateSession", http.MethodPost, "/session"); err != nil {
		return nil, err
	}
	if req.ParentID != "" && !strings.HasPrefix(req.ParentID, "ses") {
		return nil, apiError(http.MethodPost, "/session", http.StatusBadRequest, map[string]any{"_tag": "BadRequest"})
	}
	dir := cmp.Or(req.Directory, f.cfg.dir)
	if !path.IsAbs(dir) || path.Clean(dir) != dir {
		return nil, badRequest(http.MethodPost, "/session", fmt.Sprintf("directory %q is not a clean absolute path", dir))
	}
	now := f.now()
	title := req.Title
	if title == "" {
		kind := "New session - "
		if req.ParentID != "" {
			kind = "Child session - "
		}
		title = kind + now.UTC().Format("2006-01-02T15:04:05.000Z")
	}
	s := &fakeSession{
		untitled: req.Title == "",
		info: sessionJSON{
			ID:         f.ids.next("ses", true, now),
			Slug:       f.ids.word(slugAdjectives) + "-" + f.ids.word(slugNouns),
			ProjectID:  "global",
			Directory:  dir,
			Path:       strings.TrimPrefix(dir, "/"),
			ParentID:   req.ParentID,
			Title:      title,
			Version:    fakeVersion,
			Tokens:     &tokensJSON{},
			Permission: slices.Clone(req.Permission),
			Time:       sessionTimeJSON{Created: now.UnixMilli(), Updated: now.UnixMilli()},
		},
	}
	f.sessions[s.info.ID] = s
	f.emit(opencode.EventSessionCreated, sessionEvent{SessionID: s.info.ID, Info: s.info})
	return s.session(), nil
}

// ForkSession copies a session's messages into a new session, as POST /session/{id}/fork
// does: those created before req.MessageID (all of them for "" or an id the session does
// not have), with new message and part ids, assistant messages answering the copies of their
// user messages; the new session is in req.Directory (the client's default when empty, not
// the original's), has no parent, the title "<title> (fork #1)" and no usage.
func (f *FakeClient) ForkSession(ctx context.Context, id string, req opencode.ForkSessionRequest) (*opencode.Session, error) {
	messageID := req.MessageID
	path := sessionPath(id, "/fork")
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter(ctx, "ForkSession", http.MethodPost, path); err != nil {
		return nil, err
	}
	src, err := f.session(http.MethodPost, path, id)
	if err != nil {
		return nil, err
	}
	now := f.now()
	s := &fakeSession{info: src.info}
	s.info.ID, s.info.ParentID = f.ids.next("ses", true, now), ""
	s.info.Slug = f.ids.word(slugAdjectives) + "-" + f.ids.word(slugNouns)
	s.info.Title, s.info.Tokens, s.info.Cost = src.info.Title+" (fork #1)", &tokensJSON{}, 0
	s.info.Agent, s.info.Model, s.info.Summary, s.info.Permission = "", nil, nil, nil
	s.info.Time = sessionTimeJSON{Created: now.UnixMilli(), Updated: now.UnixMilli()}
	// A fork stays in the original's directory, whatever the request names, as on the server.
	s.info.Directory = cmp.Or(src.info.Directory, f.cfg.dir)
	s.info.Path = strings.TrimPrefix(s.info.Directory, "/")
	cut := len(src.msgs)
	for i, m := range src.msgs {
		if m.info.ID == messageID {
			cut = i
		}
	}
	ids := map[string]string{}
	for _, m := range src.msgs[:cut] {
		c := &fakeMessage{info: m.info}
		c.info.ID, c.info.SessionID = f.ids.next("msg", false, now), s.info.ID
		ids[m.info.ID] = c.info.ID
		if p, ok := ids[m.info.ParentID]; ok {
			c.info.ParentID = p
		}
		for _, p := range m.parts {
			cp := *p
			cp.ID, cp.SessionID, cp.MessageID = f.ids.next("prt", false, now), s.info.ID, c.info.ID
			c.parts = append(c.parts, &cp)
		}
		s.msgs = append(s.msgs, c)
	}
	f.sessions[s.info.ID] = s
	f.emit(opencode.EventSessionCreated, sessionEvent{SessionID: s.info.ID, Info: s.info})
	return s.session(), nil
}

// GetSession returns a session, as GET /session/{id} does.
func (f *FakeClient) GetSession(ctx context.Context, id string) (*opencode.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	path := sessionPath(id, "")
	if err := f.enter(ctx, "GetSession", http.MethodGet, path); err != nil {
		return nil, err
	}
	s, err := f.session(http.MethodGet, path, id)
	if err != nil {
		return nil, err
	}
	return s.session(), nil
}

// SessionStatus returns the busy and retrying sessions of a directory (the fake's for ""),
// as GET /session/status does.
func (f *FakeClient) SessionStatus(ctx context.Context, directory string) (map[string]opencode.SessionStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter(ctx, "SessionStatus", http.MethodGet, "/session/status"); err != nil {
		return nil, err
	}
	st := map[string]opencode.SessionStatus{}
	directory = cmp.Or(directory, f.cfg.dir)
	for id, s := range f.sessions {
		if s.run != nil && s.info.Directory == directory {
			st[id] = s.run.status
		}
	}
	return st, nil
}

// Agents returns the agents of the real server's default configuration, as GET /agent does,
// for every directory: build and plan (primary), explore and general (subagent), and the
// hidden compaction, summary and title.
func (f *FakeClient) Agents(ctx context.Context, _ string) ([]opencode.Agent, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.enter(ctx, "Agents", http.MethodGet, "/agent"); err != nil {
		return nil, err
	}
	return slices.Clone(fakeAgents), nil
}
