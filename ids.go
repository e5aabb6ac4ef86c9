package asyncagents

import (
	"fmt"
	"strings"

	"github.com/asyncagents/asyncagents/manager"
)

// maxCandidates is how many matching ids an ErrAmbiguousID message names.
const maxCandidates = 5

// lookup finds the caller's task id: the full id, the id without "ses_", or a unique prefix
// of at least manager.MinPrefix characters after it.
func (s *taskSet) lookup(caller Caller, id string) (*entry, error) {
	if err := checkCaller(caller); err != nil {
		return nil, err
	}
	key := strings.TrimPrefix(strings.TrimSpace(id), manager.SessionPrefix)
	if key == "" {
		return nil, fmt.Errorf("%w: task id is required", ErrInvalidInput)
	}
	if s.closed {
		return nil, ErrClosed
	}
	ids := s.reg.Resolve(caller.SessionID, id, maxCandidates+1)
	if len(ids) == 1 {
		if e := s.byID[ids[0]]; e != nil {
			return e, nil
		}
		return nil, fmt.Errorf("%w: %s is held by another host", ErrTaskNotFound, ids[0]) // hosts.pull takes it over
	}
	switch {
	case len(ids) > 1:
		more := ""
		if len(ids) > maxCandidates {
			ids, more = ids[:maxCandidates], ", …"
		}
		return nil, fmt.Errorf("%w: %s matches %s%s; give more of the id", ErrAmbiguousID, echo(id), strings.Join(ids, ", "), more)
	case len(key) < manager.MinPrefix:
		return nil, fmt.Errorf("%w: %s (an id prefix needs at least %d characters after %s)", ErrTaskNotFound, echo(id), manager.MinPrefix, manager.SessionPrefix)
	}
	return nil, fmt.Errorf("%w: %s", ErrTaskNotFound, echo(id))
}
