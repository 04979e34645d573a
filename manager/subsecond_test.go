package manager

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/probed/probed/manager/customprobe"
	"github.com/probed/probed/manager/results"
	"github.com/probed/probed/runtime"
)

// Sub-second periods: annotation probes add periodMilliseconds,
// timeoutMilliseconds and initialDelayMilliseconds to the seconds fields
// (runtime.TimingOf). These tests hold the worker's rules at such periods
// on the fake clock; the scheduler's wheel tick is 10 ms.

const subsecUID = types.UID("subsec")

// subsecPod is a pod with no spec probe and one annotation exec probe of
// type pt whose timing fields are given as JSON (the fake exec handler
// serves kind exec).
func subsecPod(pt runtime.ProbeType, timing string) *v1.Pod {
	p := testPod(v1.Container{Name: testContainerName})
	p.UID = subsecUID
	p.Annotations = map[string]string{customprobe.Annotation: fmt.Sprintf(
		`[{"container":%q,"type":%q,%s,"exec":{"command":["true"]}}]`, testContainerName, pt.Lower(), timing)}
	return p
}

// stepUntilCalls steps the fake clock by one tick until the handler has
// been called n times, and returns the fake time that took; it fails
// after limit.
func (e *testEnv) stepUntilCalls(n int64, limit time.Duration) time.Duration {
	e.t.Helper()
	t0 := e.clk.Now()
	for e.exec.calls.Load() < n {
		if e.clk.Since(t0) > limit {
			e.t.Fatalf("%d handler calls after %v, want %d", e.exec.calls.Load(), e.clk.Since(t0), n)
		}
		e.step(10 * time.Millisecond)
	}
	return e.clk.Since(t0)
}

// A 200 ms period (periodSeconds 1, periodMilliseconds -800): the first run
// comes within one period of AddPod (its spread phase), then exactly one
// run per 200 ms, and failureThreshold counts runs as at any period (W10,
// W11).
func TestSubSecond_WorkerRunsEvery200msWithThresholds(t *testing.T) {
	e := newTestEnv(t)
	e.status.set(subsecUID, runningStatus(fakeNow, true))
	e.m.AddPod(context.Background(), subsecPod(runtime.Readiness,
		`"periodSeconds":1,"periodMilliseconds":-800,"failureThreshold":3,"successThreshold":2`))
	w := e.worker(subsecUID, testContainerName, runtime.Readiness)
	if p := w.period(); p != 200*time.Millisecond {
		t.Fatalf("period = %v, want 200ms", p)
	}
	if at := e.stepUntilCalls(1, time.Second); at > 200*time.Millisecond+10*time.Millisecond {
		t.Fatalf("first run %v after AddPod, want within one period (200ms) and a tick", at)
	}
	// successThreshold 2: not Ready after one success (W1: Failure).
	e.expectCached(runtime.Readiness, results.Failure)
	steady := func(n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			before := e.exec.calls.Load()
			e.step(200 * time.Millisecond)
			if got := e.exec.calls.Load() - before; got != 1 {
				t.Fatalf("%d runs in one 200 ms period, want 1", got)
			}
		}
	}
	steady(1)
	e.expectCached(runtime.Readiness, results.Success) // second success
	e.exec.set(runtime.Failure)
	steady(2)
	e.expectCached(runtime.Readiness, results.Success) // two failures < 3
	steady(1)
	e.expectCached(runtime.Readiness, results.Failure) // third failure
	steady(5)
	if s := e.m.sched.Stats().Skipped; s != 0 {
		t.Fatalf("%d skipped runs with an instant handler", s)
	}
}

// BR-10 at a 100 ms period with a 300 ms timeout (timeoutSeconds 1,
// timeoutMilliseconds -700; a timeout longer than the period is valid): a
// run that lasts its whole timeout spans three periods; the slots that come
// meanwhile are dropped and counted as skipped, exactly one follow-up run
// starts when it ends, and two runs never overlap.
func TestSubSecond_BR10_NoOverlapAt100msWithTimeout300ms(t *testing.T) {
	e := newTestEnv(t)
	e.status.set(subsecUID, runningStatus(fakeNow, true))
	e.m.AddPod(context.Background(), subsecPod(runtime.Liveness,
		`"periodSeconds":1,"periodMilliseconds":-900,"timeoutMilliseconds":-700`))
	w := e.worker(subsecUID, testContainerName, runtime.Liveness)
	if p, to := w.period(), w.rs.Timeout(); p != 100*time.Millisecond || to != 300*time.Millisecond {
		t.Fatalf("period %v timeout %v, want 100ms and 300ms", p, to)
	}
	e.stepUntilCalls(1, time.Second)

	var inFlight, maxInFlight atomic.Int32
	var slowRuns atomic.Int32
	slow := func() {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		if n > maxInFlight.Load() {
			maxInFlight.Store(n)
		}
		if slowRuns.Add(1) != 1 {
			return // the follow-up is instant
		}
		// The run lasts its whole timeout: three periods go by, and the
		// wheel processes them while the run is in flight.
		e.clk.Step(300 * time.Millisecond)
		target := e.clk.Now().Add(-10 * time.Millisecond)
		for deadline := time.Now().Add(10 * time.Second); e.m.sched.Stats().Advanced.Before(target); {
			if time.Now().After(deadline) {
				t.Errorf("the wheel did not advance during the run")
				return
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	e.exec.during.Store(&slow)
	skipped0, calls0 := e.m.sched.Stats().Skipped, e.exec.calls.Load()
	e.step(100 * time.Millisecond) // the slow run, then its follow-up
	if got := e.exec.calls.Load() - calls0; got != 2 {
		t.Fatalf("%d runs over a 300 ms run at a 100 ms period, want 2 (the run and one follow-up)", got)
	}
	if m := maxInFlight.Load(); m != 1 {
		t.Fatalf("%d runs in flight at once, want 1", m)
	}
	if s := e.m.sched.Stats().Skipped - skipped0; s < 2 {
		t.Fatalf("%d skipped slots during a run of three periods, want at least 2", s)
	}
	// Then back on the 100 ms grid.
	before := e.exec.calls.Load()
	e.step(100 * time.Millisecond)
	if got := e.exec.calls.Load() - before; got != 1 {
		t.Fatalf("%d runs in the next period, want 1", got)
	}
}

// The manual trigger at a sub-second period (M7c, W3): UpdatePodStatus of
// a readiness probe without a Success result runs it now, without a clock
// step, and re-arms it a full 200 ms period from then.
func TestSubSecond_ManualTrigger(t *testing.T) {
	e := newTestEnv(t)
	e.exec.set(runtime.Failure)
	e.status.set(subsecUID, runningStatus(fakeNow, true))
	pod := subsecPod(runtime.Readiness, `"periodSeconds":1,"periodMilliseconds":-800,"failureThreshold":1`)
	e.m.AddPod(context.Background(), pod)
	e.stepUntilCalls(1, time.Second)
	e.step(50 * time.Millisecond)
	st, _ := e.status.GetPodStatus(subsecUID)
	e.m.UpdatePodStatus(context.Background(), pod, &st)
	e.idle() // no clock step: only the trigger can run the probe
	if got := e.exec.calls.Load(); got != 2 {
		t.Fatalf("%d calls after UpdatePodStatus, want 2 (manual trigger)", got)
	}
	e.step(180 * time.Millisecond)
	if got := e.exec.calls.Load(); got != 2 {
		t.Fatalf("a run %v after the trigger, want none before a full 200 ms period", 180*time.Millisecond)
	}
	e.step(30 * time.Millisecond)
	if got := e.exec.calls.Load(); got != 3 {
		t.Fatalf("%d calls 210 ms after the trigger, want 3", got)
	}
}

// The initial delay in milliseconds (W5.8, BR-11): with
// initialDelayMilliseconds 300 and a 100 ms period, the first attempt comes
// no earlier than 300 ms after the container started and within one period
// (the prompt spread) and a tick after it.
func TestSubSecond_InitialDelayMilliseconds(t *testing.T) {
	e := newTestEnv(t)
	e.status.set(subsecUID, runningStatus(fakeNow, true))
	e.m.AddPod(context.Background(), subsecPod(runtime.Readiness,
		`"periodSeconds":1,"periodMilliseconds":-900,"initialDelayMilliseconds":300`))
	at := e.stepUntilCalls(1, 2*time.Second)
	if at < 300*time.Millisecond || at > 410*time.Millisecond {
		t.Fatalf("first attempt %v after the container started, want within [300ms, 410ms]", at)
	}
	e.expectCached(runtime.Readiness, results.Success)
}

// W5.8's test is the kubelet's int32(elapsed/time.Second) <
// initialDelaySeconds for whole seconds (truncation toward zero included: a
// StartedAt half a second in the future does not hold back a probe without
// delay), and the same in milliseconds for a delay with milliseconds.
func TestW5_8_InitialDelayPending(t *testing.T) {
	for _, tc := range []struct {
		elapsed, delay time.Duration
		pending        bool
	}{
		{-500 * time.Millisecond, 0, false},
		{-1500 * time.Millisecond, 0, true},
		{9900 * time.Millisecond, 10 * time.Second, true},
		{10 * time.Second, 10 * time.Second, false},
		{249 * time.Millisecond, 250 * time.Millisecond, true},
		{250 * time.Millisecond, 250 * time.Millisecond, false},
		{1249*time.Millisecond + 900*time.Microsecond, 1250 * time.Millisecond, true},
	} {
		if got := initialDelayPending(tc.elapsed, tc.delay); got != tc.pending {
			t.Errorf("initialDelayPending(%v, %v) = %v, want %v", tc.elapsed, tc.delay, got, tc.pending)
		}
	}
}
