//go:build unix

package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// checkSecretFile returns an error, naming the fix, unless path is safe to take a secret
// from for the user uid, by the rules ssh applies to private keys and, with StrictModes, to
// authorized_keys: path is a regular file, not a symbolic link; it belongs to uid; its group
// and others have no permission on it; and every directory from its own up to the root
// belongs to uid or to root and is not writable by group or others — unless the directory
// has the sticky bit (as /tmp), where others cannot rename or remove what is not theirs, so
// the path below it cannot be swapped (ssh makes no such exception; without it no token
// file under /tmp could be used). what names the file in messages ("token file").
func checkSecretFile(what, path string, uid int) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("%s %s is a symbolic link, which others may be able to point elsewhere: name the file itself", what, path)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s %s is not a regular file", what, path)
	}
	if owner := ownerOf(fi); owner != uid {
		return fmt.Errorf("%s %s belongs to uid %d, not to you (uid %d): use a file of your own", what, path, owner, uid)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("%s %s has mode %04o: others may read or change it; run: chmod 600 %s", what, path, perm, path)
	}
	dir, err := filepath.EvalSymlinks(filepath.Dir(path))
	if err != nil {
		return err
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return err
	}
	for {
		fi, err := os.Stat(dir)
		if err != nil {
			return err
		}
		if owner := ownerOf(fi); owner != uid && owner != 0 {
			return fmt.Errorf("%s %s: the directory %s belongs to uid %d, neither you nor root, who could replace the file",
				what, path, dir, owner)
		}
		if perm := fi.Mode().Perm(); perm&0o022 != 0 && fi.Mode()&fs.ModeSticky == 0 {
			return fmt.Errorf("%s %s: the directory %s has mode %04o: others may replace the file; run: chmod go-w %s",
				what, path, dir, perm, dir)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return nil
		}
		dir = parent
	}
}

// checkPrivateDir returns an error, naming the fix, unless dir belongs to uid and its group
// and others have no permission on it (mode 0700 or less).
func checkPrivateDir(dir string, uid int) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if owner := ownerOf(fi); owner != uid {
		return fmt.Errorf("the directory %s belongs to uid %d, not to you (uid %d)", dir, owner, uid)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("the directory %s has mode %04o: it must be yours alone; run: chmod 700 %s", dir, perm, dir)
	}
	return nil
}

// ownerOf returns the uid that owns the file fi describes.
func ownerOf(fi fs.FileInfo) int {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}
