package manager

import (
	"slices"
	"strings"
)

// Task ids are a prefix, [TaskPrefix] (or, for tasks recorded by earlier versions, whose ids
// were their OpenCode sessions', [SessionPrefix]), followed by an id that sorts by creation.
const (
	// TaskPrefix starts a task id.
	TaskPrefix = "tsk_"
	// SessionPrefix starts an OpenCode session id, and the id of a task recorded by an
	// earlier version.
	SessionPrefix = "ses_"
	// MinPrefix is how many characters after the prefix an id prefix needs to resolve.
	MinPrefix = 4
	// MinDisplay is how many characters after the prefix a display id shows at least.
	MinDisplay = 8
)

// prefixes are the prefixes of task ids, each as long as the other.
var prefixes = [...]string{TaskPrefix, SessionPrefix}

// Key returns id without space around it and without its prefix, and the prefix it had
// ("" for none).
func Key(id string) (key, prefix string) {
	id = strings.TrimSpace(id)
	for _, p := range prefixes {
		if k, ok := strings.CutPrefix(id, p); ok {
			return k, p
		}
	}
	return id, ""
}

// Candidates returns the full ids id may stand for: itself when it has a prefix, and the
// key after each prefix when it has none.
func Candidates(id string) []string {
	key, prefix := Key(id)
	if key == "" {
		return nil
	}
	if prefix != "" {
		return []string{prefix + key}
	}
	out := make([]string, len(prefixes))
	for i, p := range prefixes {
		out[i] = p + key
	}
	return out
}

// Registry indexes task ids by parent session. It keeps each parent's tasks in launch
// order and in sorted order, so a display id or a prefix lookup costs O(log n) in the
// parent's task count and an insertion O(n) only in copying (memmove).
//
// The zero value is ready. A Registry is not safe for concurrent use.
//
// A Registry may also know foreign ids: the tasks of a parent that others keep (the other
// hosts of a shared store). They are not the parent's tasks ([Registry.Tasks] and
// [Registry.Len] leave them out), but display ids are unique among them too, and
// [Registry.Resolve] resolves to them, so that an id prefix names the same task wherever it
// is resolved.
type Registry struct {
	parentOf  map[string]string
	foreignOf map[string]string
	families  map[string]*family
}

type family struct {
	order []string // launch order
	// sorted holds the ids in descending order: OpenCode's session ids sort newest first, so
	// a new task's id goes at the end and adding costs no copy.
	sorted []string
	// foreign holds the foreign ids, in descending order.
	foreign []string
}

// descending orders ids from the largest.
func descending(a, b string) int { return strings.Compare(b, a) }

// Add records id as a task of parent, after the parent's earlier tasks. It reports false,
// changing nothing, when id is already registered.
func (r *Registry) Add(parent, id string) bool {
	if _, ok := r.parentOf[id]; ok {
		return false
	}
	r.RemoveForeign(id) // here now (first: it may drop an empty family)
	f := r.family(parent)
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
	r.drop(parent, f)
	return parent, true
}

// family returns parent's family, created when it has none.
func (r *Registry) family(parent string) *family {
	if r.parentOf == nil {
		r.parentOf, r.foreignOf, r.families = map[string]string{}, map[string]string{}, map[string]*family{}
	}
	f := r.families[parent]
	if f == nil {
		f = &family{}
		r.families[parent] = f
	}
	return f
}

// drop forgets parent's family when it holds no id.
func (r *Registry) drop(parent string, f *family) {
	if len(f.order) == 0 && len(f.foreign) == 0 {
		delete(r.families, parent)
	}
}

// AddForeign records id as a foreign task of parent, one that others keep; it does nothing
// when id is known, as a task or as a foreign one.
func (r *Registry) AddForeign(parent, id string) {
	f := r.family(parent)
	if _, ok := r.parentOf[id]; ok {
		return
	}
	if _, ok := r.foreignOf[id]; ok {
		return
	}
	r.foreignOf[id] = parent
	i, _ := slices.BinarySearchFunc(f.foreign, id, descending)
	f.foreign = slices.Insert(f.foreign, i, id)
}

// RemoveForeign forgets the foreign id, if known.
func (r *Registry) RemoveForeign(id string) {
	parent, ok := r.foreignOf[id]
	if !ok {
		return
	}
	delete(r.foreignOf, id)
	f := r.families[parent]
	if i, found := slices.BinarySearchFunc(f.foreign, id, descending); found {
		f.foreign = slices.Delete(f.foreign, i, i+1)
	}
	r.drop(parent, f)
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

// neighbours are the ids next to id in sorted (descending), id's own place left out.
func neighbours(sorted []string, id string) (above, below string) {
	i, found := slices.BinarySearchFunc(sorted, id, descending)
	if i > 0 {
		above = sorted[i-1]
	}
	if found {
		i++
	}
	if i < len(sorted) {
		below = sorted[i]
	}
	return above, below
}

// DisplayID returns the shortest prefix of id that is unique among its parent's tasks and
// foreign ids and shows at least [MinDisplay] characters after its prefix (the whole id
// when shorter). An unknown id is returned as it is.
func (r *Registry) DisplayID(id string) string {
	parent, ok := r.parentOf[id]
	if !ok {
		if parent, ok = r.foreignOf[id]; !ok {
			return id
		}
	}
	f := r.families[parent]
	n := len(TaskPrefix) + MinDisplay
	for _, s := range [][]string{f.sorted, f.foreign} {
		above, below := neighbours(s, id)
		n = max(n, commonPrefix(id, above)+1, commonPrefix(id, below)+1)
	}
	return id[:min(n, len(id))]
}

// Resolve returns parent's tasks that id names: the task whose id is id, with or without
// its prefix; otherwise every task whose id starts with it, with or without a prefix, when
// it has at least [MinPrefix] characters after the prefix. It returns at most limit ids (all
// when limit is 0 or less), the largest ones when there are more, in ascending order. Other
// parents' tasks never match.
func (r *Registry) Resolve(parent, id string, limit int) []string {
	key, _ := Key(id)
	f := r.families[parent]
	if key == "" || f == nil {
		return nil
	}
	fulls := Candidates(id)
	for _, full := range fulls {
		if p, ok := r.parentOf[full]; ok && p == parent {
			return []string{full}
		}
		if p, ok := r.foreignOf[full]; ok && p == parent {
			return []string{full}
		}
	}
	if len(key) < MinPrefix {
		return nil
	}
	// The ids starting with full are those from full up to full + "\x7f…" (ids are ASCII):
	// in descending order, a run that begins at the first id not above that bound.
	var out []string
	for _, full := range fulls {
		upper := full + "\x7f"
		for _, s := range [][]string{f.sorted, f.foreign} {
			i, _ := slices.BinarySearchFunc(s, upper, descending)
			for ; i < len(s) && strings.HasPrefix(s[i], full); i++ {
				out = append(out, s[i])
			}
		}
	}
	slices.SortFunc(out, descending)
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	slices.Reverse(out)
	return out
}

// Known reports whether parent has tasks or foreign ids.
func (r *Registry) Known(parent string) bool {
	f := r.families[parent]
	return f != nil && (len(f.order) > 0 || len(f.foreign) > 0)
}

// Foreign reports whether id is a foreign id (see [Registry]).
func (r *Registry) Foreign(id string) bool {
	_, ok := r.foreignOf[id]
	return ok
}

func commonPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}
