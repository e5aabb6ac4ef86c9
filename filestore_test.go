package asyncagents_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/asyncagents/asyncagents"
	"github.com/asyncagents/asyncagents/storetest"
)

// fileHeader is the first line of a FileStore's file, as its doc gives it.
const fileHeader = `{"asyncagents":"tasks","version":1}` + "\n"

func openFileStore(t testing.TB, path string) *asyncagents.FileStore {
	t.Helper()
	s, err := asyncagents.NewFileStore(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func loadTasks(t testing.TB, s asyncagents.Store) []asyncagents.Task {
	t.Helper()
	got, err := s.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// sameTasks compares lists of tasks by id, as stored: DisplayID is not kept.
var sameTasks = cmp.Options{
	cmpopts.SortSlices(func(a, b asyncagents.Task) bool { return a.ID < b.ID }),
	cmpopts.IgnoreFields(asyncagents.Task{}, "DisplayID", "QueuePosition"),
	cmpopts.EquateEmpty(),
}

func TestFileStoreConformance(t *testing.T) {
	dir := t.TempDir()
	storetest.Run(t, func(t *testing.T, key string) asyncagents.Store {
		return openFileStore(t, filepath.Join(dir, key+".jsonl"))
	})
}

func TestFileStoreTestStore(t *testing.T) {
	dir := t.TempDir()
	err := storetest.TestStore(t.Context(), func(key string) (asyncagents.Store, error) {
		return asyncagents.NewFileStore(filepath.Join(dir, key+".jsonl"))
	})
	if err != nil {
		t.Error(err)
	}
}

func TestFileStoreCreatesReopensAndCloses(t *testing.T) {
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "state", "asyncagents")
	path := filepath.Join(dir, "tasks.jsonl")
	s := openFileStore(t, path)

	if data, err := os.ReadFile(path); err != nil || string(data) != fileHeader {
		t.Fatalf("new file = %q, %v; want the header alone", data, err)
	}
	if runtime.GOOS != "windows" { // Windows has no permission bits
		for name, want := range map[string]fs.FileMode{path: 0o600, path + ".lock": 0o600, dir: 0o700 | fs.ModeDir} {
			if fi, err := os.Stat(name); err != nil || fi.Mode() != want {
				t.Errorf("%s: mode %v, %v; want %v", name, fi.Mode(), err, want)
			}
		}
	}

	a, b, c := storetest.FullTask("ses_a", 1), storetest.FullTask("ses_b", 2), storetest.FullTask("ses_c", 3)
	for _, task := range []asyncagents.Task{a, b, c} {
		if err := s.Save(ctx, task); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Delete(ctx, "ses_b"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	_, loadErr := s.Load(ctx)
	for op, err := range map[string]error{
		"Load": loadErr, "Save": s.Save(ctx, a), "Delete": s.Delete(ctx, "ses_a"),
	} {
		if !errors.Is(err, fs.ErrClosed) || !strings.Contains(fmt.Sprint(err), path) {
			t.Errorf("%s after Close = %v; want fs.ErrClosed naming %s", op, err, path)
		}
	}

	s = openFileStore(t, path)
	if diff := cmp.Diff([]asyncagents.Task{a, c}, loadTasks(t, s), sameTasks); diff != "" {
		t.Errorf("after reopening (-want +got):\n%s", diff)
	}
}

// The file reads as the doc of FileStore says: a file written by hand in that format
// loads, and the file a FileStore writes has that form.
func TestFileStoreDocumentedFormat(t *testing.T) {
	a, b := storetest.FullTask("ses_a", 1), storetest.FullTask("ses_b", 2)
	b2 := storetest.FullTask("ses_b", 3)
	path := filepath.Join(t.TempDir(), "tasks.jsonl")
	writeFile(t, path, fileHeader+saveLine(t, a)+saveLine(t, b)+`{"delete":["ses_a","ses_unknown"]}`+"\n"+
		saveLine(t, b2)+saveLine(t, a))
	s := openFileStore(t, path)
	if diff := cmp.Diff([]asyncagents.Task{a, b2}, loadTasks(t, s), sameTasks); diff != "" {
		t.Errorf("hand-written file (-want +got):\n%s", diff)
	}

	if err := s.Delete(t.Context(), "ses_a", "ses_unknown", "ses_a"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(t.Context(), "ses_unknown"); err != nil { // writes nothing
		t.Fatal(err)
	}
	if err := s.Save(t.Context(), a); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(data), "\n")
	tail := lines[len(lines)-3:]
	if want := []string{`{"delete":["ses_a"]}` + "\n", saveLine(t, a), ""}; !cmp.Equal(tail, want) {
		t.Errorf("appended lines = %q; want %q", tail, want)
	}
}

// saveLine returns the "save" record of task as the format gives it, with <, > and & as
// they are.
func saveLine(t testing.TB, task asyncagents.Task) string {
	t.Helper()
	var buf bytes.Buffer
	e := json.NewEncoder(&buf)
	e.SetEscapeHTML(false)
	if err := e.Encode(map[string]asyncagents.Task{"save": task}); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

func writeFile(t testing.TB, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestFileStoreCompacts(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "tasks.jsonl")
	s := openFileStore(t, path)
	small := storetest.FullTask("ses_small", 1)
	if err := s.Save(ctx, small); err != nil {
		t.Fatal(err)
	}
	big := storetest.FullTask("ses_big", 1)
	const resultSize = 100 << 10 // 11 saves pass 1 MiB, where compaction starts
	var compacted []byte
	var last int64
	for i := range 30 {
		big.ResumeCount = i
		big.Result = strings.Repeat(string(rune('a'+i%26)), resultSize)
		if err := s.Save(ctx, big); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if limit := int64(1<<20 + resultSize + 2000); fi.Size() > limit {
			t.Fatalf("save %d: file of %d bytes, more than %d", i, fi.Size(), limit)
		}
		if fi.Size() < last && compacted == nil {
			if compacted, err = os.ReadFile(path); err != nil {
				t.Fatal(err)
			}
		}
		last = fi.Size()
	}
	if compacted == nil {
		t.Fatal("the file never shrank: no compaction")
	}
	lines := strings.SplitAfter(string(compacted), "\n")
	if len(lines) != 4 || lines[0] != fileHeader || !strings.HasPrefix(lines[1], `{"save":{"id":"ses_big"`) ||
		lines[2] != saveLine(t, small) || lines[3] != "" {
		t.Errorf("compacted file: %d lines, starting %.200q; want the header and one save per task, by id",
			len(lines), compacted)
	}
	if _, err := os.Stat(path + ".tmp"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("temporary file left: %v", err)
	}
	if diff := cmp.Diff([]asyncagents.Task{big, small}, loadTasks(t, s), sameTasks); diff != "" {
		t.Errorf("after compaction (-want +got):\n%s", diff)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openFileStore(t, path)
	if diff := cmp.Diff([]asyncagents.Task{big, small}, loadTasks(t, s), sameTasks); diff != "" {
		t.Errorf("after compaction and reopening (-want +got):\n%s", diff)
	}
}

func TestFileStoreLocked(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tasks.jsonl")
	s := openFileStore(t, path)
	for _, p := range []string{path, filepath.Join(dir, ".", "tasks.jsonl")} {
		second, err := asyncagents.NewFileStore(p)
		if !errors.Is(err, asyncagents.ErrStoreLocked) || !strings.Contains(err.Error(), path) {
			t.Errorf("NewFileStore(%s) while open = %v, %v; want ErrStoreLocked naming %s", p, second, err, path)
		}
	}
	openFileStore(t, filepath.Join(dir, "other.jsonl")) // another path in the same directory

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	openFileStore(t, path)
}

// lockPathEnv names the file that TestFileStoreLockHelper, run as a process of its own,
// opens; lockWantEnv says whether it expects ErrStoreLocked ("locked") or no error.
const (
	lockPathEnv = "ASYNCAGENTS_TEST_LOCK_PATH"
	lockWantEnv = "ASYNCAGENTS_TEST_LOCK_WANT"
)

func TestFileStoreLockedAcrossProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tasks.jsonl")
	s := openFileStore(t, path)
	runLockHelper(t, path, "locked")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	runLockHelper(t, path, "free")
}

func runLockHelper(t *testing.T, path, want string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestFileStoreLockHelper$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), lockPathEnv+"="+path, lockWantEnv+"="+want)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestFileStoreLockHelper") {
		t.Errorf("other process expecting %s: %v\n%s", want, err, out)
	}
}

// TestFileStoreLockHelper is the other process of TestFileStoreLockedAcrossProcesses.
func TestFileStoreLockHelper(t *testing.T) {
	path := os.Getenv(lockPathEnv)
	if path == "" {
		t.Skip("run by TestFileStoreLockedAcrossProcesses")
	}
	s, err := asyncagents.NewFileStore(path)
	if err == nil {
		defer s.Close()
	}
	switch want := os.Getenv(lockWantEnv); {
	case want == "locked" && !errors.Is(err, asyncagents.ErrStoreLocked):
		t.Errorf("NewFileStore = %v; want ErrStoreLocked", err)
	case want == "free" && err != nil:
		t.Errorf("NewFileStore = %v; want no error", err)
	}
}

func TestFileStoreCorrupt(t *testing.T) {
	// A good file: header, save a, save b, save c, delete b.
	good := func() string {
		path := filepath.Join(t.TempDir(), "good.jsonl")
		s := openFileStore(t, path)
		for _, id := range []string{"ses_a", "ses_b", "ses_c"} {
			if err := s.Save(t.Context(), storetest.FullTask(id, 1)); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Delete(t.Context(), "ses_b"); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}()
	lines := strings.SplitAfter(good, "\n")
	if len(lines) != 6 {
		t.Fatalf("good file has %d lines", len(lines)-1)
	}
	withLine := func(n int, line string) string { // line n (from 1) replaced
		l := append([]string(nil), lines...)
		l[n-1] = line
		return strings.Join(l, "")
	}
	for _, tc := range []struct {
		name, data string
		line       int
		reason     string
	}{
		{"garbage", "this is no JSON\n", 1, "header"},
		{"binary", "\x00\x01\x02\xff", 1, "incomplete"},
		{"another JSON file", `{"tasks":[]}` + "\n", 1, "header"},
		{"newer version", `{"asyncagents":"tasks","version":2}` + "\n", 1, "version 2"},
		{"header without newline", strings.TrimSuffix(fileHeader, "\n"), 1, "incomplete"},
		{"truncated mid-line", good[:len(good)-8], 5, "incomplete"},
		{"truncated in a save", good[:len(lines[0])+len(lines[1])+len(lines[2])/2], 3, "incomplete"},
		{"bad line in the middle", withLine(3, "{garbage\n"), 3, "invalid character"},
		{"empty line in the middle", withLine(3, "\n"), 3, "unexpected end of JSON input"},
		{"neither save nor delete", withLine(2, `{"update":{"id":"ses_a"}}`+"\n"), 2, "exactly one"},
		{"save and delete", withLine(2, `{"save":{"id":"ses_a"},"delete":["ses_b"]}`+"\n"), 2, "exactly one"},
		{"null save", withLine(4, `{"save":null}`+"\n"), 4, "exactly one"},
		{"bad field", withLine(4, `{"save":{"id":"ses_c","started":"yesterday"}}`+"\n"), 4, "yesterday"},
		{"bad delete", withLine(5, `{"delete":"ses_b"}`+"\n"), 5, "cannot unmarshal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "tasks.jsonl")
			writeFile(t, path, tc.data)
			for attempt := range 2 { // the first failure leaves no lock behind
				s, err := asyncagents.NewFileStore(path)
				if err == nil {
					s.Close()
					t.Fatalf("attempt %d: NewFileStore succeeded", attempt)
				}
				where := fmt.Sprintf("%s:%d: ", path, tc.line)
				if !errors.Is(err, asyncagents.ErrStoreCorrupt) || !strings.Contains(err.Error(), where) ||
					!strings.Contains(err.Error(), tc.reason) {
					t.Errorf("attempt %d: err = %v; want ErrStoreCorrupt at %q with %q", attempt, err, where, tc.reason)
				}
			}
			if data, err := os.ReadFile(path); err != nil || string(data) != tc.data {
				t.Errorf("the file changed: %q, %v", data, err)
			}
			entries, err := os.ReadDir(filepath.Dir(path))
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				if n := e.Name(); n != "tasks.jsonl" && n != "tasks.jsonl.lock" {
					t.Errorf("file %s left beside the store", n)
				}
			}
		})
	}
}

func TestFileStoreEmptyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tasks.jsonl")
	writeFile(t, path, "")
	writeFile(t, path+".tmp", "the leftover of a compaction cut short")
	s := openFileStore(t, path)
	if data, err := os.ReadFile(path); err != nil || string(data) != fileHeader {
		t.Errorf("file = %q, %v; want the header alone", data, err)
	}
	if _, err := os.Stat(path + ".tmp"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("temporary file left: %v", err)
	}
	if got := loadTasks(t, s); len(got) != 0 {
		t.Errorf("Load of an empty file = %d tasks", len(got))
	}
	a := storetest.FullTask("ses_a", 1)
	if err := s.Save(t.Context(), a); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]asyncagents.Task{a}, loadTasks(t, openFileStore(t, path)), sameTasks); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestFileStoreEmptyPath(t *testing.T) {
	if _, err := asyncagents.NewFileStore(""); !errors.Is(err, asyncagents.ErrInvalidInput) {
		t.Errorf("NewFileStore(\"\") = %v; want ErrInvalidInput", err)
	}
}

// S-4: a store file or lock file that others may read (made by hand, or by an older
// version) is changed to 0o600 when a FileStore opens it, as the FileStore doc says.
func TestFileStoreTightensModes(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no mode bits on Windows")
	}
	path := filepath.Join(t.TempDir(), "tasks.jsonl")
	writeFile(t, path, fileHeader+saveLine(t, storetest.FullTask("ses_a", 1)))
	writeFile(t, path+".lock", "")
	for _, p := range []string{path, path + ".lock"} {
		if err := os.Chmod(p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := openFileStore(t, path)
	for _, p := range []string{path, path + ".lock"} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s after NewFileStore: %v, %v; want mode 0600", p, fi.Mode(), err)
		}
	}
	if got := loadTasks(t, s); len(got) != 1 {
		t.Errorf("tasks after tightening: %d; want 1", len(got))
	}
}

// readStore is a Store whose Load reads the file with ReadFileStore while a FileStore
// writes it: the conformance checks then say that ReadFileStore reads what a FileStore
// keeps. Its methods take turns, so a Load never meets a write half done.
type readStore struct {
	mu   sync.Mutex
	path string
	fs   *asyncagents.FileStore
}

func (r *readStore) Load(ctx context.Context) ([]asyncagents.Task, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return asyncagents.ReadFileStore(ctx, r.path)
}

func (r *readStore) Save(ctx context.Context, t asyncagents.Task) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fs.Save(ctx, t)
}

func (r *readStore) Delete(ctx context.Context, ids ...string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fs.Delete(ctx, ids...)
}

func (r *readStore) Close() error { return r.fs.Close() }

func TestReadFileStoreConformance(t *testing.T) {
	dir := t.TempDir()
	storetest.Run(t, func(t *testing.T, key string) asyncagents.Store {
		path := filepath.Join(dir, key+".jsonl")
		s, err := asyncagents.NewFileStore(path)
		if err != nil {
			t.Fatal(err)
		}
		return &readStore{path: path, fs: s}
	})
}

// ReadFileStore creates, locks and changes nothing: not for a missing store, not beside a
// FileStore that has the file open (which goes on working), not the mode of a file that a
// FileStore would tighten.
func TestReadFileStoreChangesNothing(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	missing := filepath.Join(dir, "state", "tasks.jsonl")
	if got, err := asyncagents.ReadFileStore(ctx, missing); !errors.Is(err, fs.ErrNotExist) || got != nil {
		t.Errorf("ReadFileStore of a missing file = %v, %v; want fs.ErrNotExist", got, err)
	}
	if _, err := os.Stat(filepath.Dir(missing)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadFileStore of a missing file made its directory: %v", err)
	}

	path := filepath.Join(dir, "tasks.jsonl")
	a, b := storetest.FullTask("ses_a", 1), storetest.FullTask("ses_b", 2)
	writeFile(t, path, fileHeader+saveLine(t, b)+saveLine(t, a))
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := asyncagents.ReadFileStore(ctx, path)
	if diff := cmp.Diff([]asyncagents.Task{a, b}, got, sameTasks); err != nil || diff != "" {
		t.Errorf("ReadFileStore: %v (-want +got):\n%s", err, diff)
	}
	if len(got) == 0 || got[0].ID != "ses_a" {
		t.Errorf("ReadFileStore returned %s first; want the tasks sorted by id", got[0].ID)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("files after ReadFileStore: %d; want the store alone (no lock file)", len(entries))
	}
	if fi, _ := os.Stat(path); runtime.GOOS != "windows" && fi.Mode().Perm() != 0o644 {
		t.Errorf("ReadFileStore changed the mode to %v", fi.Mode())
	}

	s := openFileStore(t, path)
	if got, err := asyncagents.ReadFileStore(ctx, path); err != nil || len(got) != 2 {
		t.Errorf("ReadFileStore while a FileStore has the file: %d tasks, %v", len(got), err)
	}
	c := storetest.FullTask("ses_c", 3)
	if err := s.Save(ctx, c); err != nil {
		t.Errorf("Save after ReadFileStore: %v", err)
	}
	if got, err := asyncagents.ReadFileStore(ctx, path); err != nil || len(got) != 3 {
		t.Errorf("ReadFileStore after a Save: %d tasks, %v", len(got), err)
	}
}

func TestReadFileStoreErrors(t *testing.T) {
	dir := t.TempDir()
	corrupt := filepath.Join(dir, "corrupt.jsonl")
	writeFile(t, corrupt, fileHeader+"{not json\n")
	empty := filepath.Join(dir, "empty.jsonl")
	writeFile(t, empty, "")
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		path string
		want error
	}{
		{"empty path", t.Context(), "", asyncagents.ErrInvalidInput},
		{"corrupt", t.Context(), corrupt, asyncagents.ErrStoreCorrupt},
		{"cancelled", cancelled, empty, context.Canceled},
	} {
		if _, err := asyncagents.ReadFileStore(tc.ctx, tc.path); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v; want %v", tc.name, err, tc.want)
		}
	}
	if got, err := asyncagents.ReadFileStore(t.Context(), empty); err != nil || len(got) != 0 {
		t.Errorf("empty file: %v, %v; want no tasks", got, err)
	}
}

// writeJournal writes a FileStore's file at path with n tasks, in the documented format.
func writeJournal(b testing.TB, path string, n int) []asyncagents.Task {
	var buf strings.Builder
	buf.WriteString(fileHeader)
	tasks := make([]asyncagents.Task, n)
	for i := range tasks {
		tasks[i] = storetest.FullTask(fmt.Sprintf("ses_%06d", i), i)
		buf.WriteString(saveLine(b, tasks[i]))
	}
	writeFile(b, path, buf.String())
	return tasks
}

// BenchmarkFileStoreSave saves one changed task at a time into a store that holds n tasks
// (about 1.7 KiB of JSON each). B/save is what reached the file per Save: the record, and
// on average the compactions (counted in compactions/op).
func BenchmarkFileStoreSave(b *testing.B) {
	for _, n := range []int{100, 10_000} {
		b.Run(fmt.Sprintf("tasks=%d", n), func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "tasks.jsonl")
			tasks := writeJournal(b, path, n)
			s := openFileStore(b, path)
			size := func() int64 {
				fi, err := os.Stat(path)
				if err != nil {
					b.Fatal(err)
				}
				return fi.Size()
			}
			var written, record, compactions int64
			last := size()
			i := 0
			for b.Loop() {
				t := tasks[i%n]
				t.ResumeCount = i
				t.Progress.ToolCalls = i
				if err := s.Save(context.Background(), t); err != nil {
					b.Fatal(err)
				}
				i++
				b.StopTimer()
				if now := size(); now > last {
					written += now - last
					record = now - last
				} else { // compacted after the append
					written += now + record
					compactions++
				}
				last = size()
				b.StartTimer()
			}
			b.ReportMetric(float64(written)/float64(i), "B/save")
			b.ReportMetric(float64(compactions)/float64(i), "compactions/op")
		})
	}
}

// BenchmarkFileStoreOpen opens and loads a file of 10,000 tasks, as a restarting host does.
func BenchmarkFileStoreOpen(b *testing.B) {
	path := filepath.Join(b.TempDir(), "tasks.jsonl")
	writeJournal(b, path, 10_000)
	for b.Loop() {
		s, err := asyncagents.NewFileStore(path)
		if err != nil {
			b.Fatal(err)
		}
		if tasks, err := s.Load(context.Background()); err != nil || len(tasks) != 10_000 {
			b.Fatal(len(tasks), err)
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

func ExampleNewFileStore() {
	dir, err := os.MkdirTemp("", "asyncagents-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	path := filepath.Join(dir, "tasks.jsonl")

	s, err := asyncagents.NewFileStore(path)
	if err != nil {
		panic(err)
	}
	// A Manager would use it: asyncagents.New(client, asyncagents.WithStore(s)).
	_ = s.Save(ctx, asyncagents.Task{ID: "ses_1", Description: "find TODOs", Status: asyncagents.StatusCompleted})
	_ = s.Save(ctx, asyncagents.Task{ID: "ses_2", Description: "run tests", Status: asyncagents.StatusRunning})
	_ = s.Delete(ctx, "ses_1")

	_, err = asyncagents.NewFileStore(path)
	fmt.Println("second store:", errors.Is(err, asyncagents.ErrStoreLocked))
	_ = s.Close()

	s, err = asyncagents.NewFileStore(path) // after a restart
	if err != nil {
		panic(err)
	}
	defer s.Close()
	tasks, _ := s.Load(ctx)
	for _, t := range tasks {
		fmt.Println(t.ID, t.Description, t.Status)
	}
	// Output:
	// second store: true
	// ses_2 run tests running
}
