//go:build unix

package pluginhost

import (
	"errors"
	"os"
	"syscall"
)

const fileNoFollow = syscall.O_NOFOLLOW

// tryLock takes an exclusive flock of f without waiting; false when
// another open file holds it.
func tryLock(f *os.File) (bool, error) {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return false, nil
	}
	return err == nil, err
}
