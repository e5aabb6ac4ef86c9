package mcpserver

import (
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// sessionIDHeader is the header of the streamable HTTP transport that names the MCP session.
const sessionIDHeader = "Mcp-Session-Id"

// sessions bounds the MCP sessions of a Server: at most max at once. The MCP SDK keeps the
// sessions and closes the idle ones after the session timeout; sessions only counts them,
// notes which have requests in progress and when each was last used, and makes room for a
// new one by closing the one idle longest. Safe for concurrent use.
type sessions struct {
	mcp *mcp.Server
	max int
	now func() time.Time
	// closeSession closes an evicted session. It runs on a goroutine of its own: closing
	// waits for the session's handlers, and a handler whose client went away may run on.
	closeSession func(*mcp.ServerSession)

	mu       sync.Mutex
	known    map[string]*sessionUse // by session id: sessions created through admit
	reserved int                    // new sessions being created
}

// sessionUse is what sessions knows of one session.
type sessionUse struct {
	active int       // requests in progress
	last   time.Time // when the last request began or ended
}

// admit makes room for a new session. It reports false when the sessions are at the limit
// and every one has a request in progress; otherwise the caller creates the session and
// then calls done with its id ("" when none was created).
func (s *sessions) admit() (done func(id string), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	live := map[string]*mcp.ServerSession{}
	for ss := range s.mcp.Sessions() {
		live[ss.ID()] = ss
	}
	for id := range s.known {
		if live[id] == nil { // closed: timed out, deleted by its client, or evicted
			delete(s.known, id)
		}
	}
	if len(s.known)+s.reserved >= s.max {
		victim := ""
		for id, u := range s.known {
			if u.active == 0 && (victim == "" || u.last.Before(s.known[victim].last)) {
				victim = id
			}
		}
		if victim == "" {
			return nil, false
		}
		delete(s.known, victim)
		s.closeSession(live[victim])
	}
	s.reserved++
	return func(id string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.reserved--
		if id != "" {
			s.known[id] = &sessionUse{last: s.now()}
		}
	}, true
}

// use notes a request of session id in progress until the returned function is called.
func (s *sessions) use(id string) (done func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.known[id]
	if u == nil { // unknown or closed: the SDK answers 404
		return func() {}
	}
	u.active++
	u.last = s.now()
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		u.active--
		u.last = s.now()
	}
}
