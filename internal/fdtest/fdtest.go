//go:build unix

// Package fdtest runs a test's body in a child process whose descriptor
// table is full, so that the body meets real EMFILE errors from socket(2),
// pipe(2) and open(2) (probes of a prober out of descriptors are
// errored, never a Failure of the target). The child is the test binary
// itself, re-run for the one test; the parent only waits for it.
//
//	func TestX(t *testing.T) {
//		if fdtest.InChild() {
//			release := fdtest.Exhaust(t)
//			defer release()
//			... // dial, exec: every new descriptor fails with EMFILE
//			return
//		}
//		fdtest.RunChild(t)
//	}
package fdtest

import (
	"errors"
	"os"
	"os/exec"
	"regexp"
	"syscall"
	"testing"
)

// childEnv marks the child process.
const childEnv = "PROBED_FDTEST_CHILD"

// InChild reports whether this process is the child RunChild started.
func InChild() bool { return os.Getenv(childEnv) == "1" }

// RunChild re-runs the current test (t.Name()) in a child process with
// InChild true and fails t with the child's output when the child fails.
func RunChild(t *testing.T) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+regexp.QuoteMeta(t.Name())+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child process of %s: %v\n%s", t.Name(), err, out)
	}
	t.Logf("child process of %s:\n%s", t.Name(), out)
}

// limit is the RLIMIT_NOFILE the child sets before it fills the table: low,
// so that filling it takes few descriptors.
const limit = 256

// Exhaust lowers the process's RLIMIT_NOFILE (soft) to 256 and opens
// /dev/null until open fails with EMFILE. From then on every call that
// needs a new descriptor fails with EMFILE until release closes them (and
// restores the limit). Call it only in the child (InChild).
func Exhaust(t *testing.T) (release func()) {
	t.Helper()
	if !InChild() {
		t.Fatal("fdtest.Exhaust outside the child process")
	}
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	low := old
	low.Cur = min(limit, old.Max)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	var fds []int
	for {
		fd, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if errors.Is(err, syscall.EMFILE) {
			break
		}
		if err != nil {
			t.Fatalf("filling the descriptor table: %v", err)
		}
		fds = append(fds, fd)
		if len(fds) > limit {
			t.Fatalf("opened %d descriptors without EMFILE under RLIMIT_NOFILE %d", len(fds), low.Cur)
		}
	}
	return func() {
		for _, fd := range fds {
			_ = syscall.Close(fd)
		}
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old)
	}
}
