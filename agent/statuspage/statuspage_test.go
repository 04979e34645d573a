package statuspage_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/net/html"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/probed/probed/agent/events"
	"github.com/probed/probed/agent/history"
	"github.com/probed/probed/agent/source"
	"github.com/probed/probed/agent/statuspage"
	"github.com/probed/probed/manager"
	"github.com/probed/probed/manager/podprobes"
	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/pluginhost"
)

// TestMain stops the shared browser (browser_test.go) before goleak looks
// for goroutines the tests left behind.
func TestMain(m *testing.M) {
	ignore := goleak.IgnoreCurrent()
	code := m.Run()
	stopBrowser()
	if code == 0 {
		if err := goleak.Find(ignore); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// hostile is markup an attacker could put in a pod name, an annotation, a
// probe's output or a plugin's error: it must reach the page as text.
const hostile = `<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">"'&`

var now = time.Date(2026, 12, 1, 23, 50, 0, 0, time.UTC)

// fixture is a real value of the page's sources: pods, their histories,
// events, scheduler figures, plugins, the cluster and rejected manifests.
type fixture struct {
	pods      []*v1.Pod
	hist      map[string][]history.Probe
	events    []events.Event
	plugins   []pluginhost.PluginStatus
	cluster   *statuspage.Cluster
	rejected  []source.Rejection
	specProbe bool
}

func (f *fixture) options() statuspage.Options {
	opts := statuspage.Options{
		Pods: func(yield func(*v1.Pod) bool) {
			for _, p := range f.pods {
				if !yield(p.DeepCopy()) {
					return
				}
			}
		},
		Probes: func(ns, name string) (history.PodHistory, bool) {
			for _, p := range f.pods {
				if p.Namespace == ns && p.Name == name {
					return history.PodHistory{Namespace: ns, Name: name, UID: string(p.UID), Probes: f.hist[ns+"/"+name],
						Refused: history.RefusedOf(f.view(p))}, true
				}
			}
			return history.PodHistory{}, false
		},
		Events: func() []events.Event { return f.events },
		Scheduler: func() (manager.Stats, bool) {
			return manager.Stats{Entries: 7, Running: 1, Backlog: map[string]int{"network": 2, "slow": 0, "exec": 0},
				Pools: map[string]runtime.PoolStats{"network": {Capacity: 256, Busy: 3}, "slow": {Capacity: 1024}, "exec": {Capacity: 64, Busy: 1}}}, true
		},
		Plugins: func() []pluginhost.PluginStatus { return f.plugins },
		// The agent's view of each pod's probes (the reconciler's): in
		// manifest mode the spec's and the annotation's, in cluster mode
		// the annotation's (the kubelet runs the spec's).
		Declared:    func(pod *v1.Pod) (*podprobes.View, bool) { return f.view(pod), true },
		HistorySize: 10,
		Now:         func() time.Time { return now },
	}
	if f.cluster != nil {
		c := *f.cluster
		opts.Cluster = func() statuspage.Cluster { return c }
	}
	if f.rejected != nil {
		opts.Manifests = func() []source.Rejection { return f.rejected }
	}
	return opts
}

// view is the agent's view of a pod's probes (the reconciler's): in
// manifest mode the spec's and the annotation's, in cluster mode the
// annotation's (the kubelet runs the spec's), exec refused (no container
// runtime).
func (f *fixture) view(pod *v1.Pod) *podprobes.View {
	policy := podprobes.Policy{}
	if !f.specProbe {
		policy.Transforms = []podprobes.Transform{podprobes.LeaveSpecToKubelet, podprobes.RefuseExec("exec probes need the container runtime")}
	}
	return podprobes.Of(pod, policy)
}

func (f *fixture) serve(t *testing.T) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	statuspage.New(f.options()).Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, srv *httptest.Server, path string) (int, http.Header, string) {
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
	return resp.StatusCode, resp.Header, string(body)
}

func pod(ns, name string, containers ...v1.Container) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "-" + name + "-uid")},
		Spec: v1.PodSpec{Containers: containers}, Status: v1.PodStatus{Phase: v1.PodRunning, PodIP: "10.1.2.3"}}
	for _, c := range containers {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, v1.ContainerStatus{Name: c.Name, Ready: true, ContainerID: "containerd://" + c.Name})
	}
	return p
}

func run(at int, result string, ms float64, msg string) history.Record {
	return history.Record{Time: now.Add(time.Duration(at) * time.Second), DurationMS: ms, Result: result, Message: msg,
		Attempts: 1, ContainerID: "containerd://app", Cached: "Success"}
}

func httpProbe(path string, port intstr.IntOrString, failureThreshold int32) *v1.Probe {
	return &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: path, Port: port}},
		PeriodSeconds: 1, SuccessThreshold: 1, FailureThreshold: failureThreshold}
}

// elements parses the page and returns its elements by tag name, failing on
// a page that is not HTML.
func elements(t *testing.T, body string) map[string][]*html.Node {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]*html.Node{}
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			out[n.Data] = append(out[n.Data], n)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	return out
}

// textOf is the text content of a node, as a browser's textContent.
func textOf(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return b.String()
}

// assertInert checks that the hostile markup produced no element and no
// event handler attribute: the only script is the page's own refresh
// script, no img exists, no attribute starts with "on"; and the hostile text
// is present literally in the page's text.
func assertInert(t *testing.T, body string, wantCopies int) {
	t.Helper()
	els := elements(t, body)
	if n := len(els["script"]); n != 1 || attr(els["script"][0], "src") != "/static/refresh.js" {
		t.Errorf("scripts: %d, want only /static/refresh.js", n)
	}
	if len(els["img"]) != 0 {
		t.Errorf("hostile <img> became an element: %d", len(els["img"]))
	}
	for tag, nodes := range els {
		for _, n := range nodes {
			for _, a := range n.Attr {
				if strings.HasPrefix(strings.ToLower(a.Key), "on") {
					t.Errorf("<%s> has event handler attribute %s=%q", tag, a.Key, a.Val)
				}
			}
		}
	}
	doc, _ := html.Parse(strings.NewReader(body))
	if got := strings.Count(textOf(doc), hostile); got < wantCopies {
		t.Errorf("hostile text shown literally %d times, want at least %d", got, wantCopies)
	}
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func hostileFixture() *fixture {
	// A pod name the API server would refuse still must not break the
	// page: the page escapes, it does not rely on validation upstream.
	p := pod("default", hostile, v1.Container{Name: "app", LivenessProbe: httpProbe("/healthz", intstr.FromInt32(8080), 3)})
	p.Annotations = map[string]string{"note": hostile}
	return &fixture{
		specProbe: true,
		pods:      []*v1.Pod{p},
		hist: map[string][]history.Probe{"default/" + hostile: {{Container: "app", Type: "liveness", Handler: "http",
			Results:     []history.Record{run(0, "failure", 2, hostile)},
			LastFailure: &history.Record{Time: now, Result: "failure", Message: hostile, ContainerID: "containerd://app"}}}},
		events:   []events.Event{{Time: now, Type: "Warning", Reason: "Unhealthy", Message: hostile, Namespace: "default", Pod: hostile, PodUID: "default-" + hostile + "-uid", Count: 1}},
		plugins:  []pluginhost.PluginStatus{{Name: "redis", Kinds: []string{"redis"}, Running: false, Restarts: 2, LastError: hostile}},
		cluster:  &statuspage.Cluster{Node: hostile, Synced: true, WritesPending: 1, ConditionType: "probed.io/ready"},
		rejected: []source.Rejection{{File: "/m/web.yaml", Document: 2, Line: 14, Pod: "default/web", Error: hostile, Since: now}},
	}
}

// TestIndex_HostileValuesAreText: a pod name, an annotation's pod, a probe
// message, a plugin's error, a node name and a manifest error holding HTML
// and script reach the index as text, and the CSP forbids inline script.
func TestIndex_HostileValuesAreText(t *testing.T) {
	srv := hostileFixture().serve(t)
	code, h, body := get(t, srv, "/")
	if code != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/html") {
		t.Fatalf("GET / = %d %s", code, h.Get("Content-Type"))
	}
	if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") {
		t.Errorf("Content-Security-Policy %q", csp)
	}
	// name (link text), probe message, plugin error, node, manifest error
	assertInert(t, body, 5)
	if strings.Contains(body, "<script>window") || strings.Contains(body, "<img") {
		t.Errorf("raw hostile markup in the page:\n%s", body)
	}
}

// TestPod_HostileValuesAreText: the pod's page (name, annotation, history
// message, last failure, event) escapes them too, also in the pod's URL.
func TestPod_HostileValuesAreText(t *testing.T) {
	srv := hostileFixture().serve(t)
	code, _, body := get(t, srv, "/pod/default/"+pathEscape(hostile))
	if code != 200 {
		t.Fatalf("GET pod page = %d\n%s", code, body)
	}
	// heading, annotation, history message, last failure, event message
	assertInert(t, body, 5)
	code, _, body = get(t, srv, "/pod/default/"+pathEscape(hostile+"x"))
	if code != 404 {
		t.Fatalf("unknown pod = %d", code)
	}
	assertInert(t, body, 1)
}

func pathEscape(s string) string {
	r := strings.NewReplacer("%", "%25", "/", "%2F", "?", "%3F", "#", "%23", " ", "%20", `"`, "%22", "<", "%3C", ">", "%3E", "'", "%27", "&", "%26", "=", "%3D")
	return r.Replace(s)
}

// rowsOf returns the data-pod attribute of every pod tbody, in order.
func rowsOf(t *testing.T, body string) []string {
	t.Helper()
	var out []string
	for _, n := range elements(t, body)["tbody"] {
		if v := attr(n, "data-pod"); v != "" {
			out = append(out, v)
		}
	}
	return out
}

func orderFixture() *fixture {
	ok := func(ns, name string) *v1.Pod {
		return pod(ns, name, v1.Container{Name: "app", ReadinessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(6379)}}, SuccessThreshold: 1, FailureThreshold: 3}})
	}
	f := &fixture{specProbe: true, hist: map[string][]history.Probe{}}
	for _, p := range []*v1.Pod{ok("b", "web"), ok("a", "zeta"), ok("b", "api"), ok("a", "alpha")} {
		f.pods = append(f.pods, p)
		f.hist[p.Namespace+"/"+p.Name] = []history.Probe{{Container: "app", Type: "readiness", Handler: "tcp", Results: []history.Record{run(0, "success", 1, "")}}}
	}
	// b/web and a/zeta fail now: their newest run failed.
	for _, k := range []string{"b/web", "a/zeta"} {
		f.hist[k][0].Results = append(f.hist[k][0].Results, run(1, "failure", 1, "dial tcp 10.1.2.3:6379: connect: connection refused"))
		f.hist[k][0].LastFailure = &f.hist[k][0].Results[1]
	}
	return f
}

// TestIndex_FailingFirstThenNamespaceAndName: failing pods first, each
// group by namespace then name.
func TestIndex_FailingFirstThenNamespaceAndName(t *testing.T) {
	_, _, body := get(t, orderFixture().serve(t), "/")
	want := []string{"a/zeta", "b/web", "a/alpha", "b/api"}
	if got := rowsOf(t, body); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("rows %v, want %v", got, want)
	}
	if !strings.Contains(body, "4 shown of 4, 2 failing") {
		t.Errorf("count line missing")
	}
}

// TestIndex_Filters: failing=1, namespace and q are applied on the server
// (they work without JavaScript) and kept in the form.
func TestIndex_Filters(t *testing.T) {
	srv := orderFixture().serve(t)
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"?failing=1", []string{"a/zeta", "b/web"}},
		{"?namespace=b", []string{"b/web", "b/api"}},
		{"?failing=1&namespace=b", []string{"b/web"}},
		{"?q=ZET", []string{"a/zeta"}},
		{"?q=connection+refused", []string{"a/zeta", "b/web"}},            // the last failure's message
		{"?q=tcp+:6379", []string{"a/zeta", "b/web", "a/alpha", "b/api"}}, // the target
		{"?q=nothing-matches", nil},
	} {
		_, _, body := get(t, srv, "/"+tc.query)
		if got := rowsOf(t, body); strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("%s: rows %v, want %v", tc.query, got, tc.want)
		}
	}
	_, _, body := get(t, srv, "/?failing=1&namespace=b&q=we")
	for _, want := range []string{`name="failing" value="1" checked`, `<option value="b" selected>`, `name="q" value="we"`} {
		if !strings.Contains(body, want) {
			t.Errorf("form does not keep the filter: no %s", want)
		}
	}
}

// cell returns the text of the td with the given class in the probe row
// data-probe=probe of the pod data-pod=podKey.
func cell(t *testing.T, body, podKey, probe, class string) string {
	t.Helper()
	for _, tb := range elements(t, body)["tbody"] {
		if attr(tb, "data-pod") != podKey {
			continue
		}
		for tr := tb.FirstChild; tr != nil; tr = tr.NextSibling {
			if tr.Type != html.ElementNode || attr(tr, "data-probe") != probe {
				continue
			}
			for td := tr.FirstChild; td != nil; td = td.NextSibling {
				if td.Type == html.ElementNode && strings.Contains(" "+attr(td, "class")+" ", " "+class+" ") {
					return strings.TrimSpace(textOf(td))
				}
			}
		}
	}
	t.Fatalf("no cell %s in %s %s", class, podKey, probe)
	return ""
}

// TestIndex_ProbeRows: each kind's target as an operator writes it (named
// ports resolved, the pod IP as HTTP host), the annotation's plugin probe,
// the last result, consecutive results against the threshold (errored runs
// skipped, a new container ID starts afresh, W11), the last failure and the
// sparkline; links to the JSON.
func TestIndex_ProbeRows(t *testing.T) {
	svc := "health"
	p := pod("default", "web",
		v1.Container{Name: "app", Ports: []v1.ContainerPort{{Name: "http", ContainerPort: 8080}},
			LivenessProbe:  httpProbe("/healthz", intstr.FromString("http"), 3),
			ReadinessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(6379)}}, SuccessThreshold: 2, FailureThreshold: 3},
			StartupProbe:   &v1.Probe{ProbeHandler: v1.ProbeHandler{GRPC: &v1.GRPCAction{Port: 9090, Service: &svc}}, SuccessThreshold: 1, FailureThreshold: 30}},
		v1.Container{Name: "cache"})
	p.Annotations = map[string]string{"probed.io/probes": `[{"container":"cache","type":"readiness","plugin":{"name":"redis","port":6379}}]`}
	liveness := []history.Record{run(0, "failure", 3, "old container"), run(1, "success", 2, ""), run(2, "failure", 4, "HTTP probe failed with statuscode: 500"), run(3, "errored", 0, "plugin gone"), run(4, "failure", 8, "HTTP probe failed with statuscode: 503")}
	liveness[0].ContainerID = "containerd://before-restart"
	liveness[1].ContainerID = "containerd://before-restart"
	f := &fixture{specProbe: true, pods: []*v1.Pod{p}, hist: map[string][]history.Probe{"default/web": {
		{Container: "app", Type: "liveness", Handler: "http", Results: liveness, LastFailure: &liveness[4]},
		{Container: "app", Type: "readiness", Handler: "tcp", Results: []history.Record{run(0, "failure", 1, "refused"), run(1, "success", 1, ""), run(2, "warning", 1, "")}},
		{Container: "cache", Type: "readiness", Handler: "redis", Results: []history.Record{run(0, "success", 1, "")}},
	}}}
	_, _, body := get(t, f.serve(t), "/")
	for _, tc := range []struct{ probe, class, want string }{
		{"app/liveness", "target", "GET http://10.1.2.3:8080/healthz"},
		{"app/liveness", "kind", "http"},
		{"app/liveness", "last", "failure"},
		// 2 failures of this container (the errored run is skipped; the
		// one before the restart is another container's).
		{"app/liveness", "consecutive", "2/3 failures"},
		{"app/readiness", "target", "tcp :6379"},
		{"app/readiness", "consecutive", "2/2 successes"}, // a warning is a success (P5)
		{"app/readiness", "last", "warning"},
		{"app/startup", "target", "grpc :9090 health"},
		{"app/startup", "last", "not run yet"},
		{"cache/readiness", "target", "plugin redis :6379"},
		{"cache/readiness", "kind", "redis"},
		{"cache/readiness", "consecutive", "1/1 successes"},
	} {
		if got := cell(t, body, "default/web", tc.probe, tc.class); got != tc.want {
			t.Errorf("%s %s = %q, want %q", tc.probe, tc.class, got, tc.want)
		}
	}
	if got := cell(t, body, "default/web", "app/liveness", "failure"); !strings.Contains(got, "HTTP probe failed with statuscode: 503") || !strings.Contains(body, `datetime="2026-12-01T23:50:04Z"`) {
		t.Errorf("last failure %q", got)
	}
	if n := strings.Count(body, `<rect class="r-failure"`); n != 4 { // liveness 3, readiness 1
		t.Errorf("%d failure bars, want 4", n)
	}
	if !strings.Contains(body, `<rect class="r-errored"`) || !strings.Contains(body, `<rect class="r-warning"`) {
		t.Errorf("sparkline misses errored or warning bars")
	}
	for _, link := range []string{`href="/pods/default/web/probes"`, `href="/pods/default/web"`, `href="/pod/default/web"`, `href="/debug/scheduler"`, `href="/metrics"`} {
		if !strings.Contains(body, link) {
			t.Errorf("no link %s", link)
		}
	}
	// The slowest run is full height, the others proportional.
	if !regexp.MustCompile(`<rect class="r-failure" x="32" y="0" width="6" height="24">`).MatchString(body) {
		t.Errorf("the slowest run (8 ms) is not full height")
	}
}

// TestIndex_ClusterModeListsAnnotationProbesOnly: with cluster mode's view
// (the kubelet runs the spec's probes) only the annotation's probes are
// rows.
func TestIndex_ClusterModeListsAnnotationProbesOnly(t *testing.T) {
	p := pod("default", "web", v1.Container{Name: "app", LivenessProbe: httpProbe("/healthz", intstr.FromInt32(8080), 3)})
	p.Annotations = map[string]string{"probed.io/probes": `[{"container":"app","type":"readiness","tcpSocket":{"port":5432}}]`}
	f := &fixture{pods: []*v1.Pod{p}, cluster: &statuspage.Cluster{Node: "node-1", Synced: false, WritesFailing: true, WritesPending: 4, ConditionType: "probed.io/ready"}}
	_, _, body := get(t, f.serve(t), "/")
	if strings.Contains(body, `data-probe="app/liveness"`) {
		t.Errorf("the spec's liveness probe is listed in cluster mode")
	}
	if got := cell(t, body, "default/web", "app/readiness", "target"); got != "tcp :5432" {
		t.Errorf("annotation probe target %q", got)
	}
	for _, want := range []string{"pods of node-1 not synced yet; condition writes failing, retried with backoff", "4 (probed.io/ready)"} {
		if !strings.Contains(body, want) {
			t.Errorf("header misses %q", want)
		}
	}
}

// TestIndex_Header: lag p99, backlog, pool busy per lane and plugin
// states; rejected manifests from Options.Manifests.
func TestIndex_Header(t *testing.T) {
	f := &fixture{plugins: []pluginhost.PluginStatus{{Name: "redis", Version: "1.2.0", Running: true, Restarts: 1}},
		rejected: []source.Rejection{{File: "/m/web.yaml", Document: 2, Line: 14, Pod: "default/web", Error: "web.yaml: pod default/web: container app: livenessProbe.periodSeconds: must be greater than 0", Since: now.Add(-time.Minute), Stale: true}}}
	_, _, body := get(t, f.serve(t), "/")
	for _, want := range []string{
		`<dd id="backlog">2</dd>`, "7 registered, 1 running", "<dt>pool network</dt><dd>3/256 busy, 2 due waiting</dd>", "<dt>pool exec</dt><dd>1/64 busy</dd>",
		"redis 1.2.0: running, 1 restarts", "livenessProbe.periodSeconds: must be greater than 0", "<td>14</td>", "last valid version, stale", "1m0s ago",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("page misses %q", want)
		}
	}
	if strings.Contains(body, `id="apiserver"`) {
		t.Errorf("API server shown in manifest mode")
	}
}

// TestPod_FullHistoryAndEvents: the pod's page lists every kept run newest
// first and the events of this pod only.
func TestPod_FullHistoryAndEvents(t *testing.T) {
	p := pod("default", "web", v1.Container{Name: "app", LivenessProbe: httpProbe("/healthz", intstr.FromInt32(8080), 3)})
	var recs []history.Record
	for i := range 10 {
		recs = append(recs, run(i, "success", float64(i+1), ""))
	}
	recs[9] = run(9, "failure", 10, "HTTP probe failed with statuscode: 500")
	f := &fixture{specProbe: true, pods: []*v1.Pod{p, pod("default", "other")}, hist: map[string][]history.Probe{"default/web": {{Container: "app", Type: "liveness", Handler: "http", Results: recs, LastFailure: &recs[9]}}},
		events: []events.Event{
			{Time: now, Type: "Warning", Reason: "Unhealthy", Message: "Liveness probe failed: HTTP probe failed with statuscode: 500", Namespace: "default", Pod: "web", PodUID: "default-web-uid", Count: 3},
			{Time: now, Type: "Warning", Reason: "Unhealthy", Message: "not this pod", Namespace: "default", Pod: "other", PodUID: "default-other-uid", Count: 1},
		}}
	code, _, body := get(t, f.serve(t), "/pod/default/web")
	if code != 200 {
		t.Fatalf("GET /pod/default/web = %d", code)
	}
	var times []string
	for _, tr := range elements(t, body)["tr"] {
		if strings.HasPrefix(attr(tr, "class"), "run ") {
			times = append(times, strings.TrimSpace(textOf(tr.FirstChild)))
		}
	}
	if len(times) != 10 || times[0] != stampOf(9) || times[9] != stampOf(0) {
		t.Fatalf("history rows %v: want 10, newest first", times)
	}
	if !strings.Contains(body, "Liveness probe failed: HTTP probe failed with statuscode: 500") || strings.Contains(body, "not this pod") {
		t.Errorf("events: want this pod's only")
	}
	if !strings.Contains(body, "≥1/3 failures") && !strings.Contains(body, "1/3 failures") {
		t.Errorf("consecutive missing")
	}
}

func stampOf(at int) string {
	return now.Add(time.Duration(at) * time.Second).UTC().Format(time.RFC3339)
}

// TestIndex_RefreshParameter: the script's interval comes from ?refresh=
// (0 turns it off), default 5 s; the static files are embedded.
func TestIndex_RefreshParameter(t *testing.T) {
	srv := (&fixture{}).serve(t)
	for q, want := range map[string]string{"": `data-refresh="5"`, "?refresh=0": `data-refresh="0"`, "?refresh=2": `data-refresh="2"`, "?refresh=x": `data-refresh="5"`} {
		if _, _, body := get(t, srv, "/"+q); !strings.Contains(body, want) {
			t.Errorf("%q: no %s", q, want)
		}
	}
	for _, path := range []string{"/static/page.css", "/static/refresh.js"} {
		if code, _, body := get(t, srv, path); code != 200 || len(body) < 100 {
			t.Errorf("GET %s = %d (%d bytes)", path, code, len(body))
		}
	}
	if code, _, _ := get(t, srv, "/static/"); code != 404 {
		t.Errorf("GET /static/ = %d, want 404 (no listing)", code)
	}
}

// controls holds the characters `probed status` escapes (output.Printable):
// an ESC sequence that clears a terminal, one that sets a window title with
// BEL, a CR, a DEL, a C1 CSI and a bidi override.
const controls = "bad\x1b[2J\x1b]0;pwned\a\rfake\x7f\u009b31m\u202eevil"

// controlsShown is controls as output.Printable escapes it.
const controlsShown = `bad\x1b[2J\x1b]0;pwned\a\rfake\x7f\u009b31m\u202eevil`

// TestPage_ControlCharactersEscaped: the rejected-manifests
// table, a pod's name, annotation, probe message, event, a plugin's error
// and the node name show control characters escaped, as `probed status`
// prints them; no raw control character reaches either page (the
// templates' own line breaks aside).
func TestPage_ControlCharactersEscaped(t *testing.T) {
	name := "web" + controls
	p := pod("default", name, v1.Container{Name: "app", LivenessProbe: httpProbe("/healthz", intstr.FromInt32(8080), 3)})
	p.Annotations = map[string]string{"note": controls}
	f := &fixture{
		specProbe: true,
		pods:      []*v1.Pod{p},
		hist: map[string][]history.Probe{"default/" + name: {{Container: "app", Type: "liveness", Handler: "http",
			Results:     []history.Record{run(0, "failure", 2, controls)},
			LastFailure: &history.Record{Time: now, Result: "failure", Message: controls, ContainerID: "containerd://app"}}}},
		events:   []events.Event{{Time: now, Type: "Warning", Reason: "Unhealthy", Message: controls, Namespace: "default", Pod: name, PodUID: string(p.UID), Count: 1}},
		plugins:  []pluginhost.PluginStatus{{Name: "redis", Kinds: []string{"redis"}, Restarts: 2, LastError: controls}},
		cluster:  &statuspage.Cluster{Node: controls, Synced: true, ConditionType: "probed.io/ready"},
		rejected: []source.Rejection{{File: "/m/web" + controls + ".yaml", Document: 2, Line: 14, Pod: "default/web", Error: controls, Since: now}},
	}
	srv := f.serve(t)
	for path, copies := range map[string]int{
		"/":                                    6, // pod name, last failure, plugin error, node, manifest file and error
		"/pod/default/" + url.PathEscape(name): 6, // heading, history message, last failure, annotation, event, plugin error
	} {
		code, _, body := get(t, srv, path)
		if code != 200 {
			t.Fatalf("GET %s = %d", path, code)
		}
		for i, r := range body {
			if r != '\n' && (r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == '\u202e') {
				t.Fatalf("GET %s: raw control %U at byte %d: %q", path, r, i, body[max(0, i-40):min(len(body), i+40)])
			}
		}
		doc, _ := html.Parse(strings.NewReader(body))
		if got := strings.Count(textOf(doc), controlsShown); got < copies {
			t.Errorf("GET %s shows the escaped text %d times, want at least %d:\n%s", path, got, copies, body)
		}
	}
}

// A probe's target (a 250 KB path) is cut to bound.TargetBytes
// on the index and the pod's page, and an annotation to
// bound.AnnotationBytes on the pod's page, both ends kept: the pages do not
// grow with what a manifest holds.
func TestPage_TargetsAndAnnotationsCut(t *testing.T) {
	path := "/" + strings.Repeat("a", 250_000) + "?end"
	p := pod("default", "web", v1.Container{Name: "app", LivenessProbe: httpProbe(path, intstr.FromInt32(8080), 3)})
	p.Annotations = map[string]string{"note": strings.Repeat("n", 100_000) + "END"}
	srv := (&fixture{specProbe: true, pods: []*v1.Pod{p}}).serve(t)
	for page, limit := range map[string]int{"/": 16 << 10, "/pod/default/web": 16 << 10} {
		_, _, body := get(t, srv, page)
		doc, err := html.Parse(strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if len(body) > limit || !strings.Contains(textOf(doc), "GET http://10.1.2.3:8080/aaa") || !strings.Contains(body, " bytes cut]…") {
			t.Errorf("GET %s: %d bytes (want at most %d), target shown cut: %v", page, len(body), limit, strings.Contains(body, " bytes cut]…"))
		}
	}
	if _, _, body := get(t, srv, "/pod/default/web"); !strings.Contains(body, "END</pre>") {
		t.Errorf("the annotation's end is not shown")
	}
}

// cellByClass returns the text of the first element of class class inside
// the tbody of podKey; "" when there is none.
func cellByClass(t *testing.T, body, podKey, class string) string {
	t.Helper()
	for _, tb := range elements(t, body)["tbody"] {
		if attr(tb, "data-pod") != podKey {
			continue
		}
		var found *html.Node
		var walk func(*html.Node)
		walk = func(n *html.Node) {
			if found != nil {
				return
			}
			if n.Type == html.ElementNode && strings.Contains(" "+attr(n, "class")+" ", " "+class+" ") {
				found = n
				return
			}
			for c := n.FirstChild; c != nil; c = c.NextSibling {
				walk(c)
			}
		}
		for c := tb.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
		if found != nil {
			return strings.TrimSpace(textOf(found))
		}
	}
	return ""
}

// crashLooping is demo/crashy as the simulator leaves it between restarts:
// its container waiting in CrashLoopBackOff (back-off 20s, killed 7.5 s
// ago), a sidecar running, a second container left terminated.
func crashLooping() *v1.Pod {
	p := pod("demo", "crashy", v1.Container{Name: "app", LivenessProbe: httpProbe("/no-such-page", intstr.FromInt32(8089), 2)},
		v1.Container{Name: "once", ReadinessProbe: httpProbe("/ready", intstr.FromInt32(8089), 3)})
	always := v1.ContainerRestartPolicyAlways
	p.Spec.InitContainers = []v1.Container{{Name: "proxy", RestartPolicy: &always}}
	p.Status.Conditions = []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionFalse}}
	app := &p.Status.ContainerStatuses[0]
	app.Ready, app.RestartCount = false, 3
	app.State.Waiting = &v1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 20s restarting failed container=app pod=crashy_demo(u)"}
	app.LastTerminationState.Terminated = &v1.ContainerStateTerminated{ExitCode: 137, Reason: "Error", FinishedAt: metav1.NewTime(now.Add(-7500 * time.Millisecond))}
	once := &p.Status.ContainerStatuses[1]
	once.Ready = false
	once.State.Terminated = &v1.ContainerStateTerminated{ExitCode: 3, Reason: "Error", Message: "exited"}
	p.Status.InitContainerStatuses = []v1.ContainerStatus{{Name: "proxy", Ready: true, State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}}
	return p
}

// TestIndex_ContainerStates: the index shows the pod's STATUS
// as kubectl get pods does (CrashLoopBackOff, not the phase Running) and,
// beside each probe's container, that container's state: waiting in
// CrashLoopBackOff with the time left of its back-off, terminated with its
// reason and exit code; the pod's page lists every container (the sidecar
// too) with its state, restarts and last termination.
func TestIndex_ContainerStates(t *testing.T) {
	f := &fixture{specProbe: true, pods: []*v1.Pod{crashLooping()}}
	srv := f.serve(t)
	_, _, body := get(t, srv, "/")
	if got := cellByClass(t, body, "demo/crashy", "status"); got != "CrashLoopBackOff" {
		t.Errorf("status cell %q, want CrashLoopBackOff", got)
	}
	if got := cell(t, body, "demo/crashy", "app/liveness", "container"); got != "app waiting: CrashLoopBackOff, restart in 13s (back-off 20s)" {
		t.Errorf("app's container cell %q", got)
	}
	if got := cell(t, body, "demo/crashy", "once/readiness", "container"); got != "once terminated: Error, exit code 3" {
		t.Errorf("once's container cell %q", got)
	}
	if !strings.Contains(body, `data-state="waiting"`) || !strings.Contains(body, `data-status="CrashLoopBackOff"`) {
		t.Errorf("no data-state or data-status attributes")
	}

	_, _, body = get(t, srv, "/pod/demo/crashy")
	rows := map[string]string{}
	for _, tr := range elements(t, body)["tr"] {
		if name := attr(tr, "data-container"); name != "" {
			rows[name] = rowText(tr)
		}
	}
	for name, want := range map[string]string{
		"proxy": "proxy (sidecar) | running | true | false | 0 | - | -",
		"app":   "app | waiting: CrashLoopBackOff, restart in 13s (back-off 20s) | false | false | 3 | terminated: Error, exit code 137 at 2026-12-01T23:49:52Z | back-off 20s restarting failed container=app pod=crashy_demo(u)",
		"once":  "once | terminated: Error, exit code 3 | false | false | 0 | - | exited",
	} {
		if rows[name] != want {
			t.Errorf("pod page, container %s:\n got %q\nwant %q", name, rows[name], want)
		}
	}
	if !strings.Contains(body, `<dd id="pod-status">CrashLoopBackOff</dd>`) {
		t.Errorf("the pod page's status is not CrashLoopBackOff")
	}
}

// TestPage_StalePodMarked: a pod probed at its last valid
// version (the probed.io/ManifestStale condition, source.MarkStale) is
// marked stale on the index, and its page shows why and lists the pod's
// conditions, the stale one among them.
func TestPage_StalePodMarked(t *testing.T) {
	stale := pod("shop", "web", v1.Container{Name: "app", LivenessProbe: httpProbe("/healthz", intstr.FromInt32(8080), 3)})
	stale.Status.Conditions = []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue, LastTransitionTime: metav1.NewTime(now.Add(-time.Hour))}}
	rej := source.Rejection{File: "/m/web.yaml", Document: 1, Pod: "shop/web", Error: `/m/web.yaml: document 1: pod shop/web: container "app": spec.containers[0].readinesProbe: unknown field "readinesProbe"`, Since: now.Add(-time.Minute), Stale: true}
	source.MarkStale(stale, rej)
	fresh := pod("shop", "api", v1.Container{Name: "api", ReadinessProbe: httpProbe("/ready", intstr.FromInt32(8080), 3)})
	srv := (&fixture{specProbe: true, pods: []*v1.Pod{stale, fresh}, rejected: []source.Rejection{rej}}).serve(t)

	_, _, body := get(t, srv, "/")
	for _, tb := range elements(t, body)["tbody"] {
		want := map[string]string{"shop/web": "true", "shop/api": "false"}[attr(tb, "data-pod")]
		if got := attr(tb, "data-stale"); got != want {
			t.Errorf("%s data-stale=%q, want %q", attr(tb, "data-pod"), got, want)
		}
	}
	if got := cellByClass(t, body, "shop/web", "stale"); got != "stale manifest" {
		t.Errorf("shop/web's stale mark %q", got)
	}
	if got := cellByClass(t, body, "shop/api", "stale"); got != "" {
		t.Errorf("shop/api is marked stale: %q", got)
	}

	_, _, body = get(t, srv, "/pod/shop/web")
	doc, err := html.Parse(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(textOf(doc)), " ")
	if !strings.Contains(text, `Stale manifest: the manifest no longer loads; probing the last valid version: `+rej.Error) {
		t.Errorf("the pod page does not say why it is stale:\n%s", text)
	}
	conds := map[string]string{}
	for _, tr := range elements(t, body)["tr"] {
		if c := attr(tr, "data-condition"); c != "" {
			conds[c] = rowText(tr)
			if c == string(source.ConditionManifestStale) && !strings.Contains(attr(tr, "class"), "stale") {
				t.Errorf("the stale condition's row is not marked")
			}
		}
	}
	if got, want := conds["Ready"], "Ready | True | - | 2026-12-01T22:50:00Z | -"; got != want {
		t.Errorf("Ready condition %q, want %q", got, want)
	}
	if got := conds[string(source.ConditionManifestStale)]; !strings.HasPrefix(got, "probed.io/ManifestStale | True | ManifestInvalid | 2026-12-01T23:49:00Z | the manifest no longer loads") {
		t.Errorf("stale condition %q", got)
	}
	_, _, body = get(t, srv, "/pod/shop/api")
	if strings.Contains(body, `id="stale"`) {
		t.Errorf("the fresh pod's page says stale")
	}
}

// TestPage_LongValuesBreakOnlyAfterSeparators: targets, file names and
// messages carry a line-break opportunity (<wbr>) after each run of path
// and query separators and nowhere else, and their text is unchanged (the
// browser test checks where lines really break).
func TestPage_LongValuesBreakOnlyAfterSeparators(t *testing.T) {
	path := "/api/v1/namespaces/shop/services/payments-backend-production/healthz?verbose=1&deep=true"
	p := pod("default", "web", v1.Container{Name: "app", LivenessProbe: httpProbe(path, intstr.FromInt32(8080), 3)})
	srv := (&fixture{specProbe: true, pods: []*v1.Pod{p},
		rejected: []source.Rejection{{File: "/srv/manifests/team-payments/payments-api.yaml", Document: 1, Error: "bad <b>", Since: now}}}).serve(t)
	_, _, body := get(t, srv, "/")
	// The query's values are hidden as the API hides them (runtime/redact).
	shown := strings.NewReplacer("verbose=1", "verbose=REDACTED", "deep=true", "deep=REDACTED").Replace(path)
	if got := cell(t, body, "default/web", "app/liveness", "target"); got != "GET http://10.1.2.3:8080"+shown {
		t.Errorf("target text %q", got)
	}
	want := "GET http://<wbr>10.1.2.3:8080/<wbr>api/<wbr>v1/<wbr>namespaces/<wbr>shop/<wbr>services/<wbr>payments-backend-production/<wbr>healthz?<wbr>verbose=<wbr>REDACTED&amp;<wbr>deep=<wbr>REDACTED"
	if !strings.Contains(body, want) {
		t.Errorf("target markup lacks %s", want)
	}
	if !strings.Contains(body, "<code>/<wbr>srv/<wbr>manifests/<wbr>team-payments/<wbr>payments-api.yaml</code>") || !strings.Contains(body, "bad &lt;b&gt;") {
		t.Errorf("file name or error markup:\n%s", body)
	}
}

// rowText is a table row's cells' texts, spaces folded, joined by " | ".
func rowText(tr *html.Node) string {
	var cells []string
	for td := tr.FirstChild; td != nil; td = td.NextSibling {
		if td.Type == html.ElementNode {
			cells = append(cells, strings.Join(strings.Fields(textOf(td)), " "))
		}
	}
	return strings.Join(cells, " | ")
}

// TestIndex_RefusedProbesAndOrigins: each probe row says where the probe is
// declared (spec, annotation); in cluster mode a probe the agent refuses
// (exec without the container runtime, a misspelled field) is a row of its
// own, "refused" with every reason, never "not run yet" as if it ran; a
// refusal of the whole annotation is a row without container or type; the
// pod page says the same.
func TestIndex_RefusedProbesAndOrigins(t *testing.T) {
	p := pod("default", "web", v1.Container{Name: "app", LivenessProbe: httpProbe("/healthz", intstr.FromInt32(8080), 3)})
	p.Annotations = map[string]string{"probed.io/probes": `[{"container":"app","type":"readiness","tcpSocket":{"port":5432}},` +
		`{"container":"app","type":"startup","exec":{"command":["true"]}},{"container":"app","type":"liveness","tcpSoket":{"port":1}}]`}
	whole := pod("default", "whole", v1.Container{Name: "app"})
	whole.Annotations = map[string]string{"probed.io/probes": `{"container":"app"}`}

	manifest := pod("shop", "both", v1.Container{Name: "app", LivenessProbe: httpProbe("/healthz", intstr.FromInt32(8080), 3)})
	manifest.Annotations = map[string]string{"probed.io/probes": `[{"container":"app","type":"readiness","tcpSocket":{"port":5432}}]`}
	_, _, body := get(t, (&fixture{specProbe: true, pods: []*v1.Pod{manifest}}).serve(t), "/")
	if !strings.Contains(body, `data-probe="app/liveness" data-origin="spec"`) || !strings.Contains(body, `data-probe="app/readiness" data-origin="annotation"`) {
		t.Errorf("manifest mode: the rows do not say spec and annotation:\n%s", body)
	}

	srv := (&fixture{pods: []*v1.Pod{p, whole}, cluster: &statuspage.Cluster{Node: "n", Synced: true, ConditionType: "probed.io/ready"}}).serve(t)
	_, _, body = get(t, srv, "/")
	if got := cell(t, body, "default/web", "app/readiness", "last"); got != "not run yet" {
		t.Errorf("the valid annotation probe: last %q", got)
	}
	if got := cell(t, body, "default/web", "app/startup", "last"); got != "refused" {
		t.Errorf("the exec probe: last %q, want refused", got)
	}
	if got := cell(t, body, "default/web", "app/startup", "failure"); got != "metadata.annotations[probed.io/probes][1].exec: Forbidden: exec probes need the container runtime" {
		t.Errorf("the exec probe's reason %q", got)
	}
	if got := cell(t, body, "default/web", "app/liveness", "failure"); !strings.Contains(got, `[2].tcpSoket: Invalid value: "tcpSoket": unknown field`) ||
		!strings.Contains(got, "must specify a handler type") {
		t.Errorf("the misspelled probe's reasons %q", got)
	}
	if !strings.Contains(body, `data-probe="app/liveness" data-origin="annotation" data-result="refused"`) {
		t.Error("the refused liveness probe is not marked refused")
	}
	if strings.Contains(body, `data-origin="spec"`) {
		t.Error("cluster mode lists a spec probe")
	}
	if got := cell(t, body, "default/whole", "/-", "failure"); !strings.Contains(got, "must be a JSON list of probe objects") {
		t.Errorf("the whole annotation's refusal %q", got)
	}
	if got := cellByClass(t, body, "default/web", "pod-name"); got == "" {
		t.Error("no pod cell")
	}
	if !strings.Contains(body, `<tbody class="pod failing`) {
		t.Error("a pod with refused probes is not shown failing")
	}

	_, _, page := get(t, srv, "/pod/default/web")
	for _, want := range []string{`data-probe="app/startup" data-origin="annotation" data-result="refused"`, "refused:",
		"Forbidden: exec probes need the container runtime", `<span class="declared origin" data-origin="annotation">(annotation)</span>`} {
		if !strings.Contains(page, want) {
			t.Errorf("the pod page misses %q", want)
		}
	}
}
