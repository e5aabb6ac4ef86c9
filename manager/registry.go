package manager

import (
	"slices"
	"strings"
)

// Task ids are OpenCode session ids: "ses_" followed by an id that sorts by creation.
const (
	// SessionPrefix starts every task id.
	SessionPrefix = "ses_"
	// MinPrefix is how many characters after [SessionPrefix] an id prefix needs to resolve.
	MinPrefix = 4
	// MinDisplay is how many characters after [SessionPrefix] a display id shows at least.
	MinDisplay = 8
)

// Registry indexes task ids by parent session. It keeps each parent's tasks in launch
// order and in sorted order, so a display id or a prefix lookup costs O(log n) in the
// parent's task count and an insertion O(n) only in copying (memmove).
//
// The zero value is ready. A Registry is not safe for concurrent use.
type Registry struct {
	parentOf map[string]string
	families map[string]*family
}

type family struct {
	order []string // launch order
	// sorted holds the ids in descending order: OpenCode's session ids sort newest first, so
	// a new task's id goes at the end and adding costs no copy.
	sorted []string
}

// descending orders ids from the largest.
func descending(a, b string) int { return strings.Compare(b, a) }

// Add records id as a task of parent, after the parent's earlier tasks. It reports false,
// changing nothing, when id is already registered.
func (r *Registry) Add(parent, id string) bool {
	if _, ok := r.parentOf[id]; ok {
		return false
	}
	if r.parentOf == nil {
		r.parentOf = map[string]string{}
		r.families = map[string]*family{}
	}
	f := r.families[parent]
	if f == nil {
		f = &family{}
		r.families[parent] = f
	}
	r.parentOf[id] = parent
	f.order = append(f.order, id)
	i, _ := slices.BinarySearchFunc(f.sorted, id, descending)
	f.sorted = slices.Insert(f.sorted, i, id)
	return true
}

// Remove forgets id and reports the parent it had, or false when id is unknown.
func (r *Registry) Remove(id string) (parent string, ok bool) {
	parent, ok = r.parentOf[id]
	if !ok {
		return "", false
	}
	delete(r.parentOf, id)
	f := r.families[parent]
	if i, found := slices.BinarySearchFunc(f.sorted, id, descending); found {
		f.sorted = slices.Delete(f.sorted, i, i+1)
	}
	if i := slices.Index(f.order, id); i >= 0 {
		f.order = slices.Delete(f.order, i, i+1)
	}
	if len(f.order) == 0 {
		delete(r.families, parent)
	}
	return parent, true
}

// Parent returns the parent session of id, or false when id is unknown.
func (r *Registry) Parent(id string) (string, bool) {
	p, ok := r.parentOf[id]
	return p, ok
}

// Tasks returns parent's task ids in launch order. The slice belongs to the Registry: read
// it before the next Add or Remove, and do not modify it.
func (r *Registry) Tasks(parent string) []string {
	if f := r.families[parent]; f != nil {
		return f.order
	}
	return nil
}

// Len returns how many tasks parent has.
func (r *Registry) Len(parent string) int { return len(r.Tasks(parent)) }

// DisplayID returns the shortest prefix of id that is unique among its parent's tasks and
// shows at least [MinDisplay] characters after [SessionPrefix] (the whole id when shorter).
// An unknown id is returned as it is.
func (r *Registry) DisplayID(id string) string {
	parent, ok := r.parentOf[id]
	if !ok {
		return id
	}
	s := r.families[parent].sorted
	i, _ := slices.BinarySearchFunc(s, id, descending)
	n := len(SessionPrefix) + MinDisplay
	if i > 0 {
		n = max(n, commonPrefix(id, s[i-1])+1)
	}
	if i+1 < len(s) {
		n = max(n, commonPrefix(id, s[i+1])+1)
	}
	return id[:min(n, len(id))]
}

// Resolve returns parent's tasks that id names: the task whose id is id, with or without
// [SessionPrefix]; otherwise every task whose id starts with it, when it has at least
// [MinPrefix] characters after the prefix. It returns at most limit ids (all when limit is
// 0 or less), the largest ones when there are more, in ascending order. Other parents' tasks never match.
func (r *Registry) Resolve(parent, id string, limit int) []string {
	key := strings.TrimPrefix(strings.TrimSpace(id), SessionPrefix)
	f := r.families[parent]
	if key == "" || f == nil {
		return nil
	}
	full := SessionPrefix + key
	if p, ok := r.parentOf[full]; ok && p == parent {
		return []string{full}
	}
	if len(key) < MinPrefix {
		return nil
	}
	// The ids starting with full are those from full up to full + "\x7f…" (ids are ASCII):
	// in descending order, a run that begins at the first id not above that bound.
	var out []string
	upper := full + "\x7f"
	i, _ := slices.BinarySearchFunc(f.sorted, upper, descending)
	for ; i < len(f.sorted) && strings.HasPrefix(f.sorted[i], full); i++ {
		if limit > 0 && len(out) == limit {
			break
		}
		out = append(out, f.sorted[i])
	}
	slices.Reverse(out)
	return out
}

func commonPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}
