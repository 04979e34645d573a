package resident

import "github.com/prometheus/client_golang/prometheus"

// metrics are the runner's (docs/operations.md "Metrics").
type metrics struct {
	runs    *prometheus.CounterVec // probed_exec_runs_total{mode, reason}
	helpers prometheus.Gauge       // probed_exec_helpers
	starts  *prometheus.CounterVec // probed_exec_helper_starts_total{result}
	lost    *prometheus.CounterVec // probed_exec_helpers_lost_total{reason}
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "probed_exec_runs_total",
			Help: "Exec probe runs in the container by how they ran: mode resident (through the container's helper) or execsync (CRI ExecSync), and for execsync under --exec-mode resident why (unsupported, starting, busy; empty under --exec-mode execsync).",
		}, []string{"mode", "reason"}),
		helpers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "probed_exec_helpers",
			Help: "Resident exec helpers running (one per container with exec probes, --exec-mode resident).",
		}),
		starts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "probed_exec_helper_starts_total",
			Help: "Resident exec helpers started, by result: ready, unsupported (the container cannot host one: its exec probes use ExecSync) or failed (tried again after a backoff).",
		}, []string{"result"}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "probed_exec_helpers_lost_total",
			Help: "Resident exec helpers replaced, by reason: ended (killed from outside, container stopped), unresponsive (did not answer a kill) or protocol (wrote out of turn).",
		}, []string{"reason"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.runs, m.helpers, m.starts, m.lost} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}
