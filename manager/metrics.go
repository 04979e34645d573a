package manager

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/probed/probed/manager/results"
	"github.com/probed/probed/runtime"
)

// The kubelet's prober metrics (spec X1–X4), same names, labels and
// buckets. They belong on a registry served at /metrics/probes (X3).
const (
	MetricProbeTotal    = "prober_probe_total"
	MetricProbeDuration = "prober_probe_duration_seconds"
)

// Result label values of prober_probe_total (X1).
var resultLabels = [3]string{"successful", "failed", "unknown"}

var (
	descProbeTotal = prometheus.NewDesc(MetricProbeTotal,
		"Cumulative number of a liveness, readiness or startup probe for a container by result.",
		[]string{"probe_type", "result", "container", "pod", "namespace", "pod_uid"}, nil)
	descProbeDuration = prometheus.NewDesc(MetricProbeDuration,
		"Duration in seconds for a probe response.",
		[]string{"probe_type", "container", "pod", "namespace"}, nil)
)

// durationBuckets are the default Prometheus buckets, the kubelet's (X2).
var durationBuckets = prometheus.DefBuckets

const nBuckets = 11 // len(prometheus.DefBuckets)

// workerSeries are a worker's counts, allocated on its first executed run
// (the kubelet creates a series on its first increment): about 130 bytes
// a worker where client_golang's labelled children cost kilobytes. They are
// turned into series at scrape time; a worker's series go with the worker
// (X4).
type workerSeries struct {
	total    [3]atomic.Uint64        // by result: successful, failed, unknown
	buckets  [nBuckets]atomic.Uint64 // observations per bucket (not cumulative); above the last: count − sum
	count    atomic.Uint64
	sumNanos atomic.Uint64
}

// proberMetrics is a prometheus.Collector over the manager's workers.
type proberMetrics struct {
	m   *manager
	reg prometheus.Registerer
	// aggregate drops the per-pod label values (container, pod, namespace,
	// pod_uid are empty): one series per probe type and result; the counts
	// of exited workers are kept in retired so counters never decrease.
	aggregate bool
	retired   [3]*workerSeries // by probe type, guarded by m.mu
}

func newProberMetrics(reg prometheus.Registerer, aggregate bool, m *manager) (*proberMetrics, error) {
	pm := &proberMetrics{m: m, reg: reg, aggregate: aggregate}
	for i := range pm.retired {
		pm.retired[i] = &workerSeries{}
	}
	if reg == nil {
		return pm, nil
	}
	if err := reg.Register(pm); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			return nil, errors.New("manager: prober metrics are already registered on this registerer (one manager per registry)")
		}
		return nil, err
	}
	return pm, nil
}

func (pm *proberMetrics) unregister() {
	if pm.reg != nil {
		pm.reg.Unregister(pm)
	}
}

// observe counts one non-errored probe execution (X1) and, for a success,
// its duration (X2: failures are not observed).
func (pm *proberMetrics) observe(w *worker, r results.Result, d time.Duration) {
	if pm.reg == nil {
		return // nobody can scrape them
	}
	// The pointer is atomic: Collect reads it under m.mu while the
	// worker's run, which holds no lock, may be creating it.
	ws := w.series.Load()
	if ws == nil {
		ws = &workerSeries{}
		if !w.series.CompareAndSwap(nil, ws) {
			ws = w.series.Load()
		}
	}
	switch r {
	case results.Success:
		ws.total[0].Add(1)
	case results.Failure:
		ws.total[1].Add(1)
		return
	default:
		ws.total[2].Add(1)
	}
	secs := d.Seconds()
	for i, le := range durationBuckets {
		if secs <= le {
			ws.buckets[i].Add(1)
			break
		}
	}
	ws.count.Add(1)
	ws.sumNanos.Add(uint64(d))
}

// deleteSeries runs when a worker leaves the set (X4, W4), under m.mu: its series
// disappear with it; in aggregate mode its counts join the retired ones.
func (pm *proberMetrics) deleteSeries(w *worker) {
	ws := w.series.Load()
	if !pm.aggregate || ws == nil {
		return
	}
	pm.retired[w.rs.ProbeType].add(ws)
}

func (s *workerSeries) add(o *workerSeries) {
	for i := range s.total {
		s.total[i].Add(o.total[i].Load())
	}
	for i := range s.buckets {
		s.buckets[i].Add(o.buckets[i].Load())
	}
	s.count.Add(o.count.Load())
	s.sumNanos.Add(o.sumNanos.Load())
}

// Describe implements prometheus.Collector.
func (pm *proberMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- descProbeTotal
	ch <- descProbeDuration
}

type durKey struct {
	probeType, container, pod, namespace string
}

type durSum struct {
	buckets  [nBuckets]uint64
	count    uint64
	sumNanos uint64
}

func (d *durSum) add(s *workerSeries) {
	for i := range d.buckets {
		d.buckets[i] += s.buckets[i].Load()
	}
	d.count += s.count.Load()
	d.sumNanos += s.sumNanos.Load()
}

// Collect implements prometheus.Collector: one prober_probe_total series
// per worker and result that has counted something, and one duration
// histogram per (probe type, container, pod, namespace) — workers of two
// pods with the same name share it, as in the kubelet.
func (pm *proberMetrics) Collect(ch chan<- prometheus.Metric) {
	m := pm.m
	durs := map[durKey]*durSum{}
	var totals [3][3]uint64 // aggregate mode: by probe type, result
	m.mu.RLock()
	m.workers.each(func(w *worker) {
		ws := w.series.Load()
		if ws == nil {
			return
		}
		pt := w.rs.ProbeType
		if pm.aggregate {
			for i := range totals[pt] {
				totals[pt][i] += ws.total[i].Load()
			}
		} else {
			for i, label := range resultLabels {
				if v := ws.total[i].Load(); v > 0 {
					ch <- prometheus.MustNewConstMetric(descProbeTotal, prometheus.CounterValue, float64(v),
						pt.String(), label, w.rs.Container.Name, w.rs.Pod.Name, w.rs.Pod.Namespace, string(w.rs.Pod.UID))
				}
			}
		}
		if ws.count.Load() == 0 {
			return
		}
		k := durKey{probeType: pt.String()}
		if !pm.aggregate {
			k.container, k.pod, k.namespace = w.rs.Container.Name, w.rs.Pod.Name, w.rs.Pod.Namespace
		}
		d, ok := durs[k]
		if !ok {
			d = &durSum{}
			durs[k] = d
		}
		d.add(ws)
	})
	if pm.aggregate {
		for pt, r := range pm.retired {
			for i := range totals[pt] {
				totals[pt][i] += r.total[i].Load()
			}
			if r.count.Load() > 0 {
				k := durKey{probeType: ptString(pt)}
				d, ok := durs[k]
				if !ok {
					d = &durSum{}
					durs[k] = d
				}
				d.add(r)
			}
		}
	}
	m.mu.RUnlock()
	if pm.aggregate {
		for pt := range totals {
			for i, label := range resultLabels {
				if v := totals[pt][i]; v > 0 {
					ch <- prometheus.MustNewConstMetric(descProbeTotal, prometheus.CounterValue, float64(v), ptString(pt), label, "", "", "", "")
				}
			}
		}
	}
	for k, d := range durs {
		cum := make(map[float64]uint64, nBuckets)
		var acc uint64
		for i, le := range durationBuckets {
			acc += d.buckets[i]
			cum[le] = acc
		}
		ch <- prometheus.MustNewConstHistogram(descProbeDuration, d.count, float64(d.sumNanos)/float64(time.Second), cum,
			k.probeType, k.container, k.pod, k.namespace)
	}
}

func ptString(pt int) string { return runtime.ProbeType(pt).String() }
