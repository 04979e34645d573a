package main

import (
	"io"
	"log/slog"
	"math"
	"runtime/debug"
	"strings"
	"testing"
)

// The Go runtime's soft memory limit follows the container's
// limit (PROBED_MEMORY_LIMIT from the downward API), at 90%; GOMEMLIMIT
// wins when set; a value that is not a number of bytes is an error naming
// the variable.
func TestApplyMemoryLimit(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	t.Setenv("GOMEMLIMIT", "")
	t.Setenv(EnvMemoryLimit, "268435456")
	got, err := applyMemoryLimit(quiet)
	if err != nil || got != 241591910 || debug.SetMemoryLimit(-1) != 241591910 {
		t.Fatalf("applyMemoryLimit = %d, %v; runtime limit %d; want 90%% of 256Mi, 241591910", got, err, debug.SetMemoryLimit(-1))
	}

	debug.SetMemoryLimit(math.MaxInt64)
	t.Setenv("GOMEMLIMIT", "100MiB")
	if got, err := applyMemoryLimit(quiet); err != nil || got != 0 || debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Fatalf("with GOMEMLIMIT set: %d, %v; runtime limit %d, want it untouched", got, err, debug.SetMemoryLimit(-1))
	}

	t.Setenv("GOMEMLIMIT", "")
	t.Setenv(EnvMemoryLimit, "256Mi")
	if _, err := applyMemoryLimit(quiet); err == nil || !strings.Contains(err.Error(), EnvMemoryLimit) {
		t.Fatalf("error %v, want one naming %s", err, EnvMemoryLimit)
	}
	t.Setenv(EnvMemoryLimit, "")
	if got, err := applyMemoryLimit(quiet); err != nil || got != 0 {
		t.Fatalf("unset: %d, %v", got, err)
	}
}
