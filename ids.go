package asyncagents

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/asyncagents/asyncagents/manager"
)

const (
	sessionPrefix = manager.SessionPrefix // OpenCode's session ids, and the ids of tasks recorded before tasks had their own
	taskPrefix    = manager.TaskPrefix
)

// taskIDRE matches a task id: the Manager's own, or a session id (see Task.ID).
var taskIDRE = regexp.MustCompile(`^(tsk|ses)_[A-Za-z0-9]{1,64}$`)

// lastTaskTime is the time part of the last task id made in this process: ids made in one
// millisecond count up in its low 12 bits, as OpenCode's do.
var lastTaskTime atomic.Uint64

// newTaskID returns a new task id made at now: "tsk_", 12 hex digits that sort the newer
// ids first (as OpenCode's session ids do, which the display ids of manager.Registry count
// on; ids made later in this process always sort before), and 14 random base62 characters.
func newTaskID(now time.Time) string {
	const hex, base62 = "0123456789abcdef", "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	t := uint64(now.UnixMilli()) << 12
	for {
		last := lastTaskTime.Load()
		next := max(t, last+1)
		if lastTaskTime.CompareAndSwap(last, next) {
			t = next
			break
		}
	}
	v := ^t & (1<<48 - 1)
	var id [4 + 12 + 14]byte
	copy(id[:], taskPrefix)
	for i := range 12 {
		id[4+i] = hex[v>>(44-4*i)&15]
	}
	for i := range 14 {
		id[16+i] = base62[rand.N(62)]
	}
	return string(id[:])
}

// maxCandidates is how many matching ids an ErrAmbiguousID message names.
const maxCandidates = 5

// lookup finds the caller's task id: the full id, the id without its prefix ("tsk_"), or a
// unique prefix of at least manager.MinPrefix characters after it.
func (s *taskSet) lookup(caller Caller, id string) (*entry, error) {
	if err := checkCaller(caller); err != nil {
		return nil, err
	}
	key, _ := manager.Key(id)
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
		return nil, fmt.Errorf("%w: %s (an id prefix needs at least %d characters after %s)", ErrTaskNotFound, echo(id), manager.MinPrefix, taskPrefix)
	}
	return nil, fmt.Errorf("%w: %s", ErrTaskNotFound, echo(id))
}
