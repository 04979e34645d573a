// Package micro holds go-test micro-benchmarks of probed's hot paths:
// the scheduler's Add/Remove and fire path, the pool dispatch, the memory
// of a registered probe, and the manager's cost per executed run. They use
// a fake clock, so they measure CPU and memory, not timing.
//
//	cd bench && go test -run '^$' -bench . -benchmem ./micro
package micro

import (
	"context"
	"log/slog"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/probed/probed/agent/telemetry"
	"github.com/probed/probed/internal/nettest"
	"github.com/probed/probed/manager"
	"github.com/probed/probed/manager/results"
	"github.com/probed/probed/plugins/exec"
	"github.com/probed/probed/plugins/tcp"
	probedruntime "github.com/probed/probed/runtime"
	"github.com/probed/probed/scheduler"
)

const tick = 10 * time.Millisecond

func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkSchedulerAddRemove: Add, Schedule and Remove of one entry in a
// scheduler that already holds 100k entries.
func BenchmarkSchedulerAddRemove(b *testing.B) {
	clk := testingclock.NewFakeClock(time.Unix(1_000_000, 0))
	s, err := scheduler.New(scheduler.Options[int]{Clock: clk, Dispatch: func(scheduler.ID, int) error { return nil }})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for i := 0; i < 100000; i++ {
		id, _ := s.Add(uint64(i)*0x9e3779b97f4a7c15, 0, time.Second, i)
		s.Schedule(id, s.Spread(uint64(i), time.Second))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		key := uint64(i) * 0x9e3779b97f4a7c15
		id, _ := s.Add(key, 0, time.Second, i)
		s.Schedule(id, s.Spread(key, time.Second))
		s.Remove(id)
	}
}

// BenchmarkSchedulerMemory reports the heap per registered entry.
func BenchmarkSchedulerMemory(b *testing.B) {
	for _, n := range []int{10000, 1000000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			for it := 0; it < b.N; it++ {
				clk := testingclock.NewFakeClock(time.Unix(1_000_000, 0))
				before := heapAfterGC()
				s, _ := scheduler.New(scheduler.Options[*int]{Clock: clk, Dispatch: func(scheduler.ID, *int) error { return nil }})
				x := new(int)
				for i := 0; i < n; i++ {
					id, _ := s.Add(uint64(i)*0x9e3779b97f4a7c15, 0, time.Minute, x)
					s.Schedule(id, s.Spread(uint64(i), time.Minute))
				}
				after := heapAfterGC()
				b.ReportMetric(float64(after-before)/float64(n), "B/entry")
				s.Close()
			}
		})
	}
}

// processCPU is the process's user + system CPU time in nanoseconds: on a
// shared machine, CPU per run means more than wall time (cpu-ns/run).
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// BenchmarkSchedulerFire: the fire path (wheel → ready list → feeder →
// Dispatch → Done) for 100k and 1M entries with a 1 s period; one op is
// one run. cpu-ns/run at 1M against 100k is the wheel's cache locality.
func BenchmarkSchedulerFire(b *testing.B) {
	for _, n := range []int{100000, 1000000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) { benchFire(b, n) })
	}
}

func benchFire(b *testing.B, n int) {
	clk := testingclock.NewFakeClock(time.Unix(1_000_000, 0))
	runs := countingScheduler(b, clk, n)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	var want int64
	for want < int64(b.N) {
		want += int64(n)
		clk.Step(time.Second)
		for runs.Load() < want {
			time.Sleep(100 * time.Microsecond)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(runs.Load()), "ns/run")
	b.ReportMetric(float64(processCPU()-cpu0)/float64(runs.Load()), "cpu-ns/run")
}

// countingScheduler starts a scheduler on clk (nil: the real clock), closed
// when b ends, whose Dispatch counts the run and calls Done at once (no pool,
// no probe), with n entries at period 1 s spread over the period; it returns
// its run count.
func countingScheduler(b *testing.B, clk clock.WithTicker, n int) *atomic.Int64 {
	b.Helper()
	var s *scheduler.Scheduler[int]
	runs := new(atomic.Int64)
	s, err := scheduler.New(scheduler.Options[int]{Clock: clk, Dispatch: func(id scheduler.ID, _ int) error {
		runs.Add(1)
		s.Done(id)
		return nil
	}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Close)
	for i := 0; i < n; i++ {
		key := uint64(i) * 0x9e3779b97f4a7c15
		id, _ := s.Add(key, 0, time.Second, i)
		s.Schedule(id, s.Spread(key, time.Second))
	}
	return runs
}

// BenchmarkSchedulerSetPeriod: one period change of an
// armed entry in a scheduler holding 100k — what a worker pays on a run
// that changes its state's period (fast until ready, then slow; a
// transition), never on a run that does not: the grid re-anchored at the
// entry's last due tick, the stable phase when the period grows, the
// entry moved in the wheel. One op is one change (1 s ↔ 250 ms).
func BenchmarkSchedulerSetPeriod(b *testing.B) {
	clk := testingclock.NewFakeClock(time.Unix(1_000_000, 0))
	s, err := scheduler.New(scheduler.Options[int]{Clock: clk, Dispatch: func(scheduler.ID, int) error { return nil }})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const n = 100000
	ids := make([]scheduler.ID, n)
	for i := range ids {
		key := uint64(i) * 0x9e3779b97f4a7c15
		ids[i], _ = s.Add(key, 0, time.Second, i)
		s.Schedule(ids[i], time.Minute+s.Spread(key, time.Second)) // armed, not due while measured
	}
	periods := [2]time.Duration{250 * time.Millisecond, time.Second}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		j := i % n
		s.SetPeriod(ids[j], uint64(j)*0x9e3779b97f4a7c15, periods[(i/n)%2])
	}
}

// BenchmarkSchedulerRealClock: the scheduler's own fixed cost on the real
// clock — its wheel tick and feeders' wake-ups — with 0, 20 and 2,000
// entries at period 1 s (0, 20 and 2,000 runs/s; Dispatch calls Done at
// once, so no pool and no probe). One op is one second of wall time;
// cpu-ms/s is the process's getrusage CPU per second (the Go runtime's idle
// cost included), cpu-ns/run the same over the runs. It runs on the real
// clock on purpose (a fake clock has no wake-ups to cost); use -benchtime
// 3x or more.
func BenchmarkSchedulerRealClock(b *testing.B) {
	for _, n := range []int{0, 20, 2000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			runs := countingScheduler(b, nil, n)
			time.Sleep(1100 * time.Millisecond) // every entry has run once
			b.ResetTimer()
			runs0, cpu0 := runs.Load(), processCPU()
			time.Sleep(time.Duration(b.N) * time.Second)
			cpu := processCPU() - cpu0
			b.StopTimer()
			b.ReportMetric(float64(cpu)/1e6/float64(b.N), "cpu-ms/s")
			if r := runs.Load() - runs0; r > 0 {
				b.ReportMetric(float64(cpu)/float64(r), "cpu-ns/run")
			}
		})
	}
}

type task struct{ wg *sync.WaitGroup }

func (t task) Run() { t.wg.Done() }

// BenchmarkRuntimeSubmit: one trivial task through the runtime's pool
// (the dispatch cost every probe run pays).
func BenchmarkRuntimeSubmit(b *testing.B) {
	for _, lane := range []int{probedruntime.LaneNetwork, probedruntime.LaneExec} {
		b.Run([]string{"network", "exec"}[lane], func(b *testing.B) {
			rt, err := probedruntime.New(probedruntime.Options{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			defer rt.Close(context.Background())
			var wg sync.WaitGroup
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				wg.Add(1)
				if err := rt.Submit(lane, task{&wg}); err != nil {
					b.Fatal(err)
				}
			}
			wg.Wait()
		})
	}
}

// ---- manager ----

type statusMap map[types.UID]v1.PodStatus

func (m statusMap) GetPodStatus(uid types.UID) (v1.PodStatus, bool) {
	st, ok := m[uid]
	return st, ok
}

type instantRunner struct{}

func (instantRunner) RunInContainer(context.Context, string, []string, time.Duration) ([]byte, error) {
	return nil, nil
}

type countObserver struct{ n atomic.Int64 }

func (o *countObserver) ProbeRan(manager.RunRecord) { o.n.Add(1) }

func makePods(n int, start time.Time) ([]*v1.Pod, statusMap) {
	pods := make([]*v1.Pod, n)
	sm := statusMap{}
	started := true
	for i := range pods {
		probe := func(kind string) *v1.Probe {
			return &v1.Probe{
				ProbeHandler:   v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"probe", kind}}},
				TimeoutSeconds: 1, PeriodSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3,
			}
		}
		pods[i] = &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "pod-" + strconv.Itoa(i), Namespace: "bench", UID: types.UID("uid-" + strconv.Itoa(i))},
			Spec: v1.PodSpec{Containers: []v1.Container{{
				Name: "c", ReadinessProbe: probe("r"), LivenessProbe: probe("l"),
			}}},
		}
		sm[pods[i].UID] = v1.PodStatus{
			Phase: v1.PodRunning, PodIP: "127.0.0.1",
			ContainerStatuses: []v1.ContainerStatus{{
				Name: "c", ContainerID: "bench://" + strconv.Itoa(i), Started: &started,
				State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(start.Add(-time.Hour))}},
			}},
		}
	}
	return pods, sm
}

type fixture struct {
	clk  *testingclock.FakeClock
	mgr  manager.Manager
	obs  *countObserver
	pods []*v1.Pod
	stop chan struct{}
}

func newFixture(tb testing.TB, n int) *fixture { return newFixtureWith(tb, n, nil) }

func newFixtureWith(tb testing.TB, n int, tp trace.TracerProvider) *fixture {
	return newFixtureTCP(tb, n, tp, 0)
}

// newFixtureTCP is newFixtureWith whose probes, when tcpPort is not 0, are
// real tcpSocket probes of 127.0.0.1:tcpPort instead of the instant exec.
func newFixtureTCP(tb testing.TB, n int, tp trace.TracerProvider, tcpPort int) *fixture {
	clk := testingclock.NewFakeClock(time.Unix(1_000_000, 0))
	pods, sm := makePods(n, clk.Now())
	if tcpPort != 0 {
		for _, p := range pods {
			c := &p.Spec.Containers[0]
			for _, pr := range []*v1.Probe{c.ReadinessProbe, c.LivenessProbe} {
				pr.ProbeHandler = v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(int32(tcpPort))}}
			}
		}
	}
	logger := slog.New(slog.DiscardHandler)
	rt, err := probedruntime.New(probedruntime.Options{Logger: logger})
	if err != nil {
		tb.Fatal(err)
	}
	if err := rt.Register(probedruntime.KindExec, exec.New(instantRunner{})); err != nil {
		tb.Fatal(err)
	}
	if err := rt.Register(probedruntime.KindTCP, tcp.New()); err != nil {
		tb.Fatal(err)
	}
	obs := &countObserver{}
	stop := make(chan struct{})
	rms := []results.Manager{results.NewManager(), results.NewManager(), results.NewManager()}
	for _, rm := range rms {
		// Results managers block on a full 20-slot channel (R4): drain.
		go func(ch <-chan results.Update) {
			for {
				select {
				case <-ch:
				case <-stop:
					return
				}
			}
		}(rm.Updates())
	}
	mgr, err := manager.New(manager.Options{Status: sm, Clock: clk, Runtime: rt, Logger: logger, Observer: obs,
		Liveness: rms[0], Readiness: rms[1], Startup: rms[2], TracerProvider: tp})
	if err != nil {
		tb.Fatal(err)
	}
	return &fixture{clk: clk, mgr: mgr, obs: obs, pods: pods, stop: stop}
}

func (f *fixture) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = f.mgr.Close(ctx)
	close(f.stop)
}

// stepPeriod steps the fake clock by one period plus a tick and waits until
// want runs have been observed.
func (f *fixture) runUntil(want int64) {
	f.clk.Step(time.Second + tick)
	deadline := time.Now().Add(60 * time.Second)
	for f.obs.n.Load() < want && time.Now().Before(deadline) {
		time.Sleep(200 * time.Microsecond)
	}
}

// stepIdle steps the fake clock by one period plus a tick and waits until
// the scheduler has processed it and no run is queued or in flight.
func (f *fixture) stepIdle(tb testing.TB) {
	f.clk.Step(time.Second + tick)
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, _ := manager.StatsOf(f.mgr)
		backlog := 0
		for _, n := range st.Backlog {
			backlog += n
		}
		if st.Running == 0 && backlog == 0 && !st.WheelAdvanced.Before(st.Now.Add(-tick)) {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the manager did not settle: %+v", st)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// BenchmarkManagerMemoryPerProbe reports the heap a registered probe adds
// (AddPod, no run yet: "registered") and after its first run ("after first
// run": the kubelet-compatible metric series and the results entry exist
// then). Pods and statuses are in the baseline.
func BenchmarkManagerMemoryPerProbe(b *testing.B) {
	for _, n := range []int{10000, 100000} {
		b.Run(strconv.Itoa(2*n), func(b *testing.B) {
			for it := 0; it < b.N; it++ {
				f := newFixture(b, n)
				before := heapAfterGC()
				for _, p := range f.pods {
					f.mgr.AddPod(context.Background(), p)
				}
				registered := heapAfterGC()
				f.runUntil(int64(2 * n))
				ran := heapAfterGC()
				b.ReportMetric(float64(registered-before)/float64(2*n), "B/registered-probe")
				b.ReportMetric(float64(ran-before)/float64(2*n), "B/probe-after-first-run")
				f.close()
			}
		})
	}
}

// BenchmarkManagerAddRemovePod: AddPod and RemovePod of one pod (two
// probes) in a manager holding 10k pods.
func BenchmarkManagerAddRemovePod(b *testing.B) {
	f := newFixture(b, 10000)
	defer f.close()
	for _, p := range f.pods {
		f.mgr.AddPod(context.Background(), p)
	}
	extra, _ := makePods(1, f.clk.Now())
	pod := extra[0]
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		pod.UID = types.UID("extra-" + strconv.Itoa(i))
		f.mgr.AddPod(context.Background(), pod)
		f.mgr.RemovePod(pod)
	}
}

// BenchmarkManagerRun: the cost of one executed probe run end to end
// (scheduler, pool, doProbe, handler, results, metrics, no-op span) with the
// instant exec handler, 20k probes stepping one period at a time.
func BenchmarkManagerRun(b *testing.B) {
	const pods = 10000
	f := newFixture(b, pods)
	defer f.close()
	for _, p := range f.pods {
		f.mgr.AddPod(context.Background(), p)
	}
	f.runUntil(2 * pods) // first runs: series and results created
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	start := f.obs.n.Load()
	for f.obs.n.Load()-start < int64(b.N) {
		f.runUntil(f.obs.n.Load() + 2*pods)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(f.obs.n.Load()-start), "ns/run")
	b.ReportMetric(float64(processCPU()-cpu0)/float64(f.obs.n.Load()-start), "cpu-ns/run")
}

// BenchmarkManagerRunStatePeriods: one executed run end to
// end, as BenchmarkManagerRun, for 20k probes at 1 s that all succeed:
// "spec" the containers' own probes (today's path), "annotation" the same
// probes in the probed.io/probes annotation, "state-periods" those with
// unhealthyPeriodMilliseconds and transitionPeriodMilliseconds (500 ms,
// used before the first success and while failures count). In steady
// state the worker's state does not change, so choosing the period costs
// a nil check and a comparison per run and no scheduler call: ns/run of
// "state-periods" must match "annotation" within noise (a change of
// period is BenchmarkSchedulerSetPeriod).
func BenchmarkManagerRunStatePeriods(b *testing.B) {
	for _, v := range []struct{ name, annotation string }{
		{"spec", ""},
		{"annotation", `"periodSeconds":1,"failureThreshold":3`},
		{"state-periods", `"periodSeconds":1,"failureThreshold":3,"unhealthyPeriodMilliseconds":500,"transitionPeriodMilliseconds":500`},
	} {
		b.Run(v.name, func(b *testing.B) {
			const pods = 10000
			f := newFixtureAnnotated(b, pods, v.annotation)
			defer f.close()
			for _, p := range f.pods {
				f.mgr.AddPod(context.Background(), p)
			}
			// First runs (series and results created), then the switch
			// to the healthy period and its grow phase (up to a period).
			for i := 0; i < 4; i++ {
				f.stepIdle(b)
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU()
			start := f.obs.n.Load()
			for f.obs.n.Load()-start < int64(b.N) {
				f.runUntil(f.obs.n.Load() + 2*pods)
			}
			b.StopTimer()
			runs := f.obs.n.Load() - start
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(runs), "ns/run")
			b.ReportMetric(float64(processCPU()-cpu0)/float64(runs), "cpu-ns/run")
		})
	}
}

// newFixtureAnnotated is newFixture whose pods declare their readiness and
// liveness exec probes in the probed.io/probes annotation with the given
// timing fields instead of the spec ("": the spec's, as newFixture).
func newFixtureAnnotated(tb testing.TB, n int, timing string) *fixture {
	f := newFixture(tb, n)
	if timing == "" {
		return f
	}
	for _, p := range f.pods {
		c := &p.Spec.Containers[0]
		c.ReadinessProbe, c.LivenessProbe = nil, nil
		p.Annotations = map[string]string{"probed.io/probes": `[` +
			`{"container":"c","type":"readiness",` + timing + `,"exec":{"command":["probe","r"]}},` +
			`{"container":"c","type":"liveness",` + timing + `,"exec":{"command":["probe","l"]}}]`}
	}
	return f
}

// discardExporter takes spans and drops them: the cost of recording and
// batching, without an exporter's I/O.
type discardExporter struct{ spans atomic.Int64 }

func (d *discardExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	d.spans.Add(int64(len(spans)))
	return nil
}
func (d *discardExporter) Shutdown(context.Context) error { return nil }

// BenchmarkManagerRunTracing (issue #6): one executed run end to end, as
// BenchmarkManagerRun, with tracing off in its two forms — "off": no
// provider given and the global one never configured (the library's
// default); "noop": the no-op provider given explicitly (the agent with
// OTEL_TRACES_EXPORTER=none) — with the default sampler (probed_default:
// record every probe span, export failed, errored and changed runs and 1%
// of the rest) and with every span kept (always_on). probes/s = 1e9 /
// ns/run on this machine; the targets: default ≤ 5% slower than off.
func BenchmarkManagerRunTracing(b *testing.B) {
	b.Run("instant", func(b *testing.B) { benchTracing(b, 10000, 0) })
	b.Run("tcp", func(b *testing.B) {
		benchTracing(b, 1000, nettest.AcceptAndClose(b))
	})
}

func benchTracing(b *testing.B, pods, tcpPort int) {
	for _, c := range []struct{ name, sampler string }{{"off", ""}, {"noop", ""}, {"default", "probed_default"}, {"all", "always_on"}} {
		b.Run(c.name, func(b *testing.B) {
			var tp trace.TracerProvider
			exp := &discardExporter{}
			if c.name == "noop" {
				tp = tracenoop.NewTracerProvider()
			}
			if c.sampler != "" {
				opts, err := telemetry.SamplingFor(c.sampler, "", exp)
				if err != nil {
					b.Fatal(err)
				}
				sdk := sdktrace.NewTracerProvider(opts...)
				defer sdk.Shutdown(context.Background())
				tp = sdk
			}
			f := newFixtureTCP(b, pods, tp, tcpPort)
			defer f.close()
			for _, p := range f.pods {
				f.mgr.AddPod(context.Background(), p)
			}
			f.runUntil(int64(2 * pods))
			b.ReportAllocs()
			b.ResetTimer()
			start := f.obs.n.Load()
			for f.obs.n.Load()-start < int64(b.N) {
				f.runUntil(f.obs.n.Load() + int64(2*pods))
			}
			b.StopTimer()
			runs := f.obs.n.Load() - start
			nsPerRun := float64(b.Elapsed().Nanoseconds()) / float64(runs)
			b.ReportMetric(nsPerRun, "ns/run")
			b.ReportMetric(1e9/nsPerRun, "probes/s")
		})
	}
}
