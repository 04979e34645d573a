package resident

import "github.com/prometheus/client_golang/prometheus"

// Runs is probed_exec_runs_total, for the tests.
func (r *Runner) Runs() *prometheus.CounterVec { return r.metrics.runs }

// Lost is probed_exec_helpers_lost_total, for the tests.
func (r *Runner) Lost() *prometheus.CounterVec { return r.metrics.lost }

// Starts is probed_exec_helper_starts_total, for the tests.
func (r *Runner) Starts() *prometheus.CounterVec { return r.metrics.starts }

// Sessions counts the helpers whose session is under way (starting,
// running, or ending), for the tests.
func (r *Runner) Sessions() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.helpers)
}
