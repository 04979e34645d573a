package telemetry_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/probed/probed/agent"
	"github.com/probed/probed/runtime/pluginhost/pluginhosttest"
)

const (
	metricsWebUID   = "8e1f2a3b-4c5d-4e6f-8a7b-9c0d1e2f3a4b"
	metricsOtherUID = "1f2e3d4c-5b6a-4798-8a9b-aabbccddeeff"
	metricsPlugUID  = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"
)

// metricsManifests writes, into dir:
//
//   - ns1/web-7d4b9c6f5-x2x9z, container app: startup on /ok/web/start,
//     liveness on /ok/web/live (200), readiness on /fail/web/ready (500);
//   - ns2/other, container c: readiness on /ok/other/ready, liveness on
//     /ok/other/live (200);
//   - with tracefile set, tel/plug, container side: a readiness probe of
//     kind "test" (the test plugin, success) appending each call to
//     tracefile.
//
// All periods are 1 s.
func metricsManifests(t *testing.T, dir string, port int, tracefile string) {
	t.Helper()
	writeManifest(t, filepath.Join(dir, "web.yaml"), fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: web-7d4b9c6f5-x2x9z, generateName: web-7d4b9c6f5-, namespace: ns1, uid: %s}
spec:
  containers:
  - name: app
    image: app
    startupProbe:
      httpGet: {path: /ok/web/start, port: %[2]d}
      periodSeconds: 1
      timeoutSeconds: 5
    livenessProbe:
      httpGet: {path: /ok/web/live, port: %[2]d}
      periodSeconds: 1
      timeoutSeconds: 5
    readinessProbe:
      httpGet: {path: /fail/web/ready, port: %[2]d}
      periodSeconds: 1
      timeoutSeconds: 5
`, metricsWebUID, port))
	writeManifest(t, filepath.Join(dir, "other.yaml"), fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: other, namespace: ns2, uid: %s}
spec:
  containers:
  - name: c
    image: c
    readinessProbe:
      httpGet: {path: /ok/other/ready, port: %[2]d}
      periodSeconds: 1
      timeoutSeconds: 5
    livenessProbe:
      httpGet: {path: /ok/other/live, port: %[2]d}
      periodSeconds: 1
      timeoutSeconds: 5
`, metricsOtherUID, port))
	if tracefile == "" {
		return
	}
	writeManifest(t, filepath.Join(dir, "plug.yaml"), fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: plug
  namespace: tel
  uid: %s
  annotations:
    probed.io/probes: |
      [{"container": "side", "type": "readiness", "periodSeconds": 1, "timeoutSeconds": 5,
        "plugin": {"name": "test", "params": {"mode": "ok", "tracefile": %q}}}]
spec:
  containers:
  - name: side
    image: side
`, metricsPlugUID, tracefile))
}

// scrape GETs path and parses the Prometheus text format.
func scrape(ra *runningAgent, path string) (map[string]*dto.MetricFamily, error) {
	body, err := ra.get(path)
	if err != nil {
		return nil, err
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(bytes.NewReader(body))
}

// labels of a metric as a map.
func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, lp := range m.GetLabel() {
		out[lp.GetName()] = lp.GetValue()
	}
	return out
}

// seriesKey formats label values in the order of names: "a=x,b=y".
func seriesKey(l map[string]string, names ...string) string {
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = n + "=" + l[n]
	}
	return strings.Join(parts, ",")
}

// value of a counter, gauge or untyped metric.
func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return -1
}

// series maps seriesKey(names) to value for the metrics of family name; it
// fails (ok false) when a series has other label names than names.
func series(fams map[string]*dto.MetricFamily, name string, names ...string) (out map[string]float64, desc string) {
	out = map[string]float64{}
	fam := fams[name]
	if fam == nil {
		return out, ""
	}
	for _, m := range fam.Metric {
		l := labels(m)
		var got []string
		for k := range l {
			got = append(got, k)
		}
		sort.Strings(got)
		want := append([]string{}, names...)
		sort.Strings(want)
		if strings.Join(got, ",") != strings.Join(want, ",") {
			return nil, fmt.Sprintf("%s series with labels %v, want exactly %v", name, got, want)
		}
		v := value(m)
		if m.Histogram != nil {
			v = float64(m.Histogram.GetSampleCount())
		}
		out[seriesKey(l, names...)] = v
	}
	return out, ""
}

// sameSeries compares two series maps exactly.
func sameSeries(got, want map[string]float64) (bool, string) {
	var keys []string
	for k := range want {
		keys = append(keys, k)
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var diff []string
	for _, k := range keys {
		g, gok := got[k]
		w, wok := want[k]
		if g != w || gok != wok {
			diff = append(diff, fmt.Sprintf("{%s}: got %v (present %v), want %v (present %v)", k, g, gok, w, wok))
		}
	}
	return len(diff) == 0, strings.Join(diff, "; ")
}

var proberTotalLabels = []string{"probe_type", "result", "container", "pod", "namespace", "pod_uid"}
var proberDurationLabels = []string{"probe_type", "container", "pod", "namespace"}

func ptKey(probeType, result, container, pod, ns, uid string) string {
	return seriesKey(map[string]string{"probe_type": probeType, "result": result, "container": container, "pod": pod, "namespace": ns, "pod_uid": uid}, proberTotalLabels...)
}

func durKey(probeType, container, pod, ns string) string {
	return seriesKey(map[string]string{"probe_type": probeType, "container": container, "pod": pod, "namespace": ns}, proberDurationLabels...)
}

// runs counts the executed runs of each probe: the targets' hits, the
// plugin's calls.
type runs map[string]int

func countRuns(tg *target, tracefile string) runs {
	r := runs{}
	for _, p := range []string{"/ok/web/start", "/ok/web/live", "/fail/web/ready", "/ok/other/ready", "/ok/other/live"} {
		r[p] = tg.count(p)
	}
	if tracefile != "" {
		data, _ := os.ReadFile(tracefile)
		r["plugin"] = strings.Count(string(data), "\n")
	}
	return r
}

func (r runs) equal(o runs) bool {
	if len(r) != len(o) {
		return false
	}
	for k, v := range r {
		if o[k] != v {
			return false
		}
	}
	return true
}

// quiet scrapes path between two equal counts of the runs, so that no run
// was in flight while the counts and the scrape were taken, and calls check
// until it holds.
func quiet(t *testing.T, ra *runningAgent, tg *target, tracefile, path, what string, check func(map[string]*dto.MetricFamily, runs) (bool, string)) map[string]*dto.MetricFamily {
	t.Helper()
	var fams map[string]*dto.MetricFamily
	eventually(t, 20*time.Second, what, func() (bool, string) {
		before := countRuns(tg, tracefile)
		f, err := scrape(ra, path)
		if err != nil {
			return false, err.Error()
		}
		after := countRuns(tg, tracefile)
		if !before.equal(after) {
			return false, "a run was in flight"
		}
		ok, desc := check(f, after)
		fams = f
		return ok, desc
	})
	return fams
}

// TestProbeMetricsOverHTTP scrapes a running agent's /metrics/probes and
// /metrics and parses them: prober_probe_total has exactly one series per
// probe and result with the kubelet's label values (probe_type
// Liveness/Readiness/Startup, result successful/failed, the full pod name,
// namespace, pod_uid, container) and counts equal to the runs the targets
// saw; prober_probe_duration_seconds counts the successful runs; the
// runtime's metrics (scheduler lag, backlog, entries, pools,
// probed_probes_total by handler, probe type and verdict) and the plugin's
// (up, in flight, restarts after a kill) have sensible values; and a pod's
// series disappear when its manifest file is removed, while the others'
// stay and never decrease.
func TestProbeMetricsOverHTTP(t *testing.T) {
	tg := newTarget(t)
	dir := t.TempDir()
	tracefile := filepath.Join(t.TempDir(), "calls")
	metricsManifests(t, dir, tg.port, tracefile)
	cfg, pluginDir := pluginConfig(t)
	ra := startAgent(t, dir, func(o *agent.Options) { o.PluginConfig = cfg })

	eventually(t, 30*time.Second, "every probe ran three times", func() (bool, string) {
		r := countRuns(tg, tracefile)
		for k, n := range r {
			if (k == "/ok/web/start" && n < 1) || (k != "/ok/web/start" && n < 3) {
				return false, fmt.Sprint(r)
			}
		}
		return true, ""
	})

	const web, other, plug = "web-7d4b9c6f5-x2x9z", "other", "plug"
	wantTotal := func(r runs) map[string]float64 {
		return map[string]float64{
			ptKey("Startup", "successful", "app", web, "ns1", metricsWebUID):      float64(r["/ok/web/start"]),
			ptKey("Liveness", "successful", "app", web, "ns1", metricsWebUID):     float64(r["/ok/web/live"]),
			ptKey("Readiness", "failed", "app", web, "ns1", metricsWebUID):        float64(r["/fail/web/ready"]),
			ptKey("Readiness", "successful", "c", other, "ns2", metricsOtherUID):  float64(r["/ok/other/ready"]),
			ptKey("Liveness", "successful", "c", other, "ns2", metricsOtherUID):   float64(r["/ok/other/live"]),
			ptKey("Readiness", "successful", "side", plug, "tel", metricsPlugUID): float64(r["plugin"]),
		}
	}
	wantDuration := func(r runs) map[string]float64 {
		// Successful runs only (X2); the failing readiness probe has none.
		return map[string]float64{
			durKey("Startup", "app", web, "ns1"):     float64(r["/ok/web/start"]),
			durKey("Liveness", "app", web, "ns1"):    float64(r["/ok/web/live"]),
			durKey("Readiness", "c", other, "ns2"):   float64(r["/ok/other/ready"]),
			durKey("Liveness", "c", other, "ns2"):    float64(r["/ok/other/live"]),
			durKey("Readiness", "side", plug, "tel"): float64(r["plugin"]),
		}
	}
	var lastTotal map[string]float64
	quiet(t, ra, tg, tracefile, "/metrics/probes", "prober_probe_total and prober_probe_duration_seconds match the runs",
		func(f map[string]*dto.MetricFamily, r runs) (bool, string) {
			if f["prober_probe_total"].GetType() != dto.MetricType_COUNTER || f["prober_probe_duration_seconds"].GetType() != dto.MetricType_HISTOGRAM {
				return false, "prober_probe_total is not a counter or prober_probe_duration_seconds not a histogram"
			}
			total, desc := series(f, "prober_probe_total", proberTotalLabels...)
			if total == nil {
				return false, desc
			}
			if ok, desc := sameSeries(total, wantTotal(r)); !ok {
				return false, "prober_probe_total: " + desc
			}
			dur, desc := series(f, "prober_probe_duration_seconds", proberDurationLabels...)
			if dur == nil {
				return false, desc
			}
			if ok, desc := sameSeries(dur, wantDuration(r)); !ok {
				return false, "prober_probe_duration_seconds sample counts: " + desc
			}
			lastTotal = total
			return true, ""
		})

	// /metrics: the runtime's own and the plugin's.
	quiet(t, ra, tg, tracefile, "/metrics", "the runtime metrics match the runs", func(f map[string]*dto.MetricFamily, r runs) (bool, string) {
		probes, desc := series(f, "probed_probes_total", "handler", "probe_type", "result")
		if probes == nil {
			return false, desc
		}
		key := func(h, pt, res string) string {
			return seriesKey(map[string]string{"handler": h, "probe_type": pt, "result": res}, "handler", "probe_type", "result")
		}
		want := map[string]float64{
			key("http", "startup", "success"):   float64(r["/ok/web/start"]),
			key("http", "liveness", "success"):  float64(r["/ok/web/live"] + r["/ok/other/live"]),
			key("http", "readiness", "failure"): float64(r["/fail/web/ready"]),
			key("http", "readiness", "success"): float64(r["/ok/other/ready"]),
			key("test", "readiness", "success"): float64(r["plugin"]),
		}
		if ok, desc := sameSeries(probes, want); !ok {
			return false, "probed_probes_total: " + desc
		}
		return true, ""
	})
	f, err := scrape(ra, "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	executed := 0
	for _, n := range countRuns(tg, tracefile) {
		executed += n
	}
	checkRuntimeMetrics(t, f, 6, executed)
	up, _ := series(f, "probed_plugin_up", "plugin")
	inFlight, _ := series(f, "probed_plugin_in_flight", "plugin")
	if up["plugin=testplugin"] != 1 {
		t.Errorf("probed_plugin_up = %v, want {plugin=testplugin} 1", up)
	}
	if v, ok := inFlight["plugin=testplugin"]; !ok || v < 0 || v > 64 {
		t.Errorf("probed_plugin_in_flight = %v, want {plugin=testplugin} within [0, 64]", inFlight)
	}

	// Kill the plugin: it is restarted, and counted.
	pids := pluginhosttest.Children(os.Getpid(), pluginDir)
	if len(pids) != 1 {
		t.Fatalf("plugin processes from %s: %v, want one", pluginDir, pids)
	}
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	callsAtKill := countRuns(tg, tracefile)["plugin"]
	eventually(t, 15*time.Second, "the killed plugin restarted and counted", func() (bool, string) {
		f, err := scrape(ra, "/metrics")
		if err != nil {
			return false, err.Error()
		}
		restarts, _ := series(f, "probed_plugin_restarts_total", "plugin")
		up, _ := series(f, "probed_plugin_up", "plugin")
		calls := countRuns(tg, tracefile)["plugin"]
		return restarts["plugin=testplugin"] >= 1 && up["plugin=testplugin"] == 1 && calls > callsAtKill,
			fmt.Sprintf("restarts %v, up %v, calls %d (at the kill %d)", restarts, up, calls, callsAtKill)
	})

	// Removing web's manifest removes its series; the others stay and never
	// decrease.
	if err := os.Remove(filepath.Join(dir, "web.yaml")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "web's series gone after its manifest was removed", func() (bool, string) {
		f, err := scrape(ra, "/metrics/probes")
		if err != nil {
			return false, err.Error()
		}
		total, _ := series(f, "prober_probe_total", proberTotalLabels...)
		dur, _ := series(f, "prober_probe_duration_seconds", proberDurationLabels...)
		for k := range total {
			if strings.Contains(k, web) {
				return false, "prober_probe_total still has " + k
			}
		}
		for k := range dur {
			if strings.Contains(k, web) {
				return false, "prober_probe_duration_seconds still has " + k
			}
		}
		for k, v := range lastTotal {
			if strings.Contains(k, web) {
				continue
			}
			if total[k] < v {
				return false, fmt.Sprintf("{%s} went from %v to %v (present: %v)", k, v, total[k], total[k] != 0)
			}
		}
		return len(total) == 3 && len(dur) == 3, fmt.Sprintf("prober_probe_total %v, duration %v: want other's and plug's series", total, dur)
	})
	ra.stop()
}

// checkRuntimeMetrics checks the scheduler and pool metrics of a quiet
// agent with PoolSize 16, SlowPoolSize 8 and ExecPoolSize 4, entries probe
// workers and at least executed runs (all quick: none reaches the slow lane).
func checkRuntimeMetrics(t *testing.T, f map[string]*dto.MetricFamily, entries, executed int) {
	t.Helper()
	lag := f["probed_scheduler_lag_seconds"]
	if lag.GetType() != dto.MetricType_HISTOGRAM {
		t.Fatalf("probed_scheduler_lag_seconds: %v, want a histogram", lag)
	}
	lanes := map[string]*dto.Histogram{}
	for _, m := range lag.Metric {
		lanes[labels(m)["lane"]] = m.Histogram
	}
	if len(lanes) != 3 || lanes["network"] == nil || lanes["slow"] == nil || lanes["exec"] == nil {
		t.Fatalf("probed_scheduler_lag_seconds lanes %v, want network, slow and exec", lanes)
	}
	if n := lanes["network"].GetSampleCount(); n < uint64(executed) {
		t.Errorf("probed_scheduler_lag_seconds{lane=network} counts %d dispatches, fewer than the %d executed runs", n, executed)
	}
	if s, n := lanes["network"].GetSampleSum(), lanes["network"].GetSampleCount(); s < 0 || s/float64(n) > 0.5 {
		t.Errorf("probed_scheduler_lag_seconds{lane=network}: sum %v over %d runs, want a small mean lag on an idle agent", s, n)
	}
	if n := lanes["exec"].GetSampleCount(); n != 0 {
		t.Errorf("probed_scheduler_lag_seconds{lane=exec} counts %d, want 0 (no exec probe)", n)
	}
	if n := lanes["slow"].GetSampleCount(); n != 0 {
		t.Errorf("probed_scheduler_lag_seconds{lane=slow} counts %d, want 0 (every target answers at once)", n)
	}
	gauge := func(name string, names ...string) map[string]float64 {
		t.Helper()
		s, desc := series(f, name, names...)
		if s == nil || len(s) == 0 {
			t.Fatalf("%s: absent or wrong labels: %s", name, desc)
		}
		if f[name].GetType() != dto.MetricType_GAUGE {
			t.Errorf("%s is a %v, want a gauge", name, f[name].GetType())
		}
		return s
	}
	if got := gauge("probed_scheduler_entries"); got[""] != float64(entries) {
		t.Errorf("probed_scheduler_entries = %v, want %d probe workers", got, entries)
	}
	backlog := gauge("probed_scheduler_backlog", "lane")
	capacity := gauge("probed_pool_capacity", "lane")
	busy := gauge("probed_pool_busy", "lane")
	if ok, desc := sameSeries(capacity, map[string]float64{"lane=network": 16, "lane=slow": 8, "lane=exec": 4}); !ok {
		t.Errorf("probed_pool_capacity: %s", desc)
	}
	for _, lane := range []string{"lane=network", "lane=slow", "lane=exec"} {
		if v, ok := backlog[lane]; !ok || v < 0 || v > float64(entries) {
			t.Errorf("probed_scheduler_backlog{%s} = %v (present %v), want within [0, %d]", lane, v, ok, entries)
		}
		if v, ok := busy[lane]; !ok || v < 0 || v > capacity[lane] {
			t.Errorf("probed_pool_busy{%s} = %v (present %v), want within [0, %v]", lane, v, ok, capacity[lane])
		}
	}
	if d, _ := series(f, "probed_scheduler_dispatched_total"); d[""] < float64(executed) {
		t.Errorf("probed_scheduler_dispatched_total = %v, want at least the %d executed runs", d, executed)
	}
}

// TestProbeMetricsNoPerPodLabels: with Options.NoPerPodLabels the prober
// metrics have one series per probe type and result, summed over the pods,
// with empty container, pod, namespace and pod_uid; removing a pod's
// manifest keeps them.
func TestProbeMetricsNoPerPodLabels(t *testing.T) {
	tg := newTarget(t)
	dir := t.TempDir()
	metricsManifests(t, dir, tg.port, "")
	ra := startAgent(t, dir, func(o *agent.Options) { o.NoPerPodLabels = true })
	eventually(t, 30*time.Second, "every probe ran three times", func() (bool, string) {
		r := countRuns(tg, "")
		return r["/ok/web/start"] >= 1 && r["/ok/web/live"] >= 3 && r["/fail/web/ready"] >= 3 && r["/ok/other/ready"] >= 3 && r["/ok/other/live"] >= 3, fmt.Sprint(r)
	})
	var before map[string]float64
	quiet(t, ra, tg, "", "/metrics/probes", "aggregated prober_probe_total matches the runs", func(f map[string]*dto.MetricFamily, r runs) (bool, string) {
		total, desc := series(f, "prober_probe_total", proberTotalLabels...)
		if total == nil {
			return false, desc
		}
		want := map[string]float64{
			ptKey("Startup", "successful", "", "", "", ""):   float64(r["/ok/web/start"]),
			ptKey("Liveness", "successful", "", "", "", ""):  float64(r["/ok/web/live"] + r["/ok/other/live"]),
			ptKey("Readiness", "failed", "", "", "", ""):     float64(r["/fail/web/ready"]),
			ptKey("Readiness", "successful", "", "", "", ""): float64(r["/ok/other/ready"]),
		}
		if ok, desc := sameSeries(total, want); !ok {
			return false, desc
		}
		dur, desc := series(f, "prober_probe_duration_seconds", proberDurationLabels...)
		if dur == nil {
			return false, desc
		}
		wantDur := map[string]float64{
			durKey("Startup", "", "", ""):   float64(r["/ok/web/start"]),
			durKey("Liveness", "", "", ""):  float64(r["/ok/web/live"] + r["/ok/other/live"]),
			durKey("Readiness", "", "", ""): float64(r["/ok/other/ready"]),
		}
		if ok, desc := sameSeries(dur, wantDur); !ok {
			return false, "duration: " + desc
		}
		before = total
		return true, ""
	})
	if err := os.Remove(filepath.Join(dir, "web.yaml")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "web removed from /pods", func() (bool, string) {
		body, err := ra.get("/pods")
		if err != nil {
			return false, err.Error()
		}
		return !strings.Contains(string(body), "web-7d4b9c6f5-x2x9z"), "web still listed"
	})
	f, err := scrape(ra, "/metrics/probes")
	if err != nil {
		t.Fatal(err)
	}
	total, _ := series(f, "prober_probe_total", proberTotalLabels...)
	for k, v := range before {
		if total[k] < v {
			t.Errorf("aggregated {%s} went from %v to %v after a pod was removed; the shared series stay", k, v, total[k])
		}
	}
	ra.stop()
}
