package testevents

import (
	"slices"
	"sync"
	"testing"

	"go.uber.org/goleak"
	v1 "k8s.io/api/core/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestLogKeepsEveryEvent: concurrent events all arrive as lines, and
// Lines is a copy the recorder does not change afterwards.
func TestLogKeepsEveryEvent(t *testing.T) {
	var l Log
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 25 {
				l.Eventf(&v1.Pod{}, v1.EventTypeWarning, "Unhealthy", "Readiness probe failed: %s", "HTTP probe failed with statuscode: 500")
			}
		})
	}
	wg.Wait()
	got := l.Lines()
	if len(got) != 100 || got[0] != "Warning Unhealthy Readiness probe failed: HTTP probe failed with statuscode: 500" {
		t.Fatalf("%d lines, first %q", len(got), got[0])
	}
	l.Add("Normal Killing x")
	if len(got) != 100 || !slices.Contains(l.Lines(), "Normal Killing x") {
		t.Fatal("Lines is not a copy, or Add lost its line")
	}
}
