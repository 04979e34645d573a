package manager

import (
	"context"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/probed/probed/runtime"
)

// releasingHandler prepares probers that count their Release calls
// (runtime.Releaser), as an HTTP probe holding a kept connection does.
type releasingHandler struct {
	mu       sync.Mutex
	released map[*releasingProber]int
}

type releasingProber struct{ h *releasingHandler }

func (h *releasingHandler) Prepare(*runtime.Spec) (runtime.Prober, error) {
	return &releasingProber{h: h}, nil
}

func (p *releasingProber) Probe(context.Context, runtime.Target) (runtime.Outcome, error) {
	return runtime.Outcome{Result: runtime.Success}, nil
}

func (p *releasingProber) Release() {
	p.h.mu.Lock()
	p.h.released[p]++
	p.h.mu.Unlock()
}

// counts returns how many probers were released and the most Release
// calls one got.
func (h *releasingHandler) counts() (probers, most int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range h.released {
		most = max(most, n)
	}
	return len(h.released), most
}

// A removed worker releases what its prober holds between runs (a kept
// connection): once, when it exits; and Close releases those of
// the workers still there.
func TestRemovedWorkerReleasesItsProber(t *testing.T) {
	h := &releasingHandler{released: map[*releasingProber]int{}}
	rt, err := runtime.New(runtime.Options{PoolSize: 4, ExecPoolSize: 4, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Register(runtime.KindExec, h); err != nil {
		t.Fatal(err)
	}
	e := newTestEnv(t, func(o *Options) { o.Runtime = rt })
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	e.status.set(testPodUID, runningStatus(fakeNow, true))
	pod := testPod(bothProbes())
	e.m.AddPod(context.Background(), pod)
	e.step(2 * time.Second)
	if n, _ := h.counts(); n != 0 {
		t.Fatalf("%d probers released while their workers run", n)
	}
	e.m.RemovePod(pod)
	e.waitWorkerCount(0)
	if n, most := h.counts(); n != 2 || most != 1 {
		t.Fatalf("after RemovePod: %d probers released (most %d times), want both workers' once", n, most)
	}

	other := testPod(bothProbes())
	other.UID = "other"
	e.status.set("other", runningStatus(fakeNow, true))
	e.m.AddPod(context.Background(), other)
	e.step(2 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if n, most := h.counts(); n != 4 || most != 1 {
		t.Fatalf("after Close: %d probers released (most %d times), want 4 once each", n, most)
	}
}

// bothProbes is the test container with an exec readiness and liveness
// probe.
func bothProbes() v1.Container {
	c := probeOf(runtime.Readiness, execProbe())
	c.LivenessProbe = execProbe()
	return c
}
