package manager

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/probed/probed/runtime"
)

// probed_probes_total counts each run under its handler kind, probe type
// and verdict (success, warning, failure, unknown) or errored, and
// probed_probes_errored_total an errored run by reason; a result's series
// exists only once a run had it (the counters are bound on first use).
func TestRuntimeMetricsCountRunsByResult(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := newTestEnv(t, func(o *Options) { o.RuntimeMetricsRegisterer = reg })
	pods := benchPods(e, 1)
	e.m.AddPod(context.Background(), pods[0])
	w := e.worker(pods[0].UID, "c", runtime.Readiness)
	e.idle()
	base := testutil.ToFloat64(e.m.rtm.probes.WithLabelValues("exec", "readiness", "success"))

	for _, r := range []runtime.Result{runtime.Success, runtime.Warning, runtime.Failure, runtime.Failure} {
		e.exec.set(r)
		e.runOnce(w)
	}
	e.exec.setErr(errors.New("boom"))
	e.runOnce(w)

	want := map[string]float64{"success": base + 1, "warning": 1, "failure": 2, "errored": 1}
	for result, n := range want {
		if got := testutil.ToFloat64(e.m.rtm.probes.WithLabelValues("exec", "readiness", result)); got != n {
			t.Errorf("probed_probes_total{handler=exec,probe_type=readiness,result=%s} = %v, want %v", result, got, n)
		}
	}
	// errored: each of the run's attempts errored; one errored run.
	if got := testutil.ToFloat64(e.m.rtm.errored.WithLabelValues("exec", "readiness", runtime.ReasonHandlerError)); got != 1 {
		t.Errorf("probed_probes_errored_total{reason=%s} = %v, want 1", runtime.ReasonHandlerError, got)
	}
	// No series for a verdict no run had (WithLabelValues above created
	// only those of want; "unknown" must not exist).
	if n := testutil.CollectAndCount(e.m.rtm.probes); n != len(want) {
		t.Errorf("probed_probes_total has %d series, want %d (no unknown series without an unknown run)", n, len(want))
	}
}
