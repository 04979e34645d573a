// Package hostiletest serves hostile HTTP targets on loopback for the tests
// that bound what a target can take from the prober: each
// answers every connection with a 200 status line followed by one header
// of a given size, then closes. The header bytes come from one shared
// buffer, so the targets themselves cost the test process almost nothing.
// RunAllBounded runs probers against them at once under a heap bound.
package hostiletest

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	goruntime "runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/probed/probed/runtime"
)

// HeaderBombs starts n listeners on 127.0.0.1 whose answers carry a header
// of size bytes ("X-Hostile: aaaa..."), and returns their ports. The
// listeners and their connections are closed when the test ends.
func HeaderBombs(t testing.TB, n, size int) []int {
	t.Helper()
	header := append([]byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-Hostile: "), bytes.Repeat([]byte("a"), size)...)
	header = append(header, "\r\n\r\n"...)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns = map[net.Conn]bool{}
		lns   []net.Listener
		ports []int
	)
	for i := 0; i < n; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				conns[c] = true
				mu.Unlock()
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer func() {
						mu.Lock()
						delete(conns, c)
						mu.Unlock()
						_ = c.Close()
					}()
					if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
						return
					}
					_, _ = io.Copy(c, bytes.NewReader(header))
				}()
			}
		}()
	}
	t.Cleanup(func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
		mu.Lock()
		for c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ports
}

// heapMetric is the memory of heap objects, live and not yet swept: what
// a target's bytes held by the prober show up in.
const heapMetric = "/memory/classes/heap/objects:bytes"

func heapBytes() uint64 {
	s := []metrics.Sample{{Name: heapMetric}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// HeapGrowth runs run and returns the most the heap grew above its size
// before (after a GC), sampled every millisecond while run runs. When the
// growth passes abort, run's context is cancelled (so that a test of an
// unbounded prober fails instead of taking the machine's memory) and the
// growth seen so far is returned.
func HeapGrowth(abort uint64, run func(ctx context.Context)) uint64 {
	goruntime.GC()
	base := heapBytes()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		run(ctx)
	}()
	var peak uint64
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		if h := heapBytes(); h > base && h-base > peak {
			peak = h - base
			if peak > abort {
				cancel()
			}
		}
		select {
		case <-done:
			return peak
		case <-tick.C:
		}
	}
}

// RunAllBounded runs every prober's Probe at once against target, fails t
// when the heap grows by more than bound meanwhile (HeapGrowth), and
// otherwise requires each run to be a Failure whose output holds want
// (the header-limit error). It logs the growth seen.
func RunAllBounded(t testing.TB, probers []runtime.Prober, target runtime.Target, bound uint64, want string) {
	t.Helper()
	outs := make([]runtime.Outcome, len(probers))
	errs := make([]error, len(probers))
	growth := HeapGrowth(bound, func(ctx context.Context) {
		var wg sync.WaitGroup
		for i, p := range probers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				outs[i], errs[i] = p.Probe(ctx, target)
			}()
		}
		wg.Wait()
	})
	t.Logf("heap grew by %d MiB at most with %d probes at once", growth>>20, len(probers))
	if growth > bound {
		t.Fatalf("heap grew by %d MiB (> %d MiB) with %d probes at once: response headers are not bounded", growth>>20, bound>>20, len(probers))
	}
	for i := range outs {
		if errs[i] != nil || outs[i].Result != runtime.Failure || !strings.Contains(outs[i].Output, want) {
			t.Fatalf("probe %d: result %v, err %v, output %q; want Failure %q", i, outs[i].Result, errs[i], outs[i].Output, want)
		}
	}
}
