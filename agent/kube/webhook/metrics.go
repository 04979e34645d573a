package webhook

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the webhook's own: its reviews by outcome and their time.
type metrics struct {
	reviews  *prometheus.CounterVec
	duration prometheus.Histogram
}

// newMetrics registers the metrics with reg (nil: none are kept).
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	m := &metrics{
		reviews: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "probed_offload_admissions_total",
			Help: "Pod admissions the offload webhook answered, by outcome: moved (probes moved into probed's care), left (the pod's probes all stay with the kubelet), untouched (nothing to move, or a namespace not selected), undecided (namespaces not read yet, a pod that does not decode: left as it came).",
		}, []string{"result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "probed_offload_admission_duration_seconds",
			Help:    "Time the offload webhook took to answer a pod admission, its decoding and the move included.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}),
	}
	for _, o := range []string{OutcomeMoved, OutcomeLeft, OutcomeUntouched, OutcomeUndecided} {
		m.reviews.WithLabelValues(o)
	}
	for _, c := range []prometheus.Collector{m.reviews, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) observe(outcome string, d time.Duration) {
	if m == nil {
		return
	}
	m.reviews.WithLabelValues(outcome).Inc()
	m.duration.Observe(d.Seconds())
}
