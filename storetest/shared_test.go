package storetest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/internal/testmain"
	"github.com/asyncagents/asyncagents/storetest"
)

// sharedLease is the lease of the SharedStores of these tests: short, so that the lease
// checks, which wait for leases to expire, run fast.
const sharedLease = 300 * time.Millisecond

// sharedStores returns a function that opens a SharedStore of server with sharedLease on the
// SharedMemory of key, made at the first call for key; with a fault, a faultyStore on it.
func sharedStores(fault string) func(key, server string) (asyncagents.LeaseStore, error) {
	var mu sync.Mutex
	mems := map[string]*storetest.SharedMemory{}
	return func(key, server string) (asyncagents.LeaseStore, error) {
		mu.Lock()
		if mems[key] == nil {
			mems[key] = storetest.NewSharedMemory()
		}
		m := mems[key]
		mu.Unlock()
		under := server
		if fault == "claims every server" {
			under = ""
		}
		s, err := m.Open(storetest.WithLease(sharedLease), storetest.WithServer(under))
		switch {
		case err != nil:
			return nil, err
		case fault == "":
			return s, nil
		case fault == "lease only":
			return leaseOnly{s}, nil
		}
		return &faultyStore{SharedStore: s, fault: fault, server: server}, nil
	}
}

func TestSharedMemoryKeepsTheSharedStoresContracts(t *testing.T) {
	open := sharedStores("")
	storetest.RunLeaseStore(t, func(t *testing.T, key, server string) asyncagents.LeaseStore {
		s, err := open(key, server)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// A store on a SharedMemory reopens as a new store on the same SharedMemory: Close gave its
// leases up, so the new store's Load claims its tasks.
func TestSharedMemoryKeepsTheStoreContract(t *testing.T) {
	open := sharedStores("")
	storetest.Run(t, func(t *testing.T, key string) asyncagents.Store {
		s, err := open(key, "")
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// openShared opens n stores with lease on one new SharedMemory, closed when t ends.
func openShared(t *testing.T, n int, lease time.Duration) []*storetest.SharedStore {
	t.Helper()
	m := storetest.NewSharedMemory()
	ss := make([]*storetest.SharedStore, n)
	for i := range ss {
		s, err := m.Open(storetest.WithLease(lease))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		ss[i] = s
	}
	return ss
}

// slotsOf calls s.Slots for one slot of key "general" and fails t unless want are granted.
func slotsOf(t *testing.T, s *storetest.SharedStore, waiting []string, want ...string) {
	t.Helper()
	got, err := s.Slots(t.Context(), "general", 1, waiting)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("Slots(general, 1, %v) = %v, %v; want %v", waiting, got, err, want)
	}
}

// queue saves queued tasks ids with s: Slots queues only those.
func queue(t *testing.T, s *storetest.SharedStore, ids ...string) {
	t.Helper()
	for i, id := range ids {
		task := storetest.FullTask(id, i)
		task.Status = asyncagents.StatusQueued
		if err := s.Save(t.Context(), task); err != nil {
			t.Fatal(err)
		}
	}
}

// The save of an ended task gives its slot back, even when the Manager never gets to
// Release it, as pgstore's does.
func TestSharedStoreEndedSaveFreesSlot(t *testing.T) {
	a := openShared(t, 1, time.Second)[0]
	queue(t, a, "ses_1", "ses_2")
	slotsOf(t, a, []string{"ses_1", "ses_2"}, "ses_1")
	ended := storetest.FullTask("ses_1", 1)
	ended.Status = asyncagents.StatusCompleted
	if err := a.Save(t.Context(), ended); err != nil {
		t.Fatal(err)
	}
	slotsOf(t, a, []string{"ses_2"}, "ses_2")
}

// Delete gives the slots of the tasks it removes back, as pgstore's does.
func TestSharedStoreDeleteFreesSlot(t *testing.T) {
	a := openShared(t, 1, time.Second)[0]
	queue(t, a, "ses_1", "ses_2")
	slotsOf(t, a, []string{"ses_1", "ses_2"}, "ses_1")
	if err := a.Delete(t.Context(), "ses_1"); err != nil {
		t.Fatal(err)
	}
	slotsOf(t, a, []string{"ses_2"}, "ses_2")
}

// A Save that fails with ErrLeaseLost forgets the lease, so Renew does not report it again,
// as pgstore's does.
func TestSharedStoreReportsALostLeaseOnce(t *testing.T) {
	ss := openShared(t, 2, 50*time.Millisecond)
	a, b := ss[0], ss[1]
	ctx := t.Context()
	task := storetest.FullTask("ses_1", 1)
	if err := a.Save(ctx, task); err != nil {
		t.Fatal(err)
	}
	if !testmain.Eventually(10*time.Second, func() bool {
		got, err := b.Claim(ctx)
		return err == nil && len(got) == 1
	}) {
		t.Fatal("b did not claim the expired lease")
	}
	if err := a.Save(ctx, task); !errors.Is(err, asyncagents.ErrLeaseLost) {
		t.Fatalf("Save of the claimed task by its former holder: %v, want ErrLeaseLost", err)
	}
	if lost, err := a.Renew(ctx); err != nil || len(lost) > 0 {
		t.Fatalf("Renew after Save reported the lease lost: lost %v, %v; want none", lost, err)
	}
}

func TestSharedStoreAfterClose(t *testing.T) {
	a := openShared(t, 1, time.Second)[0]
	ctx := t.Context()
	if err := a.Save(ctx, storetest.FullTask("ses_1", 1)); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if h := a.Held("ses_1"); !h.IsZero() {
		t.Errorf("Held after Close = %v, want the zero time", h)
	}
	calls := map[string]error{
		"Save":    a.Save(ctx, storetest.FullTask("ses_2", 2)),
		"Delete":  a.Delete(ctx, "ses_1"),
		"Want":    a.Want(ctx, "ses_1"),
		"Yield":   a.Yield(ctx, "ses_1"),
		"Release": a.Release(ctx, "ses_1"),
	}
	_, calls["Load"] = a.Load(ctx)
	_, calls["Claim"] = a.Claim(ctx)
	_, calls["Renew"] = a.Renew(ctx)
	_, calls["Tasks"] = a.Tasks(ctx, "")
	_, calls["Wanted"] = a.Wanted(ctx)
	_, calls["Slots"] = a.Slots(ctx, "general", 1, []string{"ses_1"})
	_, _, calls["Changes"] = a.Changes(ctx, 0, 1)
	calls["WaitChanges"] = a.WaitChanges(ctx)
	calls["Admit"] = a.Admit(ctx, storetest.FullTask("ses_3", 3), 0, asyncagents.Budget{})
	_, calls["TreeUsage"] = a.TreeUsage(ctx, "ses_parent")
	for name, err := range calls {
		if err == nil {
			t.Errorf("%s after Close succeeded, want an error", name)
		}
	}
}

// WaitChanges returns when another store changes a task, not when its own store does, and
// Close ends it, as pgstore's does.
func TestSharedStoreWaitChanges(t *testing.T) {
	ss := openShared(t, 2, time.Second)
	a, b := ss[0], ss[1]
	ctx := t.Context()
	wait := func() chan error {
		c := make(chan error, 1)
		go func() { c <- b.WaitChanges(ctx) }()
		return c
	}
	woken := wait()
	if err := b.Save(ctx, storetest.FullTask("ses_b", 1)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-woken:
		t.Fatalf("WaitChanges returned %v after its own store's save", err)
	case <-time.After(100 * time.Millisecond):
	}
	if !testmain.Eventually(10*time.Second, func() bool { // a saves until b, waiting meanwhile, is woken
		if err := a.Save(ctx, storetest.FullTask("ses_a", 1)); err != nil {
			t.Fatal(err)
		}
		return len(woken) > 0
	}) {
		t.Fatal("WaitChanges did not return within 10 s of another store's saves")
	}
	if err := <-woken; err != nil {
		t.Fatalf("WaitChanges after another store's save: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, time.Millisecond) // takes a's last save, if it came after
	b.WaitChanges(short)
	cancel()
	woken = wait()
	b.Close()
	select {
	case err := <-woken:
		if err == nil {
			t.Fatal("WaitChanges ended by Close returned nil")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitChanges did not return within 10 s of Close")
	}
}

// Changes refuses a limit under 1, and a number it never gave (ErrLagged: read again from 0).
func TestSharedStoreChangesErrors(t *testing.T) {
	a := openShared(t, 1, time.Second)[0]
	ctx := t.Context()
	if _, _, err := a.Changes(ctx, 0, 0); !errors.Is(err, asyncagents.ErrInvalidInput) {
		t.Errorf("Changes with limit 0: %v, want ErrInvalidInput", err)
	}
	if _, _, err := a.Changes(ctx, 1, 10); !errors.Is(err, asyncagents.ErrLagged) {
		t.Errorf("Changes after a number never given: %v, want ErrLagged", err)
	}
}

func TestSharedMemoryOpenRejectsALeaseThatIsNotPositive(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second} {
		if _, err := storetest.NewSharedMemory().Open(storetest.WithLease(d)); !errors.Is(err, asyncagents.ErrInvalidInput) {
			t.Errorf("Open(WithLease(%v)): %v, want ErrInvalidInput", d, err)
		}
	}
}

func TestSharedStoreDefaults(t *testing.T) {
	s, err := storetest.NewSharedMemory().Open()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.LeaseDuration() != 10*time.Second || s.Server() != "" {
		t.Errorf("LeaseDuration, Server = %v, %q; want 10s, \"\"", s.LeaseDuration(), s.Server())
	}
}

// faultyStore is a SharedStore with one fault.
type faultyStore struct {
	*storetest.SharedStore
	fault  string
	server string // what Server says
}

func (s *faultyStore) Server() string { return s.server }

func (s *faultyStore) Held(id string) time.Time {
	h := s.SharedStore.Held(id)
	if s.fault == "held too long" && !h.IsZero() {
		h = h.Add(s.LeaseDuration())
	}
	return h
}

func (s *faultyStore) Save(ctx context.Context, t asyncagents.Task) error {
	err := s.SharedStore.Save(ctx, t)
	if s.fault == "plain lost error" && err != nil {
		return errors.New("not yours")
	}
	return err
}

func (s *faultyStore) Renew(ctx context.Context) ([]string, error) {
	switch s.fault {
	case "renews nothing":
		return nil, nil
	case "reports nothing lost":
		_, err := s.SharedStore.Renew(ctx)
		return nil, err
	}
	return s.SharedStore.Renew(ctx)
}

func (s *faultyStore) Load(ctx context.Context) ([]asyncagents.Task, error) {
	return s.newestFirst(s.SharedStore.Load(ctx))
}

func (s *faultyStore) Claim(ctx context.Context) ([]asyncagents.Task, error) {
	return s.newestFirst(s.SharedStore.Claim(ctx))
}

func (s *faultyStore) newestFirst(tasks []asyncagents.Task, err error) ([]asyncagents.Task, error) {
	if s.fault == "newest first" {
		slices.Reverse(tasks)
	}
	return tasks, err
}

func (s *faultyStore) Tasks(ctx context.Context, parent string) ([]asyncagents.Task, error) {
	tasks, err := s.SharedStore.Tasks(ctx, parent)
	if s.fault == "tasks it holds" {
		tasks = slices.DeleteFunc(tasks, func(t asyncagents.Task) bool { return s.Held(t.ID).IsZero() })
	}
	return tasks, err
}

func (s *faultyStore) Want(ctx context.Context, id string) error {
	if s.fault == "ignores Want" {
		return nil
	}
	return s.SharedStore.Want(ctx, id)
}

func (s *faultyStore) Yield(ctx context.Context, ids ...string) error {
	if s.fault == "ignores Yield" {
		return nil
	}
	return s.SharedStore.Yield(ctx, ids...)
}

func (s *faultyStore) Slots(ctx context.Context, key string, limit int, waiting []string) ([]string, error) {
	if s.fault == "one slot more" {
		limit++
	}
	return s.SharedStore.Slots(ctx, key, limit, waiting)
}

func (s *faultyStore) Release(ctx context.Context, ids ...string) error {
	if s.fault == "ignores Release" {
		return nil
	}
	return s.SharedStore.Release(ctx, ids...)
}

func (s *faultyStore) Changes(ctx context.Context, after uint64, limit int) ([]asyncagents.Change, uint64, error) {
	switch s.fault {
	case "changes ignore the limit":
		limit *= 100
	case "changes carry prompts":
		changes, next, err := s.SharedStore.Changes(ctx, after, limit)
		all, _ := s.SharedStore.Tasks(ctx, "")
		for i, c := range changes {
			for _, t := range all {
				if t.ID == c.Task.ID {
					changes[i].Task = t
				}
			}
		}
		return changes, next, err
	}
	return s.SharedStore.Changes(ctx, after, limit)
}

func (s *faultyStore) Admit(ctx context.Context, t asyncagents.Task, perParent int, budget asyncagents.Budget) error {
	switch s.fault {
	case "ignores the cap":
		perParent = 0
	case "ignores the budget":
		budget = asyncagents.Budget{}
	}
	return s.SharedStore.Admit(ctx, t, perParent, budget)
}

func (s *faultyStore) Close() error {
	if s.fault == "keeps leases when closed" {
		return nil // the SharedMemory is dropped with the test
	}
	return s.SharedStore.Close()
}

// leaseOnly is a LeaseStore that is neither a HandoffStore nor a SlotStore.
type leaseOnly struct{ asyncagents.LeaseStore }

// TestTestLeaseStoreFindsViolations runs TestLeaseStore on SharedStores with one fault each
// and checks that it reports the checks that fault breaks.
func TestTestLeaseStoreFindsViolations(t *testing.T) {
	for _, tc := range []struct {
		fault   string
		failing []string // checks that must report a violation; none: TestLeaseStore must pass
	}{
		{fault: "held too long", failing: []string{"SaveTakesLease: Held(ses_1) after Save", "Expiry: Claim took task"}},
		{fault: "plain lost error", failing: []string{"SaveTakesLease: Save(ses_1) of a task another store holds: not yours"}},
		{fault: "renews nothing", failing: []string{"Renew: Held(ses_1) after Renew", "Renew: Claim took"}},
		{fault: "reports nothing lost", failing: []string{"Renew: Renew after another store claimed"}},
		{fault: "newest first", failing: []string{"LoadServers: Load returned [ses_3 ses_2 ses_1], not oldest first"}},
		{fault: "claims every server", failing: []string{`LoadServers: Claim of a store of server "opencode-us-2" took task`}},
		{fault: "keeps leases when closed", failing: []string{"Close: Load of a store opened after the holder closed"}},
		{fault: "tasks it holds", failing: []string{"Tasks: Tasks(ses_p1) of tasks three stores hold"}},
		{fault: "ignores Want", failing: []string{"Handover: Wanted of the holder", "WantedExpired: Claim of a store that did not want"}},
		{fault: "ignores Yield", failing: []string{"Handover: Save(ses_wanted) after Yield"}},
		{fault: "one slot more", failing: []string{"Slots: Slots(general, 2, [ses_b1 ses_b2])", "SlotRelease:", "SlotsAtOnce:"}},
		{fault: "ignores Release", failing: []string{"Slots: Slots(general, 2, [ses_b2]) after another", "SlotRelease:", "SlotsAtOnce:"}},
		{fault: "changes carry prompts", failing: []string{"Changes: Changes(0) of every task, after three stores saved theirs returned task ses_1 unlike its summary"}},
		{fault: "changes ignore the limit", failing: []string{"Changes: Changes(0, 1) one at a time returned 3 changes, more than the limit"}},
		{fault: "ignores the cap", failing: []string{"AdmitCap: Admit(ses_3, 2, none) with two active tasks", "AdmitAtOnce: of two launches at once"}},
		{fault: "ignores the budget", failing: []string{"AdmitBudget: Admit(tsk_3, 0, 1,000 tokens) with 1,100 tokens used below the parent: <nil>"}},
		{fault: "lease only"},
	} {
		t.Run(tc.fault, func(t *testing.T) {
			t.Parallel()
			err := storetest.TestLeaseStore(t.Context(), sharedStores(tc.fault))
			if len(tc.failing) == 0 {
				if err != nil {
					t.Errorf("TestLeaseStore on a LeaseStore that is not a HandoffStore nor a SlotStore: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("TestLeaseStore found no violation")
			}
			for _, want := range tc.failing {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("no violation %q in:\n%v", want, err)
				}
			}
		})
	}
}

func TestTestLeaseStoreReportsOpenErrors(t *testing.T) {
	err := storetest.TestLeaseStore(t.Context(), func(key, server string) (asyncagents.LeaseStore, error) {
		return nil, errors.New("no database")
	})
	if err == nil || !strings.Contains(err.Error(), "SaveTakesLease: new store: no database") {
		t.Errorf("err = %v", err)
	}
}

// Two Managers' stores on one SharedMemory: one holds a task, the other asks for it, and
// takes it when the holder yields it.
func ExampleSharedMemory() {
	ctx := context.Background()
	m := storetest.NewSharedMemory()
	a, _ := m.Open(storetest.WithLease(time.Second))
	b, _ := m.Open(storetest.WithLease(time.Second))
	defer a.Close()
	defer b.Close()

	a.Save(ctx, asyncagents.Task{ID: "ses_1", ParentSessionID: "ses_parent", Status: asyncagents.StatusRunning})
	all, _ := b.Tasks(ctx, "ses_parent")
	fmt.Println("b reads:", len(all), "task")
	if err := b.Save(ctx, all[0]); errors.Is(err, asyncagents.ErrLeaseLost) {
		fmt.Println("b saves: lease lost")
	}

	b.Want(ctx, "ses_1")
	wanted, _ := a.Wanted(ctx)
	fmt.Println("a is asked for:", wanted)
	a.Yield(ctx, wanted...)
	claimed, _ := b.Claim(ctx)
	fmt.Println("b claims:", claimed[0].ID, "held:", !b.Held("ses_1").IsZero())
	// Output:
	// b reads: 1 task
	// b saves: lease lost
	// a is asked for: [ses_1]
	// b claims: ses_1 held: true
}
