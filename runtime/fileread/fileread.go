// Package fileread opens and reads the files probed is given — manifests,
// the state file, the plugin configuration, plugin binaries to hash — so
// that no such file can hang or exhaust the agent:
//
//   - the file is opened without blocking (O_NONBLOCK, and O_NOCTTY): opening
//     a FIFO with no writer returns at once instead of waiting for one;
//   - the opened file is Stat'ed (fstat, so what is checked is what was
//     opened, symlinks followed) and refused unless it is a regular file,
//     with an error naming the path and what it is (a FIFO, a character
//     device such as /dev/zero, a socket, a directory, ...);
//   - it is read through a limit of max+1 bytes, so a file that grows while
//     it is read, or whose size fstat does not tell (/proc files), cannot
//     make the agent read without end; more than max bytes is an error
//     naming the file and the limit.
//
// Each kind of file has its own limit, set by its reader (see
// docs/operations.md, "What probed reads"). The package lives under
// runtime/ because runtime/pluginhost uses it and runtime imports nothing
// outside itself (DESIGN.md); the agent's packages use it too, so there is
// one rule for every file probed reads.
package fileread

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
)

// ErrNotRegular is wrapped by the *Error for a path that is not a regular
// file.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is wrapped by the *Error for a file of more than the limit.
var ErrTooLarge = errors.New("file too large")

// Error is a refused file: Path as given, Detail what is wrong with it
// ("is a FIFO (named pipe), not a regular file", "file is 9000000 bytes,
// more than the limit of 8388608 bytes"), Err ErrNotRegular or ErrTooLarge.
type Error struct {
	Path   string
	Detail string
	Err    error
}

// Error implements error: "path: detail".
func (e *Error) Error() string { return e.Path + ": " + e.Detail }

// Unwrap returns ErrNotRegular or ErrTooLarge.
func (e *Error) Unwrap() error { return e.Err }

// Open opens path for reading without blocking and returns it with its
// fstat information, or an error: the *fs.PathError of open or fstat
// (missing file, no permission, ...), or an *Error wrapping ErrNotRegular
// when path is not a regular file (symlinks followed). The caller closes
// the file. Reads of a regular file behave as usual (O_NONBLOCK has no
// effect on them).
func Open(path string) (*os.File, fs.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|openFlags, 0)
	if err != nil {
		// open(2) of a unix socket fails (ENXIO) before there is a file
		// to Stat: name what the path is when it is not a regular file.
		if fi, serr := os.Stat(path); serr == nil && !fi.Mode().IsRegular() {
			return nil, nil, notRegular(path, fi.Mode())
		}
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, notRegular(path, fi.Mode())
	}
	return f, fi, nil
}

// ReadFile returns the content of the regular file at path, at most max
// bytes (max > 0). See Open for the errors; a file of more than max bytes —
// by its size, or by what could be read — is an *Error wrapping
// ErrTooLarge, and nothing of it is returned.
func ReadFile(path string, max int64) ([]byte, error) {
	f, fi, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi.Size() > max {
		return nil, tooLarge(path, fi.Size(), max)
	}
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, tooLarge(path, -1, max)
	}
	return data, nil
}

// SHA256 returns the SHA-256 of the regular file at path, streamed (the
// file is not held in memory), reading at most max bytes. See ReadFile for
// the errors.
func SHA256(path string, max int64) ([]byte, error) {
	return Hash(path, max, sha256.New())
}

// Hash writes the content of the regular file at path into h, streamed,
// reading at most max bytes, and returns h's sum. See ReadFile for the
// errors.
func Hash(path string, max int64, h hash.Hash) ([]byte, error) {
	f, fi, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi.Size() > max {
		return nil, tooLarge(path, fi.Size(), max)
	}
	n, err := io.Copy(h, io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if n > max {
		return nil, tooLarge(path, -1, max)
	}
	return h.Sum(nil), nil
}

func tooLarge(path string, size, max int64) *Error {
	if size < 0 {
		return &Error{Path: path, Detail: fmt.Sprintf("file is more than the limit of %d bytes", max), Err: ErrTooLarge}
	}
	return &Error{Path: path, Detail: fmt.Sprintf("file is %d bytes, more than the limit of %d bytes", size, max), Err: ErrTooLarge}
}

func notRegular(path string, mode fs.FileMode) *Error {
	return &Error{Path: path, Detail: "is " + Describe(mode) + ", not a regular file", Err: ErrNotRegular}
}

// Describe names the type of a file mode for an error message: "a regular
// file", "a directory", "a FIFO (named pipe)", "a character device", "a
// block device", "a socket", "a symbolic link", "an irregular file".
func Describe(mode fs.FileMode) string {
	switch t := mode.Type(); {
	case t == 0:
		return "a regular file"
	case t&fs.ModeDir != 0:
		return "a directory"
	case t&fs.ModeNamedPipe != 0:
		return "a FIFO (named pipe)"
	case t&fs.ModeCharDevice != 0:
		return "a character device"
	case t&fs.ModeDevice != 0:
		return "a block device"
	case t&fs.ModeSocket != 0:
		return "a socket"
	case t&fs.ModeSymlink != 0:
		return "a symbolic link"
	}
	return "an irregular file"
}
