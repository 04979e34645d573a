// Package testlog is the tests' log sink: Buffer, a bytes.Buffer safe for
// the concurrent writes of a logger (slog handlers, a probed child's
// stderr) and the reads of the test that checks what was logged. It is
// the one copy the tests of every package share.
package testlog

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
)

// Buffer collects what is written to it; its zero value is ready. All
// methods are safe for concurrent use.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Lines returns the lines written so far, without the surrounding blank
// space; nil when nothing was.
func (b *Buffer) Lines() []string {
	s := strings.TrimSpace(b.String())
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// Count returns how many times s was written (strings.Count).
func (b *Buffer) Count(s string) int { return strings.Count(b.String(), s) }

// Records returns the JSON log records (slog.JSONHandler's lines) whose
// msg is msg, decoded; lines that are not JSON are skipped.
func (b *Buffer) Records(msg string) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(b.String(), "\n") {
		var rec map[string]any
		if line == "" || json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		if rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}
