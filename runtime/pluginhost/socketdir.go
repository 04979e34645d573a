package pluginhost

import (
	"fmt"
	"os"
	"path/filepath"
)

// socketDirPattern names the hosts' socket directories in
// Options.SocketDir.
const socketDirPattern = "probed-plugins-"

// socketDirLock is the file in a socket directory that its host keeps
// locked (flock) while it lives.
const socketDirLock = ".lock"

// makeSocketDir creates the host's private socket directory in base
// (default: the system's temporary directory), mode 0700, and locks it for
// the host's life; unlock releases the lock. Directories left by agents
// that were killed (their lock is free) are removed first. The lock works
// across PID namespaces sharing the directory, so a live agent's directory
// is never taken for a dead one's.
func makeSocketDir(base string) (dir string, unlock func(), err error) {
	if base == "" {
		base = os.TempDir()
	}
	removeStaleSocketDirs(base)
	dir, err = os.MkdirTemp(base, socketDirPattern)
	if err != nil {
		return "", nil, fmt.Errorf("plugins: socket directory: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, socketDirLock), os.O_CREATE|os.O_RDWR, 0o600)
	if err == nil {
		if ok, lerr := tryLock(lock); !ok || lerr != nil {
			lock.Close()
			err = fmt.Errorf("locking it: %v", lerr)
		}
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, fmt.Errorf("plugins: socket directory %s: %w", dir, err)
	}
	return dir, func() { lock.Close() }, nil
}

// removeStaleSocketDirs removes the socket directories in base whose lock
// no host holds (best effort).
func removeStaleSocketDirs(base string) {
	dirs, _ := filepath.Glob(filepath.Join(base, socketDirPattern+"*"))
	for _, d := range dirs {
		lock, err := os.OpenFile(filepath.Join(d, socketDirLock), os.O_RDWR|fileNoFollow, 0)
		if err != nil {
			continue // not ours, or not a host's directory
		}
		if ok, err := tryLock(lock); ok && err == nil {
			_ = os.RemoveAll(d)
		}
		lock.Close()
	}
}
