// Package testevents is the tests' event recorder: Log, a runtime.Recorder
// that keeps each event as one "Type Reason message" line, safe for the
// concurrent calls of the workers and the reads of the test. It is the one
// copy the tests of every package share; tests of what reaches the API
// server use the real sink (agent/kube/kevents) instead.
package testevents

import (
	"fmt"
	"slices"
	"sync"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"
)

// Log records events; its zero value is ready.
type Log struct {
	mu    sync.Mutex
	lines []string
}

// Eventf implements runtime.Recorder: it keeps "eventtype reason message".
func (l *Log) Eventf(_ k8sruntime.Object, eventtype, reason, messageFmt string, args ...any) {
	l.Add(eventtype + " " + reason + " " + fmt.Sprintf(messageFmt, args...))
}

// Add keeps a line as it is (a recorder that wraps Log adds what it reads
// of the object).
func (l *Log) Add(line string) {
	l.mu.Lock()
	l.lines = append(l.lines, line)
	l.mu.Unlock()
}

// Lines returns the events so far, oldest first.
func (l *Log) Lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lines)
}
