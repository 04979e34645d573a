package procstat

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestParse: the command name may hold spaces and ')'; the fields are read
// after the last ')'.
func TestParse(t *testing.T) {
	line := "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 100 0 0 0 7 3 2 1 20 0 1 0 987654 1000 10 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n"
	s, ok := Parse([]byte(line))
	if !ok {
		t.Fatal("a stat line was not read")
	}
	want := Stat{PID: 4242, PPID: 1, PGID: 4242, Comm: "a) b (c)", State: 'S', UTime: 7, STime: 3, CUTime: 2, CSTime: 1, Start: 987654}
	if s != want {
		t.Fatalf("Parse = %+v, want %+v", s, want)
	}
	for _, bad := range []string{"", "4242 (x", "x (y) S 1", "1 (y) S 1 2 3"} {
		if _, ok := Parse([]byte(bad)); ok {
			t.Errorf("Parse(%q) read a stat line", bad)
		}
	}
}

// TestReadSelf reads this process's own line from /proc.
func TestReadSelf(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc here")
	}
	s, ok := Read(os.Getpid())
	if !ok || s.PID != os.Getpid() || s.PPID != os.Getppid() || s.Gone() {
		t.Fatalf("Read(self) = %+v, %v", s, ok)
	}
	found := false
	for _, p := range All() {
		found = found || p.PID == os.Getpid()
	}
	if !found {
		t.Fatal("All does not list this process")
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
