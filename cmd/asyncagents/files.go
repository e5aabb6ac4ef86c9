package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// stateDir returns the folder of the store and the token: $XDG_STATE_HOME/asyncagents, else
// ~/.local/state/asyncagents on Unix and <user config dir>/asyncagents on Windows and macOS.
func stateDir() (string, error) {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "asyncagents"), nil
	}
	if runtime.GOOS == "windows" || runtime.GOOS == "darwin" {
		d, err := os.UserConfigDir()
		if err != nil {
			return "", err
		}
		return filepath.Join(d, "asyncagents"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, ".local", "state", "asyncagents"), nil
}

// defaultPath returns name in the state folder, or "" when there is none (the flag is then
// required).
func defaultPath(name string) string {
	d, err := stateDir()
	if err != nil {
		return ""
	}
	return filepath.Join(d, name)
}

// tokenBytes is the size of a generated token: 32 random bytes, 64 hex digits.
const tokenBytes = 32

// loadToken reads the token at path; with create, a missing file is created with a new
// random token (mode 0600, folders 0700). A token is one line of at least 16 printable
// characters without spaces. On Unix the file must pass checkSecretFile (as ssh checks a
// private key): a symbolic link, a file others may read, or a file in a directory others
// may write is refused with the command that fixes it.
func loadToken(path string, create bool) (string, error) {
	if path == "" {
		return "", errors.New("no token file: set -token-file")
	}
	err := checkSecretFile("token file", path, os.Getuid())
	if errors.Is(err, fs.ErrNotExist) && create {
		return newToken(path)
	}
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < 16 || strings.ContainsAny(tok, " \t\r\n") {
		return "", fmt.Errorf("token file %s: want one line of at least 16 characters without spaces", path)
	}
	return tok, nil
}

// randomToken returns tokenBytes random bytes from crypto/rand, hex-encoded.
func randomToken() (string, error) {
	b := make([]byte, tokenBytes)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// newToken writes a new token to path, which must not exist, and reads it back as
// loadToken does, checks included.
func newToken(path string) (string, error) {
	tok, err := randomToken()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) { // another serve or install made it first
		return loadToken(path, false)
	}
	if err != nil {
		return "", err
	}
	if _, err := f.WriteString(tok + "\n"); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return loadToken(path, false)
}

// loadRecordKey reads the key that seals task records (asyncagents.WithRecordKey) from path:
// one line of at least 32 characters without spaces, in a file that passes checkSecretFile
// as a token file does. It is never created: hosts of one store must share it.
func loadRecordKey(path string) ([]byte, error) {
	key, err := loadToken(path, false)
	if err != nil {
		return nil, fmt.Errorf("record key: %w", err)
	}
	if len(key) < 32 {
		return nil, fmt.Errorf("record key file %s: want at least 32 characters, it has %d", path, len(key))
	}
	return []byte(key), nil
}
