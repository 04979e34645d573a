package main

import (
	"fmt"
	"testing"

	"github.com/probed/probed/internal/hostiletest"
	"github.com/probed/probed/runtime"
)

// TestHostileHeadersKeepMemoryBounded: 200 http-match probes
// at once of targets answering a 10 MiB header fail at
// runtime.MaxResponseHeaderBytes, and the plugin's heap grows by tens of
// MiB at most, not the 2 GiB Go's default limit lets them take.
func TestHostileHeadersKeepMemoryBounded(t *testing.T) {
	const targets, headerSize = 200, 10 << 20
	const bound = 256 << 20
	var probers []runtime.Prober
	for _, port := range hostiletest.HeaderBombs(t, targets, headerSize) {
		s := spec(port, map[string]string{"header": "X-Hostile: ."})
		s.Probe.TimeoutSeconds = 30
		pr, err := Handler{}.Prepare(s)
		if err != nil {
			t.Fatal(err)
		}
		probers = append(probers, pr)
	}
	hostiletest.RunAllBounded(t, probers, runtime.Target{PodIP: "127.0.0.1"}, bound, fmt.Sprintf("server response headers exceeded %d bytes; aborted", runtime.MaxResponseHeaderBytes))
}
