package bound_test

import (
	"errors"
	"io/fs"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/probed/probed/runtime/bound"
)

// TestCut: short text is unchanged; long text keeps both ends, says how
// many bytes were cut, is never longer than asked and stays valid UTF-8.
func TestCut(t *testing.T) {
	if got := bound.Cut("connect: connection refused", 64); got != "connect: connection refused" {
		t.Errorf("short text changed: %q", got)
	}
	long := `Get "http://10.0.0.1:8080/` + strings.Repeat("a", 250_000) + `": dial tcp 10.0.0.1:8080: connect: connection refused`
	got := bound.Cut(long, bound.MessageBytes)
	if len(got) > bound.MessageBytes || !strings.HasPrefix(got, `Get "http://10.0.0.1:8080/aaa`) ||
		!strings.HasSuffix(got, "connect: connection refused") || !strings.Contains(got, " bytes cut]…") {
		t.Errorf("Cut = %q (%d bytes)", got, len(got))
	}
	for _, n := range []int{0, 10, 64, 65, 100, 1000} {
		s := strings.Repeat("é✓", 500) // 2- and 3-byte characters
		c := bound.Cut(s, n)
		if len(c) > max(n, 64) || !utf8.ValidString(c) {
			t.Errorf("Cut(%d) = %d bytes, valid UTF-8 %v", n, len(c), utf8.ValidString(c))
		}
	}
}

// TestError: a long error's message is cut and still unwraps to it.
func TestError(t *testing.T) {
	if bound.Error(nil, 100) != nil {
		t.Error("nil error not nil")
	}
	short := errors.New("refused")
	if bound.Error(short, 100) != short {
		t.Error("short error wrapped")
	}
	long := &fs.PathError{Op: "open", Path: strings.Repeat("p", 5000), Err: fs.ErrNotExist}
	cut := bound.Error(long, 200)
	if len(cut.Error()) > 200 || !errors.Is(cut, fs.ErrNotExist) || !strings.HasSuffix(cut.Error(), "file does not exist") {
		t.Errorf("cut error %q (%d bytes)", cut, len(cut.Error()))
	}
}
