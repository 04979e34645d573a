package http

import (
	"fmt"
	"testing"

	"github.com/probed/probed/internal/hostiletest"
	"github.com/probed/probed/runtime"
)

// TestHostileHeadersKeepMemoryBounded: 300 probes at once of
// targets answering a 10 MiB header each fail with Go's header-limit error
// at runtime.MaxResponseHeaderBytes, and the prober's heap grows by a few
// tens of MiB at most — not the 300 × 10 MiB (3 GiB) Go's default limit of
// 10 MiB (the kubelet's) lets them take.
func TestHostileHeadersKeepMemoryBounded(t *testing.T) {
	const targets, headerSize = 300, 10 << 20
	const bound = 256 << 20 // 300 × 64 KiB is 19 MiB; buffers and goroutines add some
	ports := hostiletest.HeaderBombs(t, targets, headerSize)
	h := New()
	probers := make([]runtime.Prober, targets)
	for i, port := range ports {
		spec := httpSpec(get(port, "/"))
		spec.Probe.TimeoutSeconds = 30 // the verdict, not a timeout, under -race on 2 cores
		probers[i] = prepare(t, h, spec)
	}
	hostiletest.RunAllBounded(t, probers, runtime.Target{PodIP: podIP}, bound, fmt.Sprintf("net/http: server response headers exceeded %d bytes; aborted", runtime.MaxResponseHeaderBytes))
}
