package nodebench

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// ProbedBinary is $PROBED_TEST_BINARY_NORACE, or cmd/probed built now
// (without the race detector, as shipped) in the project's module, whose
// root is root relative to the benchmark's package (bench's own module
// lacks the CLI's dependencies).
func ProbedBinary(tb testing.TB, root string) string {
	tb.Helper()
	if p := os.Getenv("PROBED_TEST_BINARY_NORACE"); p != "" {
		return p
	}
	out := filepath.Join(tb.TempDir(), "probed")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/probed")
	cmd.Dir = root
	if msg, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("go build ./cmd/probed: %v\n%s", err, msg)
	}
	return out
}
