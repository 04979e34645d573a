package gate

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the writer's Prometheus series.
type metrics struct {
	patches  prometheus.Counter
	failures *prometheus.CounterVec
}

// newMetrics builds the series and registers them with reg (nil: none):
//
//	probed_readiness_gate_patches_total                 condition patches the API server accepted
//	probed_readiness_gate_patch_failures_total{reason}  failed patches by reason (see failureReason)
//	probed_readiness_gate_queue_depth                   pods queued for a write, not yet taken
//	probed_readiness_gate_writes_pending                pods that may still need a write (WritesPending)
func newMetrics(reg prometheus.Registerer, w *Writer) (*metrics, error) {
	m := &metrics{
		patches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "probed_readiness_gate_patches_total",
			Help: "Readiness-gate condition patches the API server accepted.",
		}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "probed_readiness_gate_patch_failures_total",
			Help: "Readiness-gate condition patches that failed, by reason (the API status reason, Timeout or Transport).",
		}, []string{"reason"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{
		m.patches, m.failures,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "probed_readiness_gate_queue_depth",
			Help: "Pods queued for a readiness-gate condition write and not yet taken by a worker.",
		}, func() float64 { return float64(w.queueDepth()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "probed_readiness_gate_writes_pending",
			Help: "Gated pods whose condition may still need a write: queued, in flight or waiting for a retry.",
		}, func() float64 { return float64(w.WritesPending()) }),
	} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
