package http

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/probed/probed/internal/hostiletest"
	"github.com/probed/probed/runtime"
)

// TestHostileHeadersKeepMemoryBounded (issue 9 §5): 300 probes at once of
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
	outs := make([]runtime.Outcome, targets)
	errs := make([]error, targets)
	growth := hostiletest.HeapGrowth(bound, func(ctx context.Context) {
		var wg sync.WaitGroup
		for i, p := range probers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				outs[i], errs[i] = p.Probe(ctx, runtime.Target{PodIP: podIP})
			}()
		}
		wg.Wait()
	})
	t.Logf("heap grew by %d MiB at most with %d targets answering %d MiB headers", growth>>20, targets, headerSize>>20)
	if growth > bound {
		t.Fatalf("heap grew by %d MiB (> %d MiB) with %d targets answering %d MiB headers: response headers are not bounded",
			growth>>20, bound>>20, targets, headerSize>>20)
	}
	want := fmt.Sprintf("net/http: server response headers exceeded %d bytes; aborted", runtime.MaxResponseHeaderBytes)
	for i := range outs {
		if errs[i] != nil || outs[i].Result != runtime.Failure || !strings.Contains(outs[i].Output, want) {
			t.Fatalf("target %d: result %v, err %v, output %q; want Failure %q", i, outs[i].Result, errs[i], outs[i].Output, want)
		}
	}
}
