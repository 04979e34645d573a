package manager

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/probed/probed/manager/results"
)

// The kubelet's prober metrics (spec X1–X4), same names, labels and
// buckets. They belong on a registry served at /metrics/probes (X3).
const (
	MetricProbeTotal    = "prober_probe_total"
	MetricProbeDuration = "prober_probe_duration_seconds"
)

// Result label values of prober_probe_total (X1).
const (
	resultSuccessful = "successful"
	resultFailed     = "failed"
	resultUnknown    = "unknown"
)

var resultLabels = [3]string{resultSuccessful, resultFailed, resultUnknown}

type proberMetrics struct {
	// aggregate drops the per-pod label values (container, pod, namespace,
	// pod_uid are empty): one series per probe type and result, shared by
	// every worker and never deleted.
	aggregate bool
	reg       prometheus.Registerer
	total     *prometheus.CounterVec
	duration  *prometheus.HistogramVec
}

func newProberMetrics(reg prometheus.Registerer, aggregate bool) (*proberMetrics, error) {
	pm := &proberMetrics{
		aggregate: aggregate,
		reg:       reg,
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "prober",
			Name:      "probe_total",
			Help:      "Cumulative number of a liveness, readiness or startup probe for a container by result.",
		}, []string{"probe_type", "result", "container", "pod", "namespace", "pod_uid"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "prober",
			Name:      "probe_duration_seconds",
			Help:      "Duration in seconds for a probe response.",
			Buckets:   prometheus.DefBuckets,
		}, []string{"probe_type", "container", "pod", "namespace"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{pm.total, pm.duration} {
			if err := reg.Register(c); err != nil {
				var are prometheus.AlreadyRegisteredError
				if errors.As(err, &are) {
					// Another manager registered first: share its vectors.
					switch v := are.ExistingCollector.(type) {
					case *prometheus.CounterVec:
						pm.total = v
					case *prometheus.HistogramVec:
						pm.duration = v
					}
					continue
				}
				return nil, err
			}
		}
	}
	return pm, nil
}

func (pm *proberMetrics) unregister() {
	if pm.reg != nil {
		pm.reg.Unregister(pm.total)
		pm.reg.Unregister(pm.duration)
	}
}

// observe counts one non-errored probe execution (X1) and, for a success,
// its duration (X2: failures are not observed).
func (pm *proberMetrics) observe(w *worker, r results.Result, d time.Duration) {
	idx := 2
	switch r {
	case results.Success:
		idx = 0
	case results.Failure:
		idx = 1
	}
	if w.series == nil {
		w.series = &workerSeries{}
	}
	ws := w.series
	if ws.total[idx] == nil {
		container, pod, ns, uid := pm.podLabels(w)
		ws.total[idx] = pm.total.WithLabelValues(w.rs.ProbeType.String(), resultLabels[idx], container, pod, ns, uid)
	}
	ws.total[idx].Inc()
	if r != results.Failure {
		if ws.dur == nil {
			container, pod, ns, _ := pm.podLabels(w)
			ws.dur = pm.duration.WithLabelValues(w.rs.ProbeType.String(), container, pod, ns)
		}
		ws.dur.Observe(d.Seconds())
	}
}

// podLabels returns the per-pod label values, or empty ones in aggregate mode.
func (pm *proberMetrics) podLabels(w *worker) (container, pod, namespace, uid string) {
	if pm.aggregate {
		return "", "", "", ""
	}
	return w.rs.Container.Name, w.rs.Pod.Name, w.rs.Pod.Namespace, string(w.rs.Pod.UID)
}

// deleteSeries removes the worker's series (X4, W4). Aggregated series are
// shared and stay.
func (pm *proberMetrics) deleteSeries(w *worker) {
	if pm.aggregate || w.series == nil {
		return
	}
	for i := range resultLabels {
		pm.total.DeleteLabelValues(w.rs.ProbeType.String(), resultLabels[i], w.rs.Container.Name, w.rs.Pod.Name, w.rs.Pod.Namespace, string(w.rs.Pod.UID))
	}
	pm.duration.DeleteLabelValues(w.rs.ProbeType.String(), w.rs.Container.Name, w.rs.Pod.Name, w.rs.Pod.Namespace)
}
