package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/probed/probed/agent/api"
	"github.com/probed/probed/agent/events"
	"github.com/probed/probed/agent/history"
	"github.com/probed/probed/agent/source"
	"github.com/probed/probed/agent/statuspage"
	"github.com/probed/probed/agent/store"
	"github.com/probed/probed/agent/verdicts"
	"github.com/probed/probed/internal/version"
	"github.com/probed/probed/manager"
	"github.com/probed/probed/manager/podprobes"
	"github.com/probed/probed/manager/results"
)

// IgnoreCurrent: ants starts its package-level default pool at init.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func get(t *testing.T, srv *httptest.Server, path string) (int, http.Header, []byte) {
	t.Helper()
	resp, err := srv.Client().Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	// The status page's line-break hints (<wbr> after a path's
	// separators) are not text: without them a value, or a secret, is
	// matched whole. JSON never holds one (encoding/json escapes "<").
	return resp.StatusCode, resp.Header, bytes.ReplaceAll(body, []byte("<wbr>"), nil)
}

func secretPod() *v1.Pod {
	probe := &v1.Probe{
		ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{
			Path: "/healthz", Port: intstr.FromInt32(8080), Scheme: v1.URISchemeHTTP,
			HTTPHeaders: []v1.HTTPHeader{
				{Name: "Authorization", Value: "Bearer SECRET-TOKEN-1"},
				{Name: "host", Value: "app.example.test"},
				{Name: "X-Api-Key", Value: "SECRET-KEY-2"},
				{Name: "Accept", Value: "application/json"},
			},
		}},
		TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3,
	}
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns1", UID: "uid-web",
			Annotations: map[string]string{
				"team": "a",
				// kubectl keeps the whole applied manifest here, env values
				// and headers included.
				"kubectl.kubernetes.io/last-applied-configuration": `{"spec":{"containers":[{"env":[{"name":"DB_PASSWORD","value":"SECRET-PASSWORD-3"}]}]}}`,
			}},
		Spec: v1.PodSpec{
			RestartPolicy: v1.RestartPolicyAlways,
			InitContainers: []v1.Container{{Name: "side", Image: "side", RestartPolicy: func() *v1.ContainerRestartPolicy {
				p := v1.ContainerRestartPolicyAlways
				return &p
			}(), Env: []v1.EnvVar{{Name: "SIDE_SECRET", Value: "SECRET-SIDE-4"}}}},
			Containers: []v1.Container{{
				Name: "app", Image: "app",
				Env: []v1.EnvVar{
					{Name: "DB_PASSWORD", Value: "SECRET-PASSWORD-3"},
					{Name: "FROM_SECRET", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{
						LocalObjectReference: v1.LocalObjectReference{Name: "db"}, Key: "password"}}},
					{Name: "EMPTY"},
				},
				ReadinessProbe: probe,
				LivenessProbe:  probe.DeepCopy(),
			}},
		},
	}
}

// TestPods_PodListWithStatusesRedacted: /pods is a v1.PodList (kind
// PodList, apiVersion v1) of the pods with their current statuses; env
// values and the values of probe headers that may carry credentials are
// redacted (Host and Accept are kept), as is kubectl's last-applied copy of
// the manifest; the store itself is not changed.
func TestPods_PodListWithStatusesRedacted(t *testing.T) {
	st := store.New(store.Options{Logger: quiet()})
	st.Put(secretPod())
	st.Put(&v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "aaa", Namespace: "ns1", UID: "uid-aaa"},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "c"}}}})
	srv := httptest.NewServer(api.New(api.Options{Pods: st}))
	defer srv.Close()

	code, hdr, body := get(t, srv, "/pods")
	if code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "application/json") {
		t.Fatalf("GET /pods = %d %s", code, hdr.Get("Content-Type"))
	}
	for _, secret := range []string{"SECRET-TOKEN-1", "SECRET-KEY-2", "SECRET-PASSWORD-3", "SECRET-SIDE-4"} {
		if strings.Contains(string(body), secret) {
			t.Errorf("/pods shows %s", secret)
		}
	}
	var list v1.PodList
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatal(err)
	}
	if list.Kind != "PodList" || list.APIVersion != "v1" {
		t.Errorf("kind/apiVersion = %q/%q", list.Kind, list.APIVersion)
	}
	if len(list.Items) != 2 || list.Items[0].Name != "aaa" || list.Items[1].Name != "web" {
		t.Fatalf("items = %d, want aaa then web", len(list.Items))
	}
	web := list.Items[1]
	if web.Status.Phase != v1.PodRunning || web.Status.PodIP != "127.0.0.1" || len(web.Status.ContainerStatuses) != 1 ||
		web.Status.ContainerStatuses[0].ContainerID == "" || len(web.Status.Conditions) == 0 {
		t.Errorf("status missing: %+v", web.Status)
	}
	env := web.Spec.Containers[0].Env
	if env[0].Value != api.Redacted || env[1].ValueFrom == nil || env[1].ValueFrom.SecretKeyRef.Name != "db" || env[2].Value != "" {
		t.Errorf("env = %+v", env)
	}
	if v := web.Spec.InitContainers[0].Env[0].Value; v != api.Redacted {
		t.Errorf("sidecar env = %q", v)
	}
	for _, p := range []*v1.Probe{web.Spec.Containers[0].ReadinessProbe, web.Spec.Containers[0].LivenessProbe} {
		want := []string{api.Redacted, "app.example.test", api.Redacted, "application/json"}
		for i, h := range p.HTTPGet.HTTPHeaders {
			if h.Value != want[i] {
				t.Errorf("header %s = %q, want %q", h.Name, h.Value, want[i])
			}
		}
	}
	if web.Annotations["team"] != "a" {
		t.Errorf("annotations = %v", web.Annotations)
	}
	// The store keeps the real values.
	for _, p := range st.Pods() {
		if p.Name == "web" && p.Spec.Containers[0].Env[0].Value != "SECRET-PASSWORD-3" {
			t.Error("redaction changed the store")
		}
	}
	if _, _, again := get(t, srv, "/pods"); string(again) != string(body) {
		t.Error("/pods differs on a second request")
	}
}

// The whole list as writeJSON encodes a v1.PodList: /pods, written one pod
// at a time, is byte for byte the same (the format clients parse).
func TestPods_StreamedAsTheWholeListEncodes(t *testing.T) {
	for _, n := range []int{0, 1, 3} {
		st := store.New(store.Options{Logger: quiet()})
		for i := range n {
			p := secretPod()
			p.Name, p.UID = "web-"+strconv.Itoa(i), types.UID("uid-"+strconv.Itoa(i))
			st.Put(p)
		}
		srv := httptest.NewServer(api.New(api.Options{Pods: st}))
		_, _, body := get(t, srv, "/pods")
		srv.Close()
		var list v1.PodList
		if err := json.Unmarshal(body, &list); err != nil {
			t.Fatal(err)
		}
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetIndent("", "  ")
		if list.Items == nil {
			list.Items = []v1.Pod{}
		}
		if err := enc.Encode(list); err != nil {
			t.Fatal(err)
		}
		if string(body) != want.String() {
			t.Errorf("%d pods: /pods is\n%s\nwant\n%s", n, body, want.String())
		}
	}
}

// countingLister counts what a request copies, and can hold its PodByName
// until released.
type countingLister struct {
	*store.Store
	mu            sync.Mutex
	names, copies int
	hold          chan struct{} // nil: never held
	held          chan struct{} // a copy is held
}

func (l *countingLister) PodNames() []types.NamespacedName {
	l.mu.Lock()
	l.names++
	l.mu.Unlock()
	return l.Store.PodNames()
}

func (l *countingLister) PodByName(ns, name string) (*v1.Pod, bool) {
	l.mu.Lock()
	l.copies++
	hold := l.hold
	l.mu.Unlock()
	if hold != nil {
		l.held <- struct{}{}
		<-hold
	}
	return l.Store.PodByName(ns, name)
}

// GET /pods/{namespace}/{name} copies that one pod, never the list; GET
// /pods copies one pod at a time (each is redacted and written before the
// next is copied).
func TestPods_OnePodIsLookedUp(t *testing.T) {
	st := store.New(store.Options{Logger: quiet()})
	for i := range 50 {
		p := secretPod()
		p.Name, p.UID = "web-"+strconv.Itoa(i), types.UID("uid-"+strconv.Itoa(i))
		st.Put(p)
	}
	l := &countingLister{Store: st}
	srv := httptest.NewServer(api.New(api.Options{Pods: l}))
	defer srv.Close()
	code, _, body := get(t, srv, "/pods/ns1/web-7")
	if code != 200 || !strings.Contains(string(body), `"name": "web-7"`) || strings.Contains(string(body), "SECRET-PASSWORD-3") {
		t.Fatalf("GET /pods/ns1/web-7 = %d %s", code, body)
	}
	if code, _, _ := get(t, srv, "/pods/ns1/nope"); code != 404 {
		t.Fatalf("an unknown pod: %d", code)
	}
	if l.names != 0 || l.copies != 2 {
		t.Fatalf("two lookups listed names %d times and copied %d pods, want 0 and 2", l.names, l.copies)
	}
}

// At most MaxPodLists GET /pods are written at once: one more waits
// PodListWait for its turn and is then answered 503 with Retry-After,
// while /healthz and one pod's lookup are answered throughout.
func TestPods_ListsAtOnceAreBounded(t *testing.T) {
	st := store.New(store.Options{Logger: quiet()})
	st.Put(secretPod())
	l := &countingLister{Store: st, hold: make(chan struct{}), held: make(chan struct{}, 1)}
	srv := httptest.NewServer(api.New(api.Options{Pods: l, MaxPodLists: 1, PodListWait: time.Nanosecond}))
	defer srv.Close()
	first := make(chan int)
	go func() {
		resp, err := srv.Client().Get(srv.URL + "/pods")
		if err != nil {
			first <- 0
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	<-l.held // the first list holds its turn, copying its pod
	code, hdr, _ := get(t, srv, "/pods")
	if code != http.StatusServiceUnavailable || hdr.Get("Retry-After") != "1" {
		t.Fatalf("a second /pods while one is written = %d (Retry-After %q), want 503 and Retry-After 1", code, hdr.Get("Retry-After"))
	}
	if code, _, _ := get(t, srv, "/healthz"); code != 200 {
		t.Fatalf("/healthz = %d while a list is written", code)
	}
	close(l.hold)
	if code := <-first; code != 200 {
		t.Fatalf("the first /pods = %d", code)
	}
	l.mu.Lock()
	l.hold = nil
	l.mu.Unlock()
	if code, _, _ := get(t, srv, "/pods"); code != 200 {
		t.Fatalf("/pods after the first ended = %d", code)
	}
}

// TestPods_EmptyList: no pods → an empty items list, not null.
func TestPods_EmptyList(t *testing.T) {
	srv := httptest.NewServer(api.New(api.Options{Pods: store.New(store.Options{Logger: quiet()})}))
	defer srv.Close()
	_, _, body := get(t, srv, "/pods")
	var raw map[string]any
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatal(err)
	}
	if items, ok := raw["items"].([]any); !ok || len(items) != 0 {
		t.Errorf("items = %v, want []", raw["items"])
	}
}

// TestHealthz: ok by default; 503 with the reason when Healthy fails; only GET.
func TestHealthz(t *testing.T) {
	var unhealthy error
	srv := httptest.NewServer(api.New(api.Options{Pods: store.New(store.Options{Logger: quiet()}),
		Healthy: func() error { return unhealthy }}))
	defer srv.Close()
	if code, _, body := get(t, srv, "/healthz"); code != 200 || string(body) != "ok" {
		t.Errorf("/healthz = %d %q", code, body)
	}
	unhealthy = errors.New("scheduler stalled")
	if code, _, body := get(t, srv, "/healthz"); code != http.StatusServiceUnavailable || !strings.Contains(string(body), "scheduler stalled") {
		t.Errorf("/healthz = %d %q, want 503 with the reason", code, body)
	}
	resp, err := srv.Client().Post(srv.URL+"/healthz", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /healthz = %d, want 405", resp.StatusCode)
	}
}

// TestHealthzVerboseAndVersion: /healthz?verbose adds the build's line
// after the verdict, with the verdict's status code; /version serves the
// build as version.Info JSON.
func TestHealthzVerboseAndVersion(t *testing.T) {
	build := version.Info{Version: "v1.2.3", Commit: "0123456789abcdef", GoVersion: "go1.26.0", Platform: "linux/amd64"}
	var unhealthy error
	srv := httptest.NewServer(api.New(api.Options{Pods: store.New(store.Options{Logger: quiet()}),
		Healthy: func() error { return unhealthy }, Version: build}))
	defer srv.Close()
	if code, _, body := get(t, srv, "/healthz?verbose"); code != 200 || string(body) != "ok\nprobed v1.2.3 (commit 0123456789ab; go1.26.0 linux/amd64)\n" {
		t.Errorf("/healthz?verbose = %d %q", code, body)
	}
	unhealthy = errors.New("scheduler stalled")
	if code, _, body := get(t, srv, "/healthz?verbose"); code != http.StatusServiceUnavailable ||
		string(body) != "scheduler stalled\nprobed v1.2.3 (commit 0123456789ab; go1.26.0 linux/amd64)\n" {
		t.Errorf("/healthz?verbose = %d %q", code, body)
	}
	code, _, body := get(t, srv, "/version")
	var got version.Info
	if err := json.Unmarshal(body, &got); code != 200 || err != nil || got != build {
		t.Errorf("/version = %d %s (%v), want %+v", code, body, err, build)
	}
}

// TestX1_X3_ProbeMetricsEndpoint: /metrics/probes serves the kubelet's
// prober_probe_total with exactly its labels (probe_type, result,
// container, pod, namespace, pod_uid) and prober_probe_duration_seconds
// (no result, no pod_uid), counting real probe runs; /metrics serves the
// runtime's own registry; /debug/scheduler the manager's figures.
func TestX1_X3_ProbeMetricsEndpoint(t *testing.T) {
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer target.Close()
	_, portStr, _ := net.SplitHostPort(target.Listener.Addr().String())
	port, _ := strconv.Atoi(portStr)

	st := store.New(store.Options{Logger: quiet()})
	probeReg, reg := prometheus.NewRegistry(), prometheus.NewRegistry()
	live, ready, start := results.NewManager(), results.NewManager(), results.NewManager()
	mgr, err := manager.New(manager.Options{Status: st, Liveness: live, Readiness: ready, Startup: start,
		MetricsRegisterer: probeReg, RuntimeMetricsRegisterer: reg, Logger: quiet(), PoolSize: 8, ExecPoolSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	st.SetProber(mgr)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	fanout := verdicts.New(live, ready, start, st)
	go func() { defer close(done); fanout.Run(ctx) }()
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		if err := mgr.Close(cctx); err != nil {
			t.Error(err)
		}
		cancel()
		<-done
	}()
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-7d4b9c6f5-x2x9z", Namespace: "ns1", UID: "uid-metrics"},
		Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyAlways, Containers: []v1.Container{{Name: "app", Image: "app",
			ReadinessProbe: &v1.Probe{
				ProbeHandler:   v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/r", Port: intstr.FromInt32(int32(port)), Scheme: v1.URISchemeHTTP}},
				TimeoutSeconds: 1, PeriodSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3,
			}}}},
	}
	mgr.AddPod(context.Background(), pod)
	st.Put(pod) // triggers the readiness probe now (M7c)

	srv := httptest.NewServer(api.New(api.Options{Pods: st, ProbeMetrics: probeReg, Metrics: reg,
		Debug: func() any { s, _ := manager.StatsOf(mgr); return s }}))
	defer srv.Close()

	var total *dto.MetricFamily
	var families map[string]*dto.MetricFamily
	deadline := time.Now().Add(5 * time.Second)
	for total == nil {
		code, _, body := get(t, srv, "/metrics/probes")
		if code != 200 {
			t.Fatalf("/metrics/probes = %d", code)
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		families, err = parser.TextToMetricFamilies(strings.NewReader(string(body)))
		if err != nil {
			t.Fatalf("parsing /metrics/probes: %v\n%s", err, body)
		}
		total = families["prober_probe_total"]
		if total == nil && time.Now().After(deadline) {
			t.Fatalf("no prober_probe_total in\n%s", body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if total.GetType() != dto.MetricType_COUNTER || len(total.Metric) != 1 {
		t.Fatalf("prober_probe_total = %v", total)
	}
	want := map[string]string{"probe_type": "Readiness", "result": "successful", "container": "app",
		"pod": "web-7d4b9c6f5-x2x9z", "namespace": "ns1", "pod_uid": "uid-metrics"}
	got := map[string]string{}
	for _, l := range total.Metric[0].Label {
		got[l.GetName()] = l.GetValue()
	}
	if len(got) != len(want) {
		t.Errorf("labels = %v, want exactly %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("label %s = %q, want %q", k, got[k], v)
		}
	}
	if v := total.Metric[0].GetCounter().GetValue(); v < 1 {
		t.Errorf("counter = %v", v)
	}
	dur := families["prober_probe_duration_seconds"]
	if dur == nil || dur.GetType() != dto.MetricType_HISTOGRAM || len(dur.Metric) != 1 {
		t.Fatalf("prober_probe_duration_seconds = %v", dur)
	}
	got = map[string]string{}
	for _, l := range dur.Metric[0].Label {
		got[l.GetName()] = l.GetValue()
	}
	if len(got) != 4 || got["probe_type"] != "Readiness" || got["container"] != "app" || got["pod"] != "web-7d4b9c6f5-x2x9z" || got["namespace"] != "ns1" {
		t.Errorf("duration labels = %v", got)
	}
	for name := range families {
		if !strings.HasPrefix(name, "prober_") && !strings.HasPrefix(name, "process_") {
			t.Errorf("/metrics/probes serves %s (X3: its own registry)", name)
		}
	}
	if code, _, body := get(t, srv, "/metrics"); code != 200 || strings.Contains(string(body), "prober_probe_total") {
		t.Errorf("/metrics = %d, serves prober_probe_total: %v", code, strings.Contains(string(body), "prober_probe_total"))
	}

	code, hdr, body := get(t, srv, "/debug/scheduler")
	var stats manager.Stats
	if err := json.Unmarshal(body, &stats); code != 200 || err != nil || !strings.HasPrefix(hdr.Get("Content-Type"), "application/json") {
		t.Fatalf("/debug/scheduler = %d %v %s", code, err, body)
	}
	if stats.Entries != 1 || stats.Dispatched == 0 || stats.Started.IsZero() {
		t.Errorf("stats = %+v, want 1 entry and dispatched runs", stats)
	}
}

// TestK4_EventsJSON: /events lists the recorded events oldest first as
// JSON, repeated identical events folded with a count.
func TestK4_EventsJSON(t *testing.T) {
	rec := events.New(10, quiet(), nil)
	ref := &v1.ObjectReference{Kind: "Pod", Namespace: "ns1", Name: "web", UID: "uid-web", FieldPath: "spec.containers{app}"}
	rec.Eventf(ref, v1.EventTypeWarning, "Unhealthy", "Readiness probe failed: %s", "HTTP probe failed with statuscode: 500")
	rec.Eventf(ref, v1.EventTypeWarning, "Unhealthy", "Readiness probe failed: %s", "HTTP probe failed with statuscode: 500")
	rec.Eventf(ref, v1.EventTypeNormal, "Killing", "Container app failed liveness probe, will be restarted")
	srv := httptest.NewServer(api.New(api.Options{Pods: store.New(store.Options{Logger: quiet()}), Events: rec}))
	defer srv.Close()
	code, hdr, body := get(t, srv, "/events")
	if code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "application/json") {
		t.Fatalf("/events = %d", code)
	}
	var out struct {
		Events []events.Event `json:"events"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Events) != 2 {
		t.Fatalf("events = %+v, want 2", out.Events)
	}
	e0, e1 := out.Events[0], out.Events[1]
	if e0.Type != "Warning" || e0.Reason != "Unhealthy" || e0.Message != "Readiness probe failed: HTTP probe failed with statuscode: 500" ||
		e0.Count != 2 || e0.Namespace != "ns1" || e0.Pod != "web" || e0.PodUID != "uid-web" || e0.FieldPath != "spec.containers{app}" {
		t.Errorf("event 0 = %+v", e0)
	}
	if e1.Type != "Normal" || e1.Reason != "Killing" || e1.Count != 1 {
		t.Errorf("event 1 = %+v", e1)
	}
	// Without a recorder or a debug function the endpoints do not exist.
	bare := httptest.NewServer(api.New(api.Options{Pods: store.New(store.Options{Logger: quiet()})}))
	defer bare.Close()
	for _, p := range []string{"/events", "/debug/scheduler", "/metrics/probes", "/metrics"} {
		if code, _, _ := get(t, bare, p); code != http.StatusNotFound {
			t.Errorf("%s without its source = %d, want 404", p, code)
		}
	}
}

// Plugin parameters that look like credentials (a redis password, a token)
// are hidden in /pods; the rest of the probed.io/probes annotation stays,
// and an annotation that does not parse is hidden whole.
func TestPods_PluginSecretParamsRedacted(t *testing.T) {
	st := store.New(store.Options{Logger: quiet()})
	annotation := `[{"container":"c","type":"liveness","plugin":{"name":"redis","port":6379,"params":{"password":"hunter2","apiToken":"t0k","tls":"true"}}}]`
	st.Put(&v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "cache", Namespace: "ns", UID: "uid-cache",
		Annotations: map[string]string{"probed.io/probes": annotation}},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "c"}}}})
	st.Put(&v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "broken", Namespace: "ns", UID: "uid-broken",
		Annotations: map[string]string{"probed.io/probes": `[{"plugin": {"params": {"password": "s3cr3t"`}},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "c"}}}})
	srv := httptest.NewServer(api.New(api.Options{Pods: st}))
	defer srv.Close()
	_, _, body := get(t, srv, "/pods")
	for _, secret := range []string{"hunter2", "t0k", "s3cr3t"} {
		if strings.Contains(string(body), secret) {
			t.Fatalf("/pods shows %q", secret)
		}
	}
	var list v1.PodList
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		got := p.Annotations["probed.io/probes"]
		switch p.Name {
		case "cache":
			if !strings.Contains(got, `"tls":"true"`) || !strings.Contains(got, `"name":"redis"`) || !strings.Contains(got, api.Redacted) {
				t.Fatalf("cache annotation = %s", got)
			}
		case "broken":
			if got != api.Redacted {
				t.Fatalf("broken annotation = %q, want it hidden whole", got)
			}
		}
	}
	if p, _ := st.PodByName("ns", "cache"); p.Annotations["probed.io/probes"] != annotation {
		t.Fatal("the stored pod was modified")
	}
}

// /pods applies the one redaction rule (runtime/redact) to
// what the pod spec says in free text: query values and credentials in
// probe and hook paths, credentials and env values in commands and
// arguments, and the path, header and other values of plugin parameters
// (not only secret-named ones).
func TestPods_SecretsInPathsCommandsAndParamsRedacted(t *testing.T) {
	get1 := &v1.HTTPGetAction{Path: "/x?token=API-TOKEN-1&access_token=API-TOKEN-2", Port: intstr.FromInt32(8080)}
	annotation := `[{"container":"app","type":"readiness","plugin":{"name":"http-match","params":{` +
		`"path":"/ready?token=API-TOKEN-8","header":"Authorization: Bearer API-BEARER-9","body":"ok","echo":"API-ENV-7"}}}]`
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hostile", Namespace: "ns", UID: "uid-hostile",
			Annotations: map[string]string{"probed.io/probes": annotation}},
		Spec: v1.PodSpec{Containers: []v1.Container{{
			Name: "app", Image: "app",
			Command: []string{"app", "--db-url=postgres://app:API-PASS-6@db/app"},
			Args:    []string{"--api-key", "API-KEY-10", "--verbose"},
			Env:     []v1.EnvVar{{Name: "API_TOKEN", Value: "API-ENV-7"}},
			ReadinessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: get1},
				TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3},
			LivenessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{
				"sh", "-c", "curl -H 'Authorization: Bearer API-BEARER-3' http://u:API-PASS-4@127.0.0.1/ && echo API-ENV-7"}}},
				TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3},
			Lifecycle: &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"stop", "--password", "API-PASS-5"}}}},
		}}},
	}
	st := store.New(store.Options{Logger: quiet()})
	st.Put(pod)
	srv := httptest.NewServer(api.New(api.Options{Pods: st}))
	defer srv.Close()
	_, _, body := get(t, srv, "/pods")
	for _, secret := range []string{"API-TOKEN-1", "API-TOKEN-2", "API-BEARER-3", "API-PASS-4", "API-PASS-5", "API-PASS-6",
		"API-ENV-7", "API-TOKEN-8", "API-BEARER-9", "API-KEY-10"} {
		if strings.Contains(string(body), secret) {
			t.Errorf("/pods shows %s", secret)
		}
	}
	var list v1.PodList
	if err := json.Unmarshal(body, &list); err != nil || len(list.Items) != 1 {
		t.Fatalf("%v, %d items", err, len(list.Items))
	}
	c := list.Items[0].Spec.Containers[0]
	for got, want := range map[string]string{
		c.ReadinessProbe.HTTPGet.Path:                       "/x?token=REDACTED&access_token=REDACTED",
		strings.Join(c.LivenessProbe.Exec.Command, " "):     "sh -c curl -H 'Authorization: REDACTED' http://u:REDACTED@127.0.0.1/ && echo REDACTED",
		strings.Join(c.Command, " "):                        "app --db-url=postgres://app:REDACTED@db/app",
		strings.Join(c.Args, " "):                           "--api-key REDACTED --verbose",
		strings.Join(c.Lifecycle.PreStop.Exec.Command, " "): "stop --password REDACTED",
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
	ann := list.Items[0].Annotations["probed.io/probes"]
	for _, want := range []string{`"path":"/ready?token=REDACTED"`, `"header":"Authorization: REDACTED"`, `"body":"ok"`, `"echo":"REDACTED"`} {
		if !strings.Contains(ann, want) {
			t.Errorf("annotation %s lacks %s", ann, want)
		}
	}
}

// TestManifests_ServesTheReport: GET /manifests serves source.Report as the
// documented JSON (the cluster-mode report: empty lists, not null); without
// Options.Manifests there is no such endpoint.
func TestManifests_ServesTheReport(t *testing.T) {
	since := time.Date(2026, 12, 1, 23, 50, 0, 0, time.UTC)
	rep := source.NewReport(source.SourceDirectory, "/etc/probed/manifests")
	rep.Files = 3
	rep.Rejected = append(rep.Rejected, source.Rejection{File: "/etc/probed/manifests/web.yaml", Document: 2, Line: 14, Pod: "default/web",
		Error: "web.yaml: document 2: pod default/web: bad", Since: since, Stale: true})
	rep.Skipped = append(rep.Skipped, source.SkippedDocument{File: "/etc/probed/manifests/secret.yaml", Document: 1, Kind: "Secret", Reason: "kind Secret holds no pod template"})
	for _, tc := range []struct {
		report source.Report
		want   string
	}{
		{rep, `{"kind":"ManifestReport","source":"directory","path":"/etc/probed/manifests","files":3,` +
			`"rejected":[{"file":"/etc/probed/manifests/web.yaml","document":2,"line":14,"pod":"default/web","error":"web.yaml: document 2: pod default/web: bad","since":"2026-12-01T23:50:00Z","stale":true}],` +
			`"skipped":[{"file":"/etc/probed/manifests/secret.yaml","document":1,"kind":"Secret","reason":"kind Secret holds no pod template"}]}`},
		{source.NewReport(source.SourceCluster, ""), `{"kind":"ManifestReport","source":"cluster","path":"","files":0,"rejected":[],"skipped":[]}`},
	} {
		srv := httptest.NewServer(api.New(api.Options{Pods: store.New(store.Options{Logger: quiet()}), Manifests: func() source.Report { return tc.report }}))
		code, hdr, body := get(t, srv, "/manifests")
		var compact bytes.Buffer
		if err := json.Compact(&compact, body); err != nil {
			t.Fatal(err)
		}
		if code != 200 || hdr.Get("Content-Type") != "application/json" || compact.String() != tc.want {
			t.Errorf("GET /manifests = %d %s\n%s\nwant %s", code, hdr.Get("Content-Type"), compact.String(), tc.want)
		}
		srv.Close()
	}
	srv := httptest.NewServer(api.New(api.Options{Pods: store.New(store.Options{Logger: quiet()})}))
	defer srv.Close()
	if code, _, _ := get(t, srv, "/manifests"); code != http.StatusNotFound {
		t.Errorf("without Manifests: %d, want 404", code)
	}
}

// TestPage_ShowsThePodsRedactedAsPodsDoes: the status page at / and the
// pod's page read the pods /pods serves, redacted alike (a probe path's
// query value, kubectl's last-applied copy, env values never reach the
// HTML); GET /pods/{namespace}/{name} is the one pod, redacted, with kind
// Pod, and 404 for an unknown pod.
func TestPage_ShowsThePodsRedactedAsPodsDoes(t *testing.T) {
	st := store.New(store.Options{Logger: quiet()})
	p := secretPod()
	p.Spec.Containers[0].ReadinessProbe.HTTPGet.Path = "/healthz?token=SECRET-QUERY-5"
	st.Put(p)
	srv := servePage(t, st, "ns1", "web")
	assertHidden(t, srv, []string{"/", "/pod/ns1/web", "/pods/ns1/web"},
		"SECRET-TOKEN-1", "SECRET-KEY-2", "SECRET-PASSWORD-3", "SECRET-SIDE-4", "SECRET-QUERY-5")
	_, _, body := get(t, srv, "/")
	if !strings.Contains(string(body), "GET http://127.0.0.1:8080/healthz?token=") || !strings.Contains(string(body), `data-pod="ns1/web"`) {
		t.Errorf("the page misses the pod's redacted readiness target:\n%s", body)
	}
	_, _, body = get(t, srv, "/pods/ns1/web")
	var pod v1.Pod
	if err := json.Unmarshal(body, &pod); err != nil || pod.Kind != "Pod" || pod.APIVersion != "v1" || pod.Name != "web" ||
		pod.Spec.Containers[0].Env[0].Value != api.Redacted {
		t.Errorf("GET /pods/ns1/web = %s (%v)", body, err)
	}
	if code, _, _ := get(t, srv, "/pods/ns1/nope"); code != 404 {
		t.Errorf("unknown pod = %d", code)
	}
}

// The probes of the probed.io/probes annotation are redacted
// by the rule of the spec's probes, wherever a probe is shown: the httpGet
// query values and header values (other than Host, Accept, User-Agent,
// Content-Type), the exec command's credentials, and every other string of
// an element through the free-text rule; in /pods, /pods/{namespace}/{name},
// the status page and the pod's page (its annotations table and the probe's
// target). What stays shows the probe as written.
func TestPods_AnnotationProbesRedactedAsSpecProbes(t *testing.T) {
	annotation := `[{"container":"app","type":"readiness","periodSeconds":1,"httpGet":{"path":"/ready?token=ANN-TOKEN-1&page=2","port":8080,` +
		`"httpHeaders":[{"name":"Authorization","value":"Bearer ANN-BEARER-2"},{"name":"X-Tenant","value":"ANN-HEADER-3"},{"name":"accept","value":"text/plain"}]}},` +
		`{"container":"app","type":"liveness","exec":{"command":["check","--password","ANN-PASS-4","--url=http://u:ANN-PASS-5@db/"]}},` +
		`{"container":"app","type":"startup","grpc":{"port":9090,"service":"health?key=ANN-KEY-6"}}]`
	st := store.New(store.Options{Logger: quiet()})
	st.Put(&v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "uid-web",
		Annotations: map[string]string{"probed.io/probes": annotation}},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app", Image: "app"}}}})
	srv := servePage(t, st, "ns", "web")
	assertHidden(t, srv, []string{"/pods", "/pods/ns/web", "/", "/pod/ns/web"},
		"ANN-TOKEN-1", "ANN-BEARER-2", "ANN-HEADER-3", "ANN-PASS-4", "ANN-PASS-5", "ANN-KEY-6")
	_, _, body := get(t, srv, "/pods/ns/web")
	var pod v1.Pod
	if err := json.Unmarshal(body, &pod); err != nil {
		t.Fatal(err)
	}
	ann := pod.Annotations["probed.io/probes"]
	for _, want := range []string{`"path":"/ready?token=REDACTED\u0026page=REDACTED"`, `"value":"REDACTED"`, `"value":"text/plain"`,
		`"command":["check","--password","REDACTED","--url=http://u:REDACTED@db/"]`, `"port":8080`, `"periodSeconds":1`} {
		if !strings.Contains(ann, want) {
			t.Errorf("annotation %s lacks %s", ann, want)
		}
	}
	// The page shows the annotation probe's target, redacted.
	_, _, page := get(t, srv, "/")
	if !strings.Contains(string(page), "GET http://127.0.0.1:8080/ready?token=REDACTED&amp;page=REDACTED") {
		t.Errorf("the page misses the annotation probe's redacted target:\n%s", page)
	}
	if p, _ := st.PodByName("ns", "web"); p.Annotations["probed.io/probes"] != annotation {
		t.Fatal("the stored pod was modified")
	}
}

// servePage serves the API of st with the status page and an empty
// history for the pod ns/name; closed at the test's end. The page gets the
// pods' probes as the agent works them out, from the pods as stored, not
// redacted (the reconciler's view, manifest mode's policy): it must hide
// what the API hides by itself.
func servePage(t *testing.T, st *store.Store, ns, name string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(api.New(api.Options{Pods: st,
		History: func(n, m string) (history.PodHistory, bool) {
			return history.PodHistory{Namespace: n, Name: m}, n == ns && m == name
		},
		Page: &statuspage.Options{Declared: func(p *v1.Pod) (*podprobes.View, bool) {
			stored, ok := st.PodByName(p.Namespace, p.Name)
			return podprobes.Of(stored, podprobes.Policy{}), ok
		}}}))
	t.Cleanup(srv.Close)
	return srv
}

// assertHidden checks that each of paths answers 200 without any of secrets.
func assertHidden(t *testing.T, srv *httptest.Server, paths []string, secrets ...string) {
	t.Helper()
	for _, path := range paths {
		code, _, body := get(t, srv, path)
		if code != 200 {
			t.Fatalf("GET %s = %d", path, code)
		}
		for _, secret := range secrets {
			if strings.Contains(string(body), secret) {
				t.Errorf("GET %s shows %s", path, secret)
			}
		}
	}
}
