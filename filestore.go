package asyncagents

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
)

// fileHeader is the first line of every file of a FileStore.
const fileHeader = `{"asyncagents":"tasks","version":1}` + "\n"

// fileVersion is the format version that fileHeader names and this package reads.
const fileVersion = 1

// compactMinBytes is the size below which a FileStore's file is never compacted.
const compactMinBytes = 1 << 20

// FileStore is a [Store] that keeps tasks in a file, so that a new [Manager] after a
// restart of the host finds the tasks of the last one. Create one with [NewFileStore], pass
// it to [WithStore] and Close it after the Manager. It is safe for concurrent use.
//
// # Format
//
// The file is JSON Lines: UTF-8, one JSON object per line, each line ending in "\n".
//
//	{"asyncagents":"tasks","version":1}
//	{"save":{"id":"tsk_a","sessionID":"ses_a","parentSessionID":"ses_p","status":"running",…}}
//	{"save":{"id":"tsk_b",…}}
//	{"delete":["tsk_a"]}
//
// The first line names the format and its version. Every other line is a record: "save"
// holds a [Task] in its JSON form (every field but DisplayID, which is not stored) and
// inserts or replaces the task with its id; "delete" removes the tasks with the listed ids.
// Opening the file replays the records in order, so the last record of an id wins.
//
// # Guarantees
//
// Save and Delete append one record in a single write and fsync the file before they
// return: a change that returned nil survives a crash of the process or the machine. A
// Delete of ids the store does not hold writes nothing. When the file has grown past both
// 1 MiB and twice the size of the live records (the header and one "save" record per task),
// the Save or Delete that grew it compacts the file: it writes the header and one "save"
// record per task, sorted by id, to path+".tmp", fsyncs it, renames it over path and fsyncs
// the directory (on Windows, which cannot sync a directory, the rename is the last step).
// A crash at any moment leaves the old file or the new one whole, never a mix.
//
// The methods do local file I/O only and do not watch their context: a change that has
// started finishes, so no record is half written because a context ended.
//
// # Locking
//
// [NewFileStore] takes an exclusive lock on path+".lock" (flock on Unix, LockFileEx on
// Windows) and holds it until [FileStore.Close]; the lock file stays in place. A second
// FileStore on the same path, in this process or another, fails with [ErrStoreLocked]. The
// lock is advisory: it keeps FileStores apart, not other programs, and network file systems
// may not honour it. Where neither call exists (AIX, Plan 9, js, wasip1) NewFileStore
// returns an error matching [errors.ErrUnsupported].
//
// # Damage
//
// A file that does not read as above — line 1 not the header, a line that is not JSON, a
// record that is neither "save" nor "delete" — makes NewFileStore fail with
// [ErrStoreCorrupt], naming the path and the line. The file is left byte for byte as it
// was, for the user to repair or move away: a FileStore never rewrites or deletes a file it
// could not read.
//
// That includes a last line without its "\n". Every record is written whole, newline
// included, in one write, so after a crash such a line is the tail of a write cut short,
// whose Save or Delete never returned. Still the store does not drop it silently: a file
// cut short otherwise (a copy, a full disk) looks the same, and may miss records that
// callers were told are kept. Deleting the incomplete line recovers every record before
// it. An empty file (zero bytes) is an empty store.
//
// A write that fails is cut off the file again, and the change is not made. When that cut
// fails too, or an fsync fails, what reached the disk is unknown: the FileStore then
// refuses further changes; Close it and open the path again, which reads what is there.
//
// # Costs
//
// Save writes the task's JSON once and fsyncs; Delete writes the ids and fsyncs. Saves and
// Deletes take turns: one fsync at a time. A compaction writes every task once, and comes
// only after at least as many bytes were appended as are live, so on average each byte
// appended costs at most one more byte of compaction. The file stays below the larger of
// 1 MiB and twice the live records, plus one record. NewFileStore reads and decodes the
// whole file once; the store holds every task in memory, decoded and as JSON.
//
// # Permissions
//
// Files are created with mode 0o600 and missing directories with 0o700. On Unix, an
// existing file or lock file that its group or others may read or write (a store made by
// hand, or copied with mode 0o644) is changed to 0o600 when NewFileStore opens it; when
// that chmod fails, NewFileStore fails. Existing directories are left as they are. Windows
// has no mode bits to tighten: the file's ACLs are left as they are.
//
// # Reading without a lock
//
// [ReadFileStore] reads a FileStore's file as NewFileStore does, without creating, locking
// or changing anything: for a program that lists the tasks while another process may have
// the store open.
type FileStore struct {
	path string // absolute

	mu     sync.Mutex
	closed bool
	lock   *os.File             // the locked path+".lock"
	file   *os.File             // path, written at size; nil after Close or a failed reopen
	size   int64                // bytes in file
	live   int64                // bytes of the header and the tasks' records
	tasks  map[string]fileEntry // by id
	failed error                // set when a change failed so that the file's state is unknown
}

var _ Store = (*FileStore)(nil)

// fileEntry is a stored task and its "save" record, with its newline.
type fileEntry struct {
	task Task
	line []byte
}

// fileRecord is a line of a FileStore's file after the first.
type fileRecord struct {
	Save   *Task     `json:"save,omitempty"`
	Delete *[]string `json:"delete,omitempty"`
}

// NewFileStore opens the task file at path, creating it (and its missing directories) when
// it does not exist, and locks it until [FileStore.Close]. See [FileStore] for the format.
// On Unix it changes an existing file or lock file that group or others may access to mode
// 0o600 (see Permissions at [FileStore]). Errors: [ErrStoreLocked] when another FileStore has path open, [ErrStoreCorrupt] when the
// file does not read (naming the line), [ErrInvalidInput] for an empty path, an error
// matching [errors.ErrUnsupported] on platforms without file locks, and the errors of the
// file system.
func NewFileStore(path string) (*FileStore, error) {
	if path == "" {
		return nil, fmt.Errorf("%w: empty store path", ErrInvalidInput)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("asyncagents: file store %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o700); err != nil {
		return nil, fmt.Errorf("asyncagents: file store %s: %w", abs, err)
	}
	lock, err := lockFile(abs + ".lock")
	if err == nil {
		if err = tightenMode(lock); err != nil {
			_ = unlockFile(lock)
		}
	}
	if errors.Is(err, errLocked) {
		return nil, fmt.Errorf("%w: %s is open in another FileStore, in this process or another (lock file %s)",
			ErrStoreLocked, abs, abs+".lock")
	}
	if err != nil {
		return nil, fmt.Errorf("asyncagents: file store %s: lock: %w", abs, err)
	}
	s := &FileStore{path: abs, lock: lock, tasks: map[string]fileEntry{}}
	if err := s.open(); err != nil {
		if s.file != nil {
			_ = s.file.Close()
		}
		_ = unlockFile(lock)
		return nil, err
	}
	return s, nil
}

// open reads the file into s and opens it for writing, or creates it.
func (s *FileStore) open() error {
	data, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) || err == nil && len(data) == 0 {
		return s.wrap(s.rewrite())
	}
	if err != nil {
		return s.wrap(err)
	}
	if err := s.replay(data); err != nil {
		return err
	}
	if s.file, err = os.OpenFile(s.path, os.O_WRONLY, 0); err != nil {
		return s.wrap(err)
	}
	return s.wrap(tightenMode(s.file))
}

// ReadFileStore returns the tasks in the FileStore file at path, sorted by id, as a
// [FileStore] opened on it would Load them, without creating, locking or changing any file:
// no store, lock file or directory is made, and a FileStore that has path open meanwhile is
// not disturbed. It reads the file once (the whole file, into memory).
//
// Errors: [ErrInvalidInput] for an empty path; an error matching [fs.ErrNotExist] when there
// is no file at path (no store yet: nothing to list); [ErrStoreCorrupt] for a file that does
// not read, as NewFileStore reports it; ctx's error when ctx has ended before the read. A
// FileStore appends each change in one write, so a reader should see whole records; on file
// systems where it catches a write half done, the half line reads as ErrStoreCorrupt
// ("incomplete") and a second read succeeds.
func ReadFileStore(ctx context.Context, path string) ([]Task, error) {
	if path == "" {
		return nil, fmt.Errorf("%w: empty store path", ErrInvalidInput)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("asyncagents: file store %s: %w", path, err)
	}
	s := &FileStore{path: abs, tasks: map[string]fileEntry{}}
	data, err := os.ReadFile(abs)
	if err != nil {
		return nil, s.wrap(err)
	}
	if len(data) > 0 {
		if err := s.replay(data); err != nil {
			return nil, err
		}
	}
	return s.sorted(), nil
}

// replay applies the lines of data to s.tasks.
func (s *FileStore) replay(data []byte) error {
	s.size = int64(len(data))
	for n := 1; len(data) > 0; n++ {
		end := bytes.IndexByte(data, '\n')
		if end < 0 {
			return s.corrupt(n, "the last line is incomplete, without its newline (a write cut short?); "+
				"delete it to recover the lines before it")
		}
		line := data[:end+1]
		data = data[end+1:]
		if n == 1 {
			if err := checkHeader(line); err != nil {
				return s.corrupt(n, err.Error())
			}
			continue
		}
		var r fileRecord
		if err := json.Unmarshal(line, &r); err != nil {
			return s.corrupt(n, err.Error())
		}
		switch {
		case r.Save != nil && r.Delete == nil:
			s.tasks[r.Save.ID] = fileEntry{task: *r.Save, line: line}
		case r.Delete != nil && r.Save == nil:
			for _, id := range *r.Delete {
				delete(s.tasks, id)
			}
		default:
			return s.corrupt(n, `a record must hold exactly one of "save" and "delete"`)
		}
	}
	s.live = int64(len(fileHeader))
	for id, e := range s.tasks {
		e.line = bytes.Clone(e.line) // let go of the file's dead records
		s.tasks[id] = e
		s.live += int64(len(e.line))
	}
	return nil
}

func checkHeader(line []byte) error {
	var h struct {
		Format  string `json:"asyncagents"`
		Version int    `json:"version"`
	}
	if err := json.Unmarshal(line, &h); err != nil || h.Format != "tasks" {
		return fmt.Errorf("not the header %s of a FileStore's file", bytes.TrimSpace([]byte(fileHeader)))
	}
	if h.Version != fileVersion {
		return fmt.Errorf("format version %d; this package reads version %d", h.Version, fileVersion)
	}
	return nil
}

func (s *FileStore) corrupt(line int, reason string) error {
	return fmt.Errorf("%w: %s:%d: %s", ErrStoreCorrupt, s.path, line, reason)
}

func (s *FileStore) wrap(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("asyncagents: file store %s: %w", s.path, err)
}

// usable returns the error a change made now would fail with.
func (s *FileStore) usable() error {
	switch {
	case s.closed:
		return s.wrap(fs.ErrClosed)
	case s.failed != nil:
		return fmt.Errorf("asyncagents: file store %s: refusing changes after a failed write, close and reopen it: %w",
			s.path, s.failed)
	}
	return nil
}

// Load returns the stored tasks, sorted by id. After Close it returns an error matching
// [fs.ErrClosed].
func (s *FileStore) Load(context.Context) ([]Task, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, s.wrap(fs.ErrClosed)
	}
	return s.sorted(), nil
}

// sorted returns copies of the tasks, sorted by id.
func (s *FileStore) sorted() []Task {
	out := make([]Task, 0, len(s.tasks))
	for _, id := range slices.Sorted(maps.Keys(s.tasks)) {
		e := s.tasks[id]
		out = append(out, e.task.clone())
	}
	return out
}

// Save appends a record of t to the file and fsyncs it; see [FileStore] for when it also
// compacts the file. After Close it returns an error matching [fs.ErrClosed]. When the
// record was written but the compaction that followed failed, Save returns the
// compaction's error and the record is kept all the same.
func (s *FileStore) Save(_ context.Context, t Task) error {
	line, err := encodeRecord(fileRecord{Save: &t})
	if err != nil {
		return s.wrap(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return err
	}
	if err := s.append(line); err != nil {
		return err
	}
	s.live += int64(len(line) - len(s.tasks[t.ID].line))
	t = t.clone()
	t.DisplayID = "" // not stored, as after a reopen
	s.tasks[t.ID] = fileEntry{task: t, line: line}
	return s.compactIfDue()
}

// Delete appends a record of the ids the store holds and fsyncs it; unknown ids are
// ignored, and when none is known nothing is written. After Close it returns an error
// matching [fs.ErrClosed]. A failed compaction is reported as by Save.
func (s *FileStore) Delete(_ context.Context, ids ...string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return err
	}
	known := make([]string, 0, len(ids))
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		if _, ok := s.tasks[id]; ok && !seen[id] {
			known = append(known, id)
			seen[id] = true
		}
	}
	if len(known) == 0 {
		return nil
	}
	line, err := encodeRecord(fileRecord{Delete: &known})
	if err != nil {
		return s.wrap(err)
	}
	if err := s.append(line); err != nil {
		return err
	}
	for _, id := range known {
		s.live -= int64(len(s.tasks[id].line))
		delete(s.tasks, id)
	}
	return s.compactIfDue()
}

// Close releases the lock and closes the file. It is idempotent; afterwards Load, Save and
// Delete return an error matching [fs.ErrClosed].
func (s *FileStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.tasks = nil
	var errs []error
	if s.file != nil {
		errs = append(errs, s.file.Close())
		s.file = nil
	}
	errs = append(errs, unlockFile(s.lock))
	return s.wrap(errors.Join(errs...))
}

// encodeRecord returns r as one line of JSON, without escaping <, > and & (results hold
// code).
func encodeRecord(r fileRecord) ([]byte, error) {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	if err := e.Encode(r); err != nil { // Encode ends the line with "\n"
		return nil, err
	}
	return b.Bytes(), nil
}

// append writes line at the end of the file and fsyncs it. A write that fails is cut off
// again; a failed fsync makes the store refuse further changes.
func (s *FileStore) append(line []byte) error {
	// WriteAt rather than O_APPEND: on Windows a file opened to append cannot be truncated.
	if _, err := s.file.WriteAt(line, s.size); err != nil {
		if terr := s.file.Truncate(s.size); terr != nil {
			s.failed = errors.Join(err, terr)
		}
		return s.wrap(err)
	}
	s.size += int64(len(line))
	if err := s.file.Sync(); err != nil {
		s.failed = err
		return s.wrap(err)
	}
	return nil
}

// compactIfDue rewrites the file when it has grown past compactMinBytes and twice the live
// records.
func (s *FileStore) compactIfDue() error {
	if s.size <= compactMinBytes || s.size <= 2*s.live {
		return nil
	}
	if err := s.rewrite(); err != nil {
		return fmt.Errorf("asyncagents: file store %s: the change is kept, but compacting the file failed: %w", s.path, err)
	}
	return nil
}

// rewrite replaces the file with the header and the live records, through path+".tmp",
// and opens the new file for writing.
func (s *FileStore) rewrite() error {
	tmp := s.path + ".tmp"
	size, err := writeSynced(tmp, fileHeader, s.tasks)
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	// Windows cannot rename over a file that is open; reopen it afterwards.
	if s.file != nil {
		_ = s.file.Close()
		s.file = nil
	}
	renameErr := os.Rename(tmp, s.path)
	if renameErr == nil {
		s.size, s.live = size, size
		renameErr = syncDir(filepath.Dir(s.path))
	} else {
		_ = os.Remove(tmp)
	}
	f, err := os.OpenFile(s.path, os.O_WRONLY, 0)
	if err != nil {
		s.failed = err
		return errors.Join(renameErr, err)
	}
	s.file = f
	return renameErr
}

// writeSynced writes header and the records, sorted by id, to a new file at name with mode
// 0o600, fsyncs and closes it, and returns its size.
func writeSynced(name, header string, records map[string]fileEntry) (int64, error) {
	// A file at name is the leftover of a compaction cut short: only the lock's holder
	// writes there.
	if err := os.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, err
	}
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, err
	}
	w := bufio.NewWriterSize(f, 64<<10)
	size := int64(len(header))
	_, err = w.WriteString(header)
	for _, id := range slices.Sorted(maps.Keys(records)) {
		if err != nil {
			break
		}
		size += int64(len(records[id].line))
		_, err = w.Write(records[id].line)
	}
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return size, err
}
