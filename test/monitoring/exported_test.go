package monitoring

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/probed/probed/agent"
	"github.com/probed/probed/internal/agenttest"
	"github.com/probed/probed/internal/testlog"
)

// prometheusSeries are series Prometheus itself makes for every target
// (https://prometheus.io/docs/concepts/jobs_instances/), not exported by
// the agent.
var prometheusSeries = map[string]bool{"up": true}

// clusterSeries are the agent's series of cluster mode only, which this
// manifest-mode agent cannot export; the tests named scrape them from a
// cluster-mode agent on a real API server.
var clusterSeries = map[string]string{
	"probed_panic_threshold_held_pods": "agent.TestClusterPanicThresholdTwoAgents",
	"probed_restarts_held_total":       "agent.TestClusterRestartBudgetHoldsEvictions",
}

// targetLabels are the labels Prometheus adds to every scraped series.
var targetLabels = []string{"job", "instance"}

var (
	// exposedSample is the metric name and labels of a sample line of the
	// text format; exposedLabel a label name in it.
	exposedSample = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s`)
	exposedLabel  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"`)
)

// scrape returns the metric names of the samples served at url, each with
// the label names of its samples.
func scrape(client *http.Client, url string) (map[string]map[string]bool, error) {
	resp, err := client.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("GET %s = %d %s", url, resp.StatusCode, body)
	}
	names := map[string]map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		m := exposedSample.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		if names[m[1]] == nil {
			names[m[1]] = map[string]bool{}
		}
		for _, l := range exposedLabel.FindAllStringSubmatch(m[2], -1) {
			names[m[1]][l[1]] = true
		}
	}
	return names, sc.Err()
}

// TestReferencedMetricsExported starts a real agent on a manifest directory
// whose pod has a passing readiness probe, a failing liveness probe (high
// threshold: no restart), an exec probe errored because host exec is off,
// and an http-match plugin probe, all against a real loopback target, and
// checks that every metric name in the dashboard's queries and in the alert
// rules' expressions is served on /metrics or /metrics/probes, with every
// label the queries' selectors match on (besides job and instance).
func TestReferencedMetricsExported(t *testing.T) {
	refs := map[string][]string{} // metric name → where it is used
	type labelUse struct{ metric, label, where string }
	var labelUses []labelUse
	queries := append(dashboardQueries(t, loadDashboard(t)), ruleQueries(loadRules(t))...)
	for _, q := range queries {
		for metric, labels := range matcherLabels(q.expr) {
			for _, l := range labels {
				labelUses = append(labelUses, labelUse{metric, l, q.where})
			}
		}
	}
	if len(labelUses) < 10 {
		t.Errorf("only %d label matchers found in the queries: %v", len(labelUses), labelUses)
	}
	for _, q := range queries {
		names := metricNames(q.expr)
		if len(names) == 0 {
			t.Errorf("%s: no metric name found in %s", q.where, q.expr)
		}
		for _, n := range names {
			refs[n] = append(refs[n], q.where)
		}
	}
	// The lexer must see what the files plainly use, or this test is vacuous.
	for _, n := range []string{"prober_probe_total", "prober_probe_duration_seconds_bucket", "probed_scheduler_lag_seconds_bucket",
		"probed_scheduler_backlog", "probed_pool_busy", "probed_pool_capacity", "probed_plugin_restarts_total",
		"probed_probes_errored_total", "probed_scheduler_skipped_runs_total", "up"} {
		if refs[n] == nil {
			t.Errorf("metric %s not found among the referenced names %v", n, slices.Sorted(maps.Keys(refs)))
		}
	}

	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ready" {
			io.WriteString(w, "ok")
			return
		}
		http.NotFound(w, r)
	}))
	defer target.Close()
	port := target.Listener.Addr().(*net.TCPAddr).Port
	dir := t.TempDir()
	manifest := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: demo
  annotations:
    probed.io/probes: '[{"container":"cache","type":"readiness","periodSeconds":1,"plugin":{"name":"http-match","port":%[1]d,"params":{"path":"/ready","status":"200-299"}}}]'
spec:
  containers:
  - name: app
    image: app
    readinessProbe:
      httpGet: {path: /ready, port: %[1]d}
      periodSeconds: 1
    livenessProbe:
      httpGet: {path: /missing, port: %[1]d}
      periodSeconds: 1
      failureThreshold: 100000
  - name: sidecar
    image: sidecar
    readinessProbe:
      exec: {command: ["true"]}
      periodSeconds: 1
  - name: cache
    image: cache
`, port)
	if err := os.WriteFile(filepath.Join(dir, "web.yaml"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	logs := &testlog.Buffer{}
	a, err := agent.New(agent.Options{
		ManifestDir: dir, Listen: "127.0.0.1:0", PodIP: "127.0.0.1", PluginDir: pluginDir,
		Rescan: time.Second, SyncFrequency: time.Second, PoolSize: 8, ExecPoolSize: 2,
		Logger: slog.New(slog.NewJSONHandler(logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	run := agenttest.Of(t, a)
	defer func() {
		run.Stop()
		if t.Failed() {
			t.Logf("agent log:\n%s", logs.String())
		}
	}()

	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	base := "http://" + a.Addr().String()
	var missing []string
	exported := map[string]map[string]bool{}
	// Series such as prober_probe_duration_seconds and the errored counter
	// appear after the first runs (periods of 1 s).
	for deadline := time.Now().Add(30 * time.Second); ; {
		exported = map[string]map[string]bool{}
		for _, path := range []string{"/metrics", "/metrics/probes"} {
			names, err := scrape(client, base+path)
			if err != nil {
				t.Fatal(err)
			}
			maps.Copy(exported, names)
		}
		missing = missing[:0]
		for n := range refs {
			if exported[n] == nil && !prometheusSeries[n] && clusterSeries[n] == "" {
				missing = append(missing, n)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	slices.Sort(missing)
	for _, n := range missing {
		t.Errorf("metric %s is referenced (%s) but the agent does not export it", n, strings.Join(refs[n], "; "))
	}
	for _, u := range labelUses {
		if prometheusSeries[u.metric] || exported[u.metric] == nil || slices.Contains(targetLabels, u.label) {
			continue
		}
		if !exported[u.metric][u.label] {
			t.Errorf("%s: selector of %s matches on label %q, which the agent's %s series do not have (%v)",
				u.where, u.metric, u.label, u.metric, slices.Sorted(maps.Keys(exported[u.metric])))
		}
	}
}
