package state

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// unwritableDir returns a state directory that really refuses writes, also
// to root (for whom chmod 0500 stops nothing): a regular file where the
// directory should be, so creating the temporary state file fails with
// ENOTDIR. fix turns it into a writable directory.
func unwritableDir(t *testing.T) (dir string, fix func()) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "state")
	if err := os.WriteFile(dir, []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, func() {
		t.Helper()
		if err := os.Remove(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWriter_BacksOffWhileWritesFail: with writes failing, a Save every
// second (the agent's --state-interval) attempts a write only after each
// back-off (1 s doubling to 1 min) and logs the first failure, each longer
// back-off and, at the longest, every 10 minutes: 9 ERROR lines in 12
// minutes instead of 720. The first write that succeeds again is logged at
// INFO, and writes then happen on every Save again.
func TestWriter_BacksOffWhileWritesFail(t *testing.T) {
	dir, fix := unwritableDir(t)
	var logs bytes.Buffer
	clk := clocktesting.NewFakePassiveClock(time.Unix(1_700_000_000, 0))
	w := NewWriter(dir, WriterOptions{Clock: clk, Logger: slog.New(slog.NewTextHandler(&logs, nil))})

	start := clk.Now()
	var attempts []time.Duration // when (since start) a failing write was attempted
	for s := 0; s < 12*60; s++ {
		clk.SetTime(start.Add(time.Duration(s) * time.Second))
		if w.Save(samplePods(), false) {
			t.Fatalf("Save into %s reported success", dir)
		}
		if w.failures > len(attempts) { // this Save attempted a write
			attempts = append(attempts, clk.Now().Sub(start))
		}
	}
	// Attempts at 0, 1, 3, 7, 15, 31, 63 s (waits 1, 2, 4, 8, 16, 32, 60 s),
	// then every 60 s.
	want := []time.Duration{0, 1, 3, 7, 15, 31, 63, 123, 183}
	for i, at := range want {
		if i >= len(attempts) || attempts[i] != at*time.Second {
			t.Fatalf("attempts at %v, want them to start with %v (seconds)", attempts, want)
		}
	}
	if n := len(attempts); n != 7+(12*60-1-63)/60 {
		t.Errorf("%d attempts in 12 minutes, want %d", n, 7+(12*60-1-63)/60)
	}
	errorLines := strings.Count(logs.String(), "level=ERROR")
	// 0..63 s: one line per attempt (the wait grew each time); at 60 s
	// waits: one more 10 minutes after the cap was reached (663 s).
	if errorLines != 8 {
		t.Errorf("%d ERROR lines in 12 minutes, want 8:\n%s", errorLines, logs.String())
	}
	if !strings.Contains(logs.String(), "not a directory") || !strings.Contains(logs.String(), "nextAttemptIn=1m0s") {
		t.Errorf("the log does not say why and when the next attempt is:\n%s", logs.String())
	}

	// The directory is fixed: nothing is written before the back-off ends.
	fix()
	last := attempts[len(attempts)-1]
	clk.SetTime(start.Add(last + 59*time.Second))
	if w.Save(samplePods(), false) {
		t.Fatal("Save wrote during the back-off")
	}
	if _, err := os.Stat(filepath.Join(dir, FileName)); !os.IsNotExist(err) {
		t.Fatalf("state file written during the back-off: %v", err)
	}
	clk.SetTime(start.Add(last + 60*time.Second))
	if !w.Save(samplePods(), false) {
		t.Fatalf("Save after the back-off into a writable dir failed:\n%s", logs.String())
	}
	if got, err := Load(dir); err != nil || len(got) != 1 {
		t.Fatalf("Load after recovery: %v, %v", got, err)
	}
	if n := strings.Count(logs.String(), `level=INFO msg="state written again"`); n != 1 {
		t.Errorf("%d recovery lines, want 1:\n%s", n, logs.String())
	}
	clk.SetTime(clk.Now().Add(time.Second))
	if !w.Save(samplePods(), false) {
		t.Error("the Save after a recovery was not written")
	}
	if n := strings.Count(logs.String(), "state written again"); n != 1 {
		t.Errorf("recovery logged %d times, want once", n)
	}
}

// TestWriter_ForceIgnoresBackoff: the final write at shutdown is attempted
// during a back-off, and its failure is logged.
func TestWriter_ForceIgnoresBackoff(t *testing.T) {
	dir, fix := unwritableDir(t)
	var logs bytes.Buffer
	clk := clocktesting.NewFakePassiveClock(time.Unix(1_700_000_000, 0))
	w := NewWriter(dir, WriterOptions{Clock: clk, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	w.Save(samplePods(), false)
	clk.SetTime(clk.Now().Add(100 * time.Millisecond))
	if w.Save(samplePods(), true) {
		t.Fatal("forced Save into a file reported success")
	}
	if n := strings.Count(logs.String(), "level=ERROR"); n != 2 {
		t.Errorf("%d ERROR lines, want 2 (the first failure, the forced one):\n%s", n, logs.String())
	}
	fix()
	if !w.Save(samplePods(), true) {
		t.Fatalf("forced Save during the back-off did not write:\n%s", logs.String())
	}
}
