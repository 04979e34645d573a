package statuspage

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestHistogramQuantile: PromQL's histogram_quantile over the lanes' series
// summed, interpolated within the bucket; the highest finite bound for the
// +Inf bucket; false without observations.
func TestHistogramQuantile(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: lagMetric, Buckets: []float64{0.001, 0.01, 0.1}}, []string{"lane"})
	reg.MustRegister(h)
	mfs, _ := reg.Gather()
	if _, ok := histogramQuantile(0.99, mfs, lagMetric); ok {
		t.Fatal("quantile of an empty histogram")
	}
	for range 90 {
		h.WithLabelValues("network").Observe(0.0005) // bucket ≤1ms
	}
	for range 10 {
		h.WithLabelValues("slow").Observe(0.05) // bucket 10-100ms
	}
	mfs, _ = reg.Gather()
	// rank 99 of 100: 9 of the 10 observations in (0.01, 0.1]: 0.01 + 0.09*0.9.
	got, ok := histogramQuantile(0.99, mfs, lagMetric)
	if want := 91 * time.Millisecond; !ok || got < want-time.Microsecond || got > want+time.Microsecond {
		t.Fatalf("p99 = %v %v, want %v", got, ok, want)
	}
	h.WithLabelValues("slow").Observe(5) // +Inf
	for range 1000 {
		h.WithLabelValues("slow").Observe(7)
	}
	mfs, _ = reg.Gather()
	if got, _ := histogramQuantile(0.99, mfs, lagMetric); got != 100*time.Millisecond {
		t.Fatalf("p99 in +Inf = %v, want the highest finite bound 100ms", got)
	}
}
