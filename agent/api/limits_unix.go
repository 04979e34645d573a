//go:build unix

package api

import "syscall"

// openFileLimit returns the process's RLIMIT_NOFILE soft limit, 0 when it
// cannot be read.
func openFileLimit() uint64 {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0
	}
	return uint64(l.Cur)
}
