//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// S-4 (issue 14): a token file is checked as ssh checks a private key and, with
// StrictModes, the folders above authorized_keys: each refusal names the fix, and changes
// nothing.
func TestLoadTokenRefusesUnsafeFiles(t *testing.T) {
	const tok = "0123456789abcdef0123456789abcdef"
	// private returns a new folder of mode 0700 holding a token file of mode 0600.
	private := func(t *testing.T) (dir, file string) {
		dir = filepath.Join(t.TempDir(), "state")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		file = filepath.Join(dir, "token")
		if err := os.WriteFile(file, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return dir, file
	}
	chmod := func(t *testing.T, p string, mode os.FileMode) {
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("private file", func(t *testing.T) {
		_, file := private(t)
		if got, err := loadToken(file, false); err != nil || got != tok {
			t.Errorf("loadToken = %q, %v", got, err)
		}
	})
	t.Run("sticky world-writable folder above", func(t *testing.T) { // as /tmp
		dir, file := private(t)
		chmod(t, filepath.Dir(dir), 0o777|os.ModeSticky)
		if _, err := loadToken(file, false); err != nil {
			t.Errorf("loadToken below a sticky folder: %v", err)
		}
	})
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir, file string) string // returns the path to load
		want  string
	}{
		{"readable by others", func(t *testing.T, _, file string) string { chmod(t, file, 0o644); return file },
			"has mode 0644: others may read or change it; run: chmod 600 "},
		{"readable by the group", func(t *testing.T, _, file string) string { chmod(t, file, 0o640); return file },
			"run: chmod 600 "},
		{"symbolic link", func(t *testing.T, dir, file string) string {
			link := filepath.Join(dir, "link")
			if err := os.Symlink(file, link); err != nil {
				t.Fatal(err)
			}
			return link
		}, "is a symbolic link"},
		{"folder writable by others", func(t *testing.T, dir, file string) string { chmod(t, dir, 0o777); return file },
			"has mode 0777: others may replace the file; run: chmod go-w "},
		{"folder above writable by the group", func(t *testing.T, dir, file string) string {
			chmod(t, filepath.Dir(dir), 0o770)
			return file
		}, "run: chmod go-w " + "DIR"},
		{"not a file", func(t *testing.T, dir, _ string) string { return dir }, "not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, file := private(t)
			p := tc.setup(t, dir, file)
			want := strings.ReplaceAll(tc.want, "DIR", filepath.Dir(dir))
			_, err := loadToken(p, true)
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), p) {
				t.Errorf("loadToken(%s) = %v; want an error naming it and %q", p, err, want)
			}
			if b, _ := os.ReadFile(file); string(b) != tok+"\n" {
				t.Errorf("the token file changed: %q", b)
			}
		})
	}
	t.Run("another user's file or folder", func(t *testing.T) {
		dir, file := private(t)
		other := os.Getuid() + 1
		if err := checkSecretFile("token file", file, other); err == nil || !strings.Contains(err.Error(), "not to you") {
			t.Errorf("a file of another user: %v", err)
		}
		if err := checkPrivateDir(dir, other); err == nil || !strings.Contains(err.Error(), "not to you") {
			t.Errorf("a folder of another user: %v", err)
		}
	})
}

func TestCheckPrivateDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := checkPrivateDir(dir, os.Getuid()); err != nil {
		t.Errorf("mode 0700: %v", err)
	}
	if err := os.Chmod(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := checkPrivateDir(dir, os.Getuid()); err == nil || !strings.Contains(err.Error(), "run: chmod 700 "+dir) {
		t.Errorf("mode 0750: %v; want an error naming chmod 700", err)
	}
}

// -record-key-file: a key of 32 characters or more in a private file seals the records; a
// shorter one, a missing file (a key is never made: hosts share it) or one others may read
// is refused.
func TestLoadRecordKey(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	write := func(name, body string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := strings.Repeat("k", 40)
	if key, err := loadRecordKey(write("key", good+"\n", 0o600)); err != nil || string(key) != good {
		t.Errorf("loadRecordKey = %q, %v", key, err)
	}
	for name, path := range map[string]string{
		"short":    write("short", strings.Repeat("k", 20), 0o600),
		"readable": write("readable", good, 0o644),
		"missing":  filepath.Join(dir, "missing"),
	} {
		if _, err := loadRecordKey(path); err == nil || !strings.Contains(err.Error(), "record key") {
			t.Errorf("%s: loadRecordKey = %v, want an error naming the record key", name, err)
		}
	}
}
