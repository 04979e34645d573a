package testlog

import (
	"fmt"
	"log/slog"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestBufferUnderConcurrentWriters: a logger's writes from many goroutines
// all arrive whole, and the readers see them (run under -race).
func TestBufferUnderConcurrentWriters(t *testing.T) {
	var b Buffer
	log := slog.New(slog.NewJSONHandler(&b, nil))
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 50 {
				log.Info("run", "n", fmt.Sprint(i, "-", j))
				_ = b.Count(`"msg":"run"`)
			}
		})
	}
	wg.Wait()
	if n := len(b.Lines()); n != 400 {
		t.Fatalf("%d lines, want 400", n)
	}
	if n := len(b.Records("run")); n != 400 {
		t.Fatalf("%d records of msg run, want 400", n)
	}
	if n := b.Count(`"msg":"run"`); n != 400 {
		t.Fatalf("Count = %d, want 400", n)
	}
	var empty Buffer
	if empty.Lines() != nil || empty.Records("run") != nil || empty.String() != "" {
		t.Fatal("an empty buffer has content")
	}
}
