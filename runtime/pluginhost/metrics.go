package pluginhost

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the host's Prometheus metrics; a nil *metrics does nothing.
type metrics struct {
	reg        prometheus.Registerer
	restarts   *prometheus.CounterVec
	collectors []prometheus.Collector
}

// newMetrics registers probed_plugin_up, probed_plugin_restarts_total and
// probed_plugin_in_flight on reg (nil: no metrics).
func newMetrics(reg prometheus.Registerer, h *Host) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	m := &metrics{reg: reg}
	m.restarts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "probed_plugin_restarts_total",
		Help: "Restart attempts of probe plugins after their process died.",
	}, []string{"plugin"})
	up := prometheus.NewDesc("probed_plugin_up", "1 when the probe plugin's process is running and serving, else 0.", []string{"plugin"}, nil)
	inFlight := prometheus.NewDesc("probed_plugin_in_flight", "Probes in flight in the probe plugin (bounded by its maxInFlight).", []string{"plugin"}, nil)
	gauges := &gaugeCollector{h: h, up: up, inFlight: inFlight}
	for _, c := range []prometheus.Collector{m.restarts, gauges} {
		if err := reg.Register(c); err != nil {
			m.unregister()
			return nil, fmt.Errorf("plugin metrics: %w", err)
		}
		m.collectors = append(m.collectors, c)
	}
	return m, nil
}

// declare creates the plugin's restart counter at 0, so the series exists
// from the start rather than from the first restart.
func (m *metrics) declare(plugin string) {
	if m != nil {
		m.restarts.WithLabelValues(plugin)
	}
}

func (m *metrics) restarted(plugin string) {
	if m != nil {
		m.restarts.WithLabelValues(plugin).Inc()
	}
}

func (m *metrics) unregister() {
	if m == nil {
		return
	}
	for _, c := range m.collectors {
		m.reg.Unregister(c)
	}
	m.collectors = nil
}

type gaugeCollector struct {
	h            *Host
	up, inFlight *prometheus.Desc
}

func (g *gaugeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- g.up
	ch <- g.inFlight
}

func (g *gaugeCollector) Collect(ch chan<- prometheus.Metric) {
	for _, in := range g.h.plugins {
		if !in.ready.Load() {
			continue
		}
		v := 0.0
		if in.live.Load() != nil {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(g.up, prometheus.GaugeValue, v, in.cfg.Name)
		ch <- prometheus.MustNewConstMetric(g.inFlight, prometheus.GaugeValue, float64(len(in.sem)), in.cfg.Name)
	}
}
