package storetest_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/storetest"
)

func TestMain(m *testing.M) { testmain.Run(m) }

// memoryStores returns a factory of MemoryStores that gives the same store for the same
// key, which is how a store that does not persist is reopened.
func memoryStores() func(key string) (asyncagents.Store, error) {
	var mu sync.Mutex
	stores := map[string]*asyncagents.MemoryStore{}
	return func(key string) (asyncagents.Store, error) {
		mu.Lock()
		defer mu.Unlock()
		if stores[key] == nil {
			stores[key] = &asyncagents.MemoryStore{}
		}
		return stores[key], nil
	}
}

func TestMemoryStore(t *testing.T) {
	newStore := memoryStores()
	storetest.Run(t, func(t *testing.T, key string) asyncagents.Store {
		s, err := newStore(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestTestStoreMemoryStore(t *testing.T) {
	if err := storetest.TestStore(t.Context(), memoryStores()); err != nil {
		t.Error(err)
	}
}

func TestFullTaskSetsEveryField(t *testing.T) {
	var zero []string
	walk(reflect.ValueOf(storetest.FullTask("ses_x", 0)), "Task", &zero)
	if len(zero) > 0 {
		t.Errorf("FullTask leaves fields zero, so TestStore would not check that they are kept: %s",
			strings.Join(zero, ", "))
	}
	if !reflect.DeepEqual(storetest.FullTask("ses_x", 3), storetest.FullTask("ses_x", 3)) {
		t.Error("FullTask with the same arguments returns different tasks")
	}
}

// walk appends to zero the paths of the fields under v that are zero, or empty maps and
// slices. Of a slice of structs, every field must be set in some element.
func walk(v reflect.Value, path string, zero *[]string) {
	if v.IsZero() || (v.Kind() == reflect.Map || v.Kind() == reflect.Slice) && v.Len() == 0 {
		*zero = append(*zero, path)
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		walk(v.Elem(), path, zero)
	case reflect.Slice:
		if v.Type().Elem().Kind() != reflect.Struct {
			return
		}
		unset := map[string]int{}
		for i := range v.Len() {
			var z []string
			walk(v.Index(i), path+"[]", &z)
			for _, p := range z {
				unset[p]++
			}
		}
		for p, n := range unset {
			if n == v.Len() {
				*zero = append(*zero, p)
			}
		}
	case reflect.Struct:
		if v.Type().PkgPath() == "time" {
			return
		}
		for i := range v.NumField() {
			walk(v.Field(i), path+"."+v.Type().Field(i).Name, zero)
		}
	}
}

// brokenStore is a MemoryStore with one fault.
type brokenStore struct {
	asyncagents.MemoryStore
	fault string
	mu    sync.Mutex
	kept  map[string]*asyncagents.Task // for the "shares" fault
}

func (s *brokenStore) Load(ctx context.Context) ([]asyncagents.Task, error) {
	switch s.fault {
	case "phantom":
		ts, err := s.MemoryStore.Load(ctx)
		return append(ts, asyncagents.Task{ID: "ses_phantom"}), err
	case "shares":
		s.mu.Lock()
		defer s.mu.Unlock()
		var out []asyncagents.Task
		for _, t := range s.kept {
			out = append(out, *t) // the maps and pointers of the stored task
		}
		return out, nil
	}
	return s.MemoryStore.Load(ctx)
}

func (s *brokenStore) Save(ctx context.Context, t asyncagents.Task) error {
	switch s.fault {
	case "drops permission":
		t.Permission = nil
	case "drops zone":
		t.Started = t.Started.Add(1) // a lossy time encoding
	case "merges":
		ts, _ := s.MemoryStore.Load(ctx)
		for _, old := range ts {
			if old.ID == t.ID && t.Permission == nil {
				t.Permission = old.Permission
			}
		}
	case "shares":
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.kept == nil {
			s.kept = map[string]*asyncagents.Task{}
		}
		s.kept[t.ID] = &t
		return nil
	}
	return s.MemoryStore.Save(ctx, t)
}

func (s *brokenStore) Delete(ctx context.Context, ids ...string) error {
	if s.fault == "strict delete" {
		ts, _ := s.MemoryStore.Load(ctx)
		for _, id := range ids {
			if !slices.ContainsFunc(ts, func(t asyncagents.Task) bool { return t.ID == id }) {
				return fmt.Errorf("no task %s", id)
			}
		}
	}
	if s.fault == "shares" {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, id := range ids {
			delete(s.kept, id)
		}
	}
	return s.MemoryStore.Delete(ctx, ids...)
}

// Close fails for the "close fails" fault.
func (s *brokenStore) Close() error {
	if s.fault == "close fails" {
		return errors.New("disk on fire")
	}
	return nil
}

// TestTestStoreFindsViolations runs TestStore on stores with one fault each and checks
// that it reports the checks that fault breaks.
func TestTestStoreFindsViolations(t *testing.T) {
	for _, tc := range []struct {
		fault   string
		reopen  bool     // a new store on each call, so reopening loses the tasks
		failing []string // checks that must report a violation
	}{
		{fault: "phantom", failing: []string{"Empty", "RoundTrip", "Reopen"}},
		{fault: "drops permission", failing: []string{"RoundTrip", "Copies", "Reopen"}},
		{fault: "drops zone", failing: []string{"RoundTrip", "Many", "Concurrent"}},
		{fault: "merges", failing: []string{"Replace"}},
		{fault: "shares", failing: []string{"Copies"}},
		{fault: "strict delete", failing: []string{"Delete"}},
		{fault: "close fails", failing: []string{"Reopen: Close: disk on fire"}},
		{fault: "forgets", reopen: true, failing: []string{"Reopen: Load after reopening"}},
	} {
		t.Run(tc.fault, func(t *testing.T) {
			stores := map[string]*brokenStore{}
			err := storetest.TestStore(t.Context(), func(key string) (asyncagents.Store, error) {
				if stores[key] == nil || tc.reopen {
					stores[key] = &brokenStore{fault: tc.fault}
				}
				return stores[key], nil
			})
			if err == nil {
				t.Fatal("TestStore found no violation")
			}
			for _, name := range tc.failing {
				if !strings.Contains(err.Error(), name) {
					t.Errorf("no violation of %s in:\n%v", name, err)
				}
			}
		})
	}
}

func TestTestStoreReportsFactoryErrors(t *testing.T) {
	err := storetest.TestStore(t.Context(), func(key string) (asyncagents.Store, error) {
		return nil, errors.New("no room")
	})
	if err == nil || !strings.Contains(err.Error(), "Empty: new store: no room") {
		t.Errorf("err = %v", err)
	}
}

func ExampleTestStore() {
	stores := map[string]*asyncagents.MemoryStore{}
	err := storetest.TestStore(context.Background(), func(key string) (asyncagents.Store, error) {
		if stores[key] == nil { // a store that does not persist reopens as itself
			stores[key] = &asyncagents.MemoryStore{}
		}
		return stores[key], nil
	})
	fmt.Println("violations:", err)
	// Output: violations: <nil>
}
