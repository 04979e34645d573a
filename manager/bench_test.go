package manager

import (
	"context"
	"fmt"
	goruntime "runtime"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/probed/probed/manager/results"
	"github.com/probed/probed/runtime"
	"github.com/probed/probed/scheduler"
)

// benchPods returns n pods of one container with readiness and liveness
// exec probes, and their running statuses in e.
func benchPods(e *testEnv, n int) []*v1.Pod {
	pods := make([]*v1.Pod, n)
	for i := range pods {
		c := v1.Container{Name: "c", ReadinessProbe: execProbe(), LivenessProbe: execProbe()}
		pods[i] = podWith(types.UID(fmt.Sprintf("%08d-0000-0000-0000-000000000000", i)), c)
		st := runningStatus(fakeNow, true)
		st.ContainerStatuses[0].Name = "c"
		st.ContainerStatuses[0].ContainerID = "test://" + string(pods[i].UID)
		e.status.set(pods[i].UID, st)
	}
	return pods
}

// BenchmarkRegisteredProbeBytes reports the heap a registered probe costs:
// the worker, its index entry, its scheduler slot and its prepared handler,
// without the pod objects (DESIGN: a few hundred bytes at most; issue #3
// target: ≤ 300 B).
func BenchmarkRegisteredProbeBytes(b *testing.B) {
	const n = 20000
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		e := newTestEnv(b)
		pods := benchPods(e, n)
		goruntime.GC()
		var before, after goruntime.MemStats
		goruntime.ReadMemStats(&before)
		b.StartTimer()
		for _, p := range pods {
			e.m.AddPod(context.Background(), p)
		}
		b.StopTimer()
		goruntime.GC()
		goruntime.ReadMemStats(&after)
		b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/(2*n), "B/probe")
		// After one executed run each: the prober metrics' counts exist.
		e.m.mu.RLock()
		var ids []scheduler.ID
		e.m.workers.each(func(w *worker) { ids = append(ids, w.id) })
		e.m.mu.RUnlock()
		for _, id := range ids {
			e.m.sched.Trigger(id)
		}
		e.idle()
		goruntime.GC()
		goruntime.ReadMemStats(&after)
		b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/(2*n), "B/probe-after-run")
		b.ReportMetric(float64(e.exec.calls.Load())/(2*n), "runs/probe")
	}
}

// BenchmarkAddRemovePod measures registering and unregistering one pod
// with two probes (AddPod, RemovePod and the workers' exit).
func BenchmarkAddRemovePod(b *testing.B) {
	e := newTestEnv(b)
	pods := benchPods(e, 1024)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p := pods[i%len(pods)]
		e.m.AddPod(context.Background(), p)
		e.m.RemovePod(p)
		if i%len(pods) == len(pods)-1 {
			b.StopTimer()
			e.waitWorkerCount(0)
			b.StartTimer()
		}
	}
}

// BenchmarkProbeSpan is the tracing code of one run alone (startSpan, the
// changed lookup's guard, endSpan) for a successful in-process run: "off"
// with the global provider never set and "noop" with the no-op provider
// given (both: no span), "drop" with an SDK provider whose sampler drops the
// deferred span (what the default sampler does to an unremarkable run), and
// "record" with every span kept. Against the ~2 µs of a whole run with an
// instant handler (bench/micro BenchmarkManagerRunTracing), it is the
// tracing overhead of issue #6 without the run's noise.
func BenchmarkProbeSpan(b *testing.B) {
	for _, c := range []struct {
		name string
		tp   func() trace.TracerProvider
	}{
		{"off", func() trace.TracerProvider { return nil }},
		{"noop", func() trace.TracerProvider { return tracenoop.NewTracerProvider() }},
		{"drop", func() trace.TracerProvider {
			return sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
		}},
		{"record", func() trace.TracerProvider {
			return sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			e := newTestEnv(b, func(o *Options) { o.TracerProvider = c.tp() })
			pods := benchPods(e, 1)
			e.m.AddPod(context.Background(), pods[0])
			w := e.worker(pods[0].UID, "c", runtime.Readiness)
			rep := runtime.Report{Outcome: runtime.Outcome{Result: runtime.Success}, Attempts: 1}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				_, ps := e.m.startSpan(ctx, w, "10.0.0.1")
				e.m.endSpan(ctx, &ps, w, rep, results.Success, true, false)
			}
		})
	}
}

// BenchmarkRunMetrics is the metric updates of one successful run: the
// kubelet-compatible prober_probe_total / duration counts and probed's own
// probed_probes_total (with Options.RuntimeMetricsRegisterer, as the agent
// runs), without the rest of the run.
func BenchmarkRunMetrics(b *testing.B) {
	e := newTestEnv(b, func(o *Options) { o.RuntimeMetricsRegisterer = prometheus.NewRegistry() })
	pods := benchPods(e, 1)
	e.m.AddPod(context.Background(), pods[0])
	w := e.worker(pods[0].UID, "c", runtime.Readiness)
	rep := runtime.Report{Outcome: runtime.Outcome{Result: runtime.Success}, Attempts: 1}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	for i := 0; i < b.N; i++ {
		w.counters.countProbe(rep)
		e.m.metrics.observe(w, results.Success, time.Millisecond)
	}
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
}

// processCPU is the process's user + system CPU time in nanoseconds: on a
// shared machine CPU per operation means more than wall time.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
