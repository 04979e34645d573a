package manager

import (
	"net"
	nethttp "net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/probed/probed/manager/results"
	"github.com/probed/probed/runtime"
)

// hangingTarget is a real HTTP server whose every request hangs until the
// prober gives up on it (or the test ends). It counts requests and the
// most in flight at once.
type hangingTarget struct {
	requests, inFlight, maxInFlight atomic.Int64
	port                            int
}

func newHangingTarget(t *testing.T) *hangingTarget {
	h := &hangingTarget{}
	stop := make(chan struct{})
	s := httptest.NewServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		h.requests.Add(1)
		// The server sees a request end only when it notices that the
		// prober closed the connection, a moment after the prober did:
		// give an earlier request up to a second of real time to be seen
		// ending before this one counts as overlapping it. A real overlap
		// (a run while the first hangs until its fake deadline) lasts.
		for wait := time.Now().Add(time.Second); h.inFlight.Load() > 0 && time.Now().Before(wait); {
			time.Sleep(time.Millisecond)
		}
		n := h.inFlight.Add(1)
		defer h.inFlight.Add(-1)
		for m := h.maxInFlight.Load(); n > m && !h.maxInFlight.CompareAndSwap(m, n); m = h.maxInFlight.Load() {
		}
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	t.Cleanup(func() { close(stop); s.Close() })
	h.port = s.Listener.Addr().(*net.TCPAddr).Port
	return h
}

// pollUntil polls cond every 100 µs for up to 10 s of real time (the bound
// only keeps a broken build from hanging).
func pollUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// TestBR10FakeClock: BR-10 on a fake clock, through the manager with its
// default runtime (which takes Options.Clock) and a real HTTP target that
// never answers. periodSeconds 1, timeoutSeconds 30: while the run hangs,
// the ticks that come are dropped (no overlapping run, one request in
// flight at most); when the fake clock passes the timeout (no real-time
// deadline would end it within the wait), the run ends as the kubelet's
// timeout Failure and the next run starts right after it, without another
// step of the clock.
func TestBR10FakeClock(t *testing.T) {
	target := newHangingTarget(t)
	e := newTestEnv(t, func(o *Options) { o.Runtime = nil })
	probe := &v1.Probe{
		ProbeHandler:     v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(int32(target.port))}},
		TimeoutSeconds:   30,
		PeriodSeconds:    1,
		SuccessThreshold: 1,
		FailureThreshold: 1,
	}
	pod := testPod(probeOf(runtime.Readiness, probe))
	e.status.set(pod.UID, runningStatus(fakeNow.Add(-time.Minute), true))
	e.m.AddPod(t.Context(), pod)

	// The first run starts within one period.
	e.clk.Step(time.Second + 10*time.Millisecond)
	pollUntil(t, "the first request", func() bool { return target.requests.Load() == 1 })
	// Ticks while it hangs are dropped: no second run, however many.
	for i := 0; i < 5; i++ {
		e.clk.Step(time.Second)
	}
	pollUntil(t, "the scheduler to process the ticks", func() bool {
		return e.m.sched.Stats().Advanced.Add(20 * time.Millisecond).After(e.clk.Now())
	})
	if n := target.requests.Load(); n != 1 {
		t.Fatalf("%d requests while the first run hangs, want 1 (no overlapping run)", n)
	}
	// The fake clock passes the attempt's deadline (30 s after it started).
	e.clk.Step(25 * time.Second)
	e.waitUpdate(runtime.Readiness, results.Failure)
	// The next run starts right after the hung one ended, with no step.
	pollUntil(t, "the next run right after the hung one", func() bool { return target.requests.Load() == 2 })
	if m := target.maxInFlight.Load(); m != 1 {
		t.Fatalf("%d requests in flight at once, want 1 (BR-10)", m)
	}
	if !e.clk.HasWaiters() {
		t.Fatal("the second run has no deadline on the fake clock")
	}
}
