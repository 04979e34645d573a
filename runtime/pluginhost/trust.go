package pluginhost

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// checkTrusted refuses a plugin binary or plugin directory that someone
// other than root or the agent's own user could replace, as sshd's
// StrictModes refuses an authorized_keys file (OpenSSH's safe_path): the
// file itself (symlinks followed) and every directory above it, on the path
// as given and on its resolved path, must be owned by root or by the
// agent's effective user, and writable by neither its group nor others.
// One exception, where sshd has none: a directory with the sticky bit (such
// as /tmp) may be writable by all, since only the owner of an entry in it
// can rename or remove that entry, and the entry below it is checked too.
// what names the path in the error ("plugin directory", "plugin binary").
// The error names the offending path, its mode, owner and why it matters.
// Outside Unix owners are not known and only the modes are checked.
func checkTrusted(what, path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("%s %s: %w", what, path, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return fmt.Errorf("%s %s: %w", what, path, err)
	}
	checked := map[string]bool{}
	check := func(p string, top bool) error {
		if checked[p] {
			return nil
		}
		checked[p] = true
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("%s %s: %w", what, path, err)
		}
		if why := untrusted(fi, top); why != "" {
			kind := "directory"
			if !fi.IsDir() {
				kind = "file"
			}
			subject := fmt.Sprintf("%s %s", kind, p)
			if p == abs || p == real {
				subject = p
			}
			return fmt.Errorf("%s %s: refused: %s %s (mode %s, owner uid %s): whoever can write it can make probed run their program; "+
				"make it owned by root or by probed's user (uid %d) and writable by its owner only (chmod go-w), as sshd's StrictModes requires",
				what, path, subject, why, fi.Mode(), ownerString(fi), os.Geteuid())
		}
		return nil
	}
	for _, start := range []string{abs, real} {
		for p, top := start, true; ; p, top = filepath.Dir(p), false {
			if err := check(p, top); err != nil {
				return err
			}
			if parent := filepath.Dir(p); parent == p {
				break
			}
		}
	}
	return nil
}

// untrusted says why fi may not be trusted, or "" when it may. top is the
// checked file or directory itself (not one of its parents).
func untrusted(fi fs.FileInfo, top bool) string {
	if uid, ok := fileOwner(fi); ok && uid != 0 && uid != os.Geteuid() {
		return "is owned by another user"
	}
	mode := fi.Mode()
	if mode&0o022 == 0 || (fi.IsDir() && mode&fs.ModeSticky != 0 && !top) {
		return ""
	}
	if mode&0o002 != 0 {
		return "is writable by others"
	}
	return "is writable by its group"
}

func ownerString(fi fs.FileInfo) string {
	if uid, ok := fileOwner(fi); ok {
		return fmt.Sprint(uid)
	}
	return "unknown"
}
