package fileread_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/probed/probed/runtime/fileread"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// returns fails the test when f does not return within a generous bound:
// the defect under test is a read that never returns.
func returns(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: did not return (hangs)", what)
	}
}

// specialFiles makes, in dir, a symlink to each kind of file probed must
// refuse, and returns them by the description the error must give.
func specialFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for what, target := range map[string]string{
		"a FIFO (named pipe)": fifo,
		"a character device":  "/dev/zero",
		"a socket":            sock,
		"a directory":         sub,
	} {
		link := filepath.Join(dir, "link-to-"+filepath.Base(target)+".yaml")
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		out[what] = link
	}
	return out
}

// TestRefusesWhatIsNotARegularFile: a FIFO without a writer, /dev/zero, a
// socket and a directory, each behind a symlink, are refused at once by
// ReadFile and SHA256 with an error naming the path and what it is.
func TestRefusesWhatIsNotARegularFile(t *testing.T) {
	for what, path := range specialFiles(t, t.TempDir()) {
		for name, read := range map[string]func() error{
			"ReadFile": func() error { _, err := fileread.ReadFile(path, 1<<20); return err },
			"SHA256":   func() error { _, err := fileread.SHA256(path, 1<<20); return err },
		} {
			var err error
			returns(t, name+" of "+what, func() { err = read() })
			want := path + ": is " + what + ", not a regular file"
			if err == nil || err.Error() != want {
				t.Errorf("%s(%s): %v, want %q", name, what, err, want)
			}
			var fe *fileread.Error
			if !errors.Is(err, fileread.ErrNotRegular) || !errors.As(err, &fe) || fe.Path != path {
				t.Errorf("%s(%s): %#v does not wrap ErrNotRegular in an *Error for the path", name, what, err)
			}
		}
	}
}

// TestSizeLimit: a file over the limit is refused naming the file and the
// limit, whether fstat tells its size (a regular file) or not (a /proc
// file, size 0, like a file that grows while it is read); at the limit it
// is read whole.
func TestSizeLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big")
	data := bytes.Repeat([]byte("x"), 1000)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := fileread.ReadFile(path, 1000)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("at the limit: %d bytes, %v", len(got), err)
	}
	_, err = fileread.ReadFile(path, 999)
	if want := path + ": file is 1000 bytes, more than the limit of 999 bytes"; err == nil || err.Error() != want || !errors.Is(err, fileread.ErrTooLarge) {
		t.Errorf("over the limit: %v, want %q", err, want)
	}
	sum, err := fileread.SHA256(path, 1000)
	if want := sha256.Sum256(data); err != nil || !bytes.Equal(sum, want[:]) {
		t.Errorf("SHA256: %x, %v; want %x", sum, err, want)
	}
	if _, err := fileread.SHA256(path, 999); !errors.Is(err, fileread.ErrTooLarge) {
		t.Errorf("SHA256 over the limit: %v", err)
	}

	// fstat says 0 bytes; the read finds more.
	const proc = "/proc/self/status"
	if fi, err := os.Stat(proc); err != nil || fi.Size() != 0 {
		t.Skipf("%s: %v, size not 0", proc, err)
	}
	_, err = fileread.ReadFile(proc, 16)
	if want := proc + ": file is more than the limit of 16 bytes"; err == nil || err.Error() != want || !errors.Is(err, fileread.ErrTooLarge) {
		t.Errorf("%s: %v, want %q", proc, err, want)
	}
	if _, err := fileread.SHA256(proc, 16); !errors.Is(err, fileread.ErrTooLarge) {
		t.Errorf("SHA256 of %s: %v", proc, err)
	}
}

// TestOpenErrorsNameThePath: a missing file is the os error, which names
// the path.
func TestOpenErrorsNameThePath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing")
	_, err := fileread.ReadFile(path, 10)
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), path) {
		t.Errorf("missing file: %v", err)
	}
}
