package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/probed/probed/internal/hostiletest"
	"github.com/probed/probed/runtime"
)

// TestHostileHeadersKeepMemoryBounded (issue 9 §5): 200 http-match probes
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
	outs := make([]runtime.Outcome, targets)
	errs := make([]error, targets)
	growth := hostiletest.HeapGrowth(bound, func(ctx context.Context) {
		var wg sync.WaitGroup
		for i, pr := range probers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				outs[i], errs[i] = pr.Probe(ctx, runtime.Target{PodIP: "127.0.0.1"})
			}()
		}
		wg.Wait()
	})
	t.Logf("heap grew by %d MiB at most", growth>>20)
	if growth > bound {
		t.Fatalf("heap grew by %d MiB (> %d MiB) with %d targets answering %d MiB headers", growth>>20, bound>>20, targets, headerSize>>20)
	}
	want := fmt.Sprintf("server response headers exceeded %d bytes; aborted", runtime.MaxResponseHeaderBytes)
	for i := range outs {
		if errs[i] != nil || outs[i].Result != runtime.Failure || !strings.Contains(outs[i].Output, want) {
			t.Fatalf("target %d: %v %q, err %v; want Failure %q", i, outs[i].Result, outs[i].Output, errs[i], want)
		}
	}
}
