package manager

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/probed/probed/manager/results"
	"github.com/probed/probed/runtime"
)

// Periods by state: an annotation probe's
// unhealthyPeriodSeconds/Milliseconds and transitionPeriodSeconds/
// Milliseconds. The worker decides its state after each run (W10, W11) and
// gives the scheduler the period when the state changes it
// (scheduler.SetPeriod); these tests hold the run times on the fake clock
// (wheel tick 10 ms).

// callTimes records when the fake exec handler runs, relative to t0.
type callTimes struct {
	mu    sync.Mutex
	t0    time.Time
	times []time.Duration
}

func recordCalls(e *testEnv) *callTimes {
	ct := &callTimes{t0: e.clk.Now()}
	f := func() {
		ct.mu.Lock()
		ct.times = append(ct.times, e.clk.Since(ct.t0))
		ct.mu.Unlock()
	}
	e.exec.during.Store(&f)
	return ct
}

func (ct *callTimes) get() []time.Duration {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	return append([]time.Duration(nil), ct.times...)
}

// last is the time of the newest call.
func (ct *callTimes) last(t *testing.T) time.Duration {
	t.Helper()
	ts := ct.get()
	if len(ts) == 0 {
		t.Fatal("no run yet")
	}
	return ts[len(ts)-1]
}

// stepTicks moves the fake clock tick by tick (each run lands at its due
// tick) for d.
func (e *testEnv) stepTicks(d time.Duration) {
	e.t.Helper()
	for end := e.clk.Now().Add(d); e.clk.Now().Before(end); {
		e.step(10 * time.Millisecond)
	}
}

// growGap is the first gap the scheduler leaves when the worker's period
// grows from old to p (scheduler.SetPeriod): p less the key's stable phase
// in whole ticks, at least old.
func growGap(e *testEnv, w *worker, old, p time.Duration) time.Duration {
	phase := e.m.sched.Spread(keyHash(w.key()), p) / (10 * time.Millisecond) * (10 * time.Millisecond)
	return max(old, p-phase)
}

// Periods by state: "a readiness probe at periodSeconds: 10,
// unhealthyPeriodMilliseconds: 250 finds a starting pod ready within ~250
// ms and then costs one run every 10 s". Before its first Success verdict
// the probe runs every 250 ms; from the run that made it ready, every 10 s
// (after the stable phase the scheduler adds when a period grows).
func TestStatePeriods_FastUntilReadyThenSlow(t *testing.T) {
	e := newTestEnv(t)
	e.exec.set(runtime.Failure)
	e.status.set(subsecUID, runningStatus(fakeNow, true))
	ct := recordCalls(e)
	e.m.AddPod(context.Background(), subsecPod(runtime.Readiness, `"periodSeconds":10,"unhealthyPeriodMilliseconds":250,"failureThreshold":1`))
	w := e.worker(subsecUID, testContainerName, runtime.Readiness)
	if p := w.period(); p != 250*time.Millisecond {
		t.Fatalf("period before the first success = %v, want the unhealthy period 250ms", p)
	}
	e.stepUntilCalls(1, time.Second)
	first := ct.last(t)
	if first > 250*time.Millisecond {
		t.Fatalf("first run %v after AddPod, want within the unhealthy period", first)
	}
	e.stepTicks(500 * time.Millisecond) // two more failed runs
	e.exec.set(runtime.Success)
	e.stepTicks(250 * time.Millisecond) // the run that makes it ready
	e.expectCached(runtime.Readiness, results.Success)
	ready := ct.last(t)
	want := []time.Duration{first, first + 250*time.Millisecond, first + 500*time.Millisecond, first + 750*time.Millisecond}
	if got := ct.get(); !slices.Equal(got, want) {
		t.Fatalf("runs at %v, want every 250 ms until ready: %v", got, want)
	}
	if p := w.period(); p != 10*time.Second {
		t.Fatalf("period once ready = %v, want 10s", p)
	}
	// Ready: the next run within one period (the period less the stable
	// phase) after the run that made it ready, then every 10 s; never
	// more than 10 s between two runs (it came 14 s later when the phase
	// was added to the period).
	gap := growGap(e, w, 250*time.Millisecond, 10*time.Second) // the scheduler is younger than 10 s: the phase is over the whole period (BR-24)
	e.stepTicks(20 * time.Second)
	want = append(want, ready+gap, ready+gap+10*time.Second)
	if got := ct.get(); !slices.Equal(got, want) {
		t.Fatalf("runs at %v, want %v (first gap %v)", got, want, gap)
	}
	if gap > 10*time.Second || gap < 250*time.Millisecond {
		t.Fatalf("first gap %v after turning ready, want within [250ms, 10s]", gap)
	}
}

// HAProxy's fastinter: a healthy probe that fails once is
// checked again after the transition period, so that a real failure is
// confirmed quickly (failureThreshold runs a transition period apart) and
// then the probe runs at the unhealthy period; a blip clears at the next
// transition run and the probe is back on its period.
func TestStatePeriods_TransitionConfirmsAndClearsQuickly(t *testing.T) {
	e := newTestEnv(t)
	e.step(11 * time.Second) // older than the period: the grow phase is within FirstRunSpread
	e.status.set(subsecUID, runningStatus(fakeNow, true))
	ct := recordCalls(e)
	e.m.AddPod(context.Background(), subsecPod(runtime.Readiness,
		`"periodSeconds":10,"transitionPeriodSeconds":1,"unhealthyPeriodSeconds":2,"failureThreshold":3`))
	w := e.worker(subsecUID, testContainerName, runtime.Readiness)
	e.stepUntilCalls(1, 3*time.Second) // at the unhealthy period: ready at once
	e.expectCached(runtime.Readiness, results.Success)
	grow := growGap(e, w, 2*time.Second, 10*time.Second)

	// A blip: one failure, cleared by the next run a transition period later.
	e.exec.set(runtime.Failure)
	e.stepTicks(grow)
	blip := ct.last(t)
	if w.period() != time.Second {
		t.Fatalf("period after one failure of three = %v, want the transition period 1s", w.period())
	}
	e.exec.set(runtime.Success)
	e.stepTicks(time.Second)
	if got := ct.last(t); got != blip+time.Second {
		t.Fatalf("the run after the blip came at %v, want %v (one transition period)", got, blip+time.Second)
	}
	e.expectCached(runtime.Readiness, results.Success)
	if w.period() != 10*time.Second {
		t.Fatalf("period after the blip cleared = %v, want 10s", w.period())
	}

	// A real failure: confirmed in two transition periods, then the
	// unhealthy period (longer than the transition period: its first gap
	// less the stable phase, at least the transition period).
	grow = growGap(e, w, time.Second, 10*time.Second)
	e.exec.set(runtime.Failure)
	e.stepTicks(grow)
	fail1 := ct.last(t)
	if fail1 != blip+time.Second+grow {
		t.Fatalf("first failure at %v, want %v (the first gap) after the blip cleared at %v", fail1, grow, blip+time.Second)
	}
	e.stepTicks(2 * time.Second)
	e.expectCached(runtime.Readiness, results.Failure)
	grow2 := growGap(e, w, time.Second, 2*time.Second)
	e.stepTicks(2*time.Second + grow2)
	ts := ct.get()
	got := ts[len(ts)-5:]
	want := []time.Duration{fail1, fail1 + time.Second, fail1 + 2*time.Second, fail1 + 2*time.Second + grow2, fail1 + 4*time.Second + grow2}
	if !slices.Equal(got, want) {
		t.Fatalf("runs of a real failure at %v, want %v (1 s apart until the verdict, then 2 s)", got, want)
	}
	if s := e.m.sched.Stats().Skipped; s != 0 {
		t.Fatalf("%d skipped runs with an instant handler", s)
	}
}

// A new container instance has had no Success verdict (W6): its probe is
// back on the unhealthy period, whatever the old instance's state.
func TestStatePeriods_NewContainerIsUnhealthy(t *testing.T) {
	e := newTestEnv(t)
	e.status.set(subsecUID, runningStatus(fakeNow, true))
	ct := recordCalls(e)
	e.m.AddPod(context.Background(), subsecPod(runtime.Readiness, `"periodSeconds":10,"unhealthyPeriodMilliseconds":300`))
	w := e.worker(subsecUID, testContainerName, runtime.Readiness)
	e.stepUntilCalls(1, time.Second)
	if w.period() != 10*time.Second {
		t.Fatalf("period once ready = %v, want 10s", w.period())
	}
	// The container restarts and is not ready yet: the worker sees the new
	// ID at its next run (W6, initial value Failure), which fails.
	e.exec.set(runtime.Failure)
	st := runningStatus(e.clk.Now(), true)
	st.ContainerStatuses[0].ContainerID = "test://restarted"
	e.status.set(subsecUID, st)
	e.stepTicks(20 * time.Second)
	ts := ct.get()
	if len(ts) < 4 {
		t.Fatalf("runs at %v, want the new container's runs every 300 ms", ts)
	}
	for i := len(ts) - 3; i < len(ts); i++ {
		if d := ts[i] - ts[i-1]; d != 300*time.Millisecond {
			t.Fatalf("runs at %v: interval %v on the new, not ready container, want 300ms", ts, d)
		}
	}
	if w.period() != 300*time.Millisecond {
		t.Fatalf("period on a new container = %v, want the unhealthy period", w.period())
	}
}

// The period in the run record (history's periodMs) is the one in effect
// after the run, at every period.
func TestStatePeriods_RunRecordHasTheCurrentPeriod(t *testing.T) {
	obs := &recordObserver{}
	e := newTestEnv(t, func(o *Options) { o.Observer = obs })
	e.exec.set(runtime.Failure)
	e.status.set(subsecUID, runningStatus(fakeNow, true))
	e.m.AddPod(context.Background(), subsecPod(runtime.Readiness, `"periodSeconds":10,"unhealthyPeriodMilliseconds":250,"failureThreshold":1`))
	e.stepUntilCalls(1, time.Second)
	e.exec.set(runtime.Success)
	e.stepTicks(250 * time.Millisecond)
	recs := obs.get()
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2", len(recs))
	}
	if recs[0].Period != 250*time.Millisecond || recs[1].Period != 10*time.Second {
		t.Fatalf("periods %v, %v; want 250ms (still failing) and 10s (ready)", recs[0].Period, recs[1].Period)
	}
}

// Spec probes have one period: their workers never change it.
func TestStatePeriods_SpecProbesKeepTheirPeriod(t *testing.T) {
	e := newTestEnv(t)
	e.exec.set(runtime.Failure)
	p := execProbe()
	p.PeriodSeconds = 2
	pod := testPod(probeOf(runtime.Readiness, p))
	e.status.set(testPodUID, runningStatus(fakeNow, true))
	e.m.AddPod(context.Background(), pod)
	w := e.worker(testPodUID, testContainerName, runtime.Readiness)
	ct := recordCalls(e)
	e.stepTicks(7 * time.Second)
	e.exec.set(runtime.Success)
	e.stepTicks(6 * time.Second)
	ts := ct.get()
	for i := 1; i < len(ts); i++ {
		if d := ts[i] - ts[i-1]; d != 2*time.Second {
			t.Fatalf("runs at %v: interval %v, want 2s throughout", ts, d)
		}
	}
	if w.pstate != runtime.StateUnhealthy {
		t.Fatalf("a spec probe's period state moved to %v", w.pstate)
	}
}

// recordObserver keeps every run record.
type recordObserver struct {
	mu   sync.Mutex
	recs []RunRecord
}

func (o *recordObserver) ProbeRan(r RunRecord) {
	o.mu.Lock()
	o.recs = append(o.recs, r)
	o.mu.Unlock()
}

func (o *recordObserver) get() []RunRecord {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]RunRecord(nil), o.recs...)
}
