package cases

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/probed/probed/manager"
	"github.com/probed/probed/runtime"
)

// BR-21: prober_probe_total carries the full pod name and exact label
// values, counts non-errored attempts by result, the duration histogram
// records the successful ones, counters never decrease, and every series of
// the pod is gone after it is removed.
func TestBR21_ProbeMetrics(t *testing.T) {
	e := newEnv(t)
	var hits atomic.Int64
	srv := startServer(t, e.clk, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) <= 3 {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusInternalServerError)
	})
	pod := newPod("web-7d4b9c6f5-x2x9z", v1.Container{Name: "app",
		ReadinessProbe: timing(httpProbe("/r", srv.Port), 0, 1, 0, 0, 0),
		LivenessProbe:  timing(execProbe("true"), 0, 1, 0, 0, 0),
	})
	pod.Namespace = "ns1"
	pod.GenerateName = "web-7d4b9c6f5-"
	pod.UID = types.UID("6f1c2a8e-0d7b-4f4e-9a51-3c2b7e9d1a10")
	pod = e.add(pod)

	// Counters never decrease: compare every scrape with the previous one.
	last := map[string]float64{}
	scrape := func() {
		t.Helper()
		for _, name := range []string{manager.MetricProbeTotal, manager.MetricProbeDuration} {
			for _, s := range e.gather(name) {
				key := name + fmt.Sprint(s.labels)
				if s.value < last[key] {
					t.Fatalf("%s went down from %v to %v", key, last[key], s.value)
				}
				last[key] = s.value
			}
		}
	}
	e.advanceTo(e.clk.Now().Add(10*time.Second), 100*time.Millisecond, func() bool {
		scrape()
		return len(srv.requests("/r")) < 5
	})
	if n := len(srv.requests("/r")); n != 5 {
		t.Fatalf("%d readiness attempts, want to scrape after 5", n)
	}

	base := map[string]string{"container": "app", "pod": "web-7d4b9c6f5-x2x9z", "namespace": "ns1", "pod_uid": string(pod.UID)}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	find := func(name string, labels map[string]string) (float64, bool) {
		for _, s := range e.gather(name) {
			if fmt.Sprint(s.labels) == fmt.Sprint(labels) {
				return s.value, true
			}
		}
		return 0, false
	}
	if v, ok := find(manager.MetricProbeTotal, with("probe_type", "Readiness", "result", "successful")); !ok || v != 3 {
		t.Errorf("Readiness successful = %v (found %v), want 3", v, ok)
	}
	if v, ok := find(manager.MetricProbeTotal, with("probe_type", "Readiness", "result", "failed")); !ok || v != 2 {
		t.Errorf("Readiness failed = %v (found %v), want 2", v, ok)
	}
	liveRuns := len(e.runsOf("app", runtime.Liveness))
	if v, ok := find(manager.MetricProbeTotal, with("probe_type", "Liveness", "result", "successful")); !ok || v != float64(liveRuns) || liveRuns == 0 {
		t.Errorf("Liveness successful = %v (found %v), want %d", v, ok, liveRuns)
	}
	durLabels := map[string]string{"probe_type": "Readiness", "container": "app", "pod": "web-7d4b9c6f5-x2x9z", "namespace": "ns1"}
	if v, ok := find(manager.MetricProbeDuration, durLabels); !ok || v != 3 {
		t.Errorf("Readiness duration samples = %v (found %v), want the 3 successful attempts", v, ok)
	}
	for _, s := range e.gather(manager.MetricProbeTotal) {
		l := s.labels
		if len(l) != 6 || !oneOf(l["result"], "successful", "failed", "unknown") || !oneOf(l["probe_type"], "Liveness", "Readiness", "Startup") {
			t.Errorf("series %v: want exactly probe_type, result, container, pod, namespace, pod_uid with the kubelet's values", l)
		}
	}
	for _, s := range e.gather(manager.MetricProbeDuration) {
		if len(s.labels) != 4 || s.labels["pod_uid"] != "" || s.labels["result"] != "" {
			t.Errorf("duration series %v: want exactly probe_type, container, pod, namespace", s.labels)
		}
	}

	// Delete the pod and scrape 5 s later: nothing left for it.
	e.remove(pod)
	if st, _ := manager.StatsOf(e.mgr); st.Entries != 0 {
		t.Errorf("%d workers left after RemovePod", st.Entries)
	}
	e.advance(5*time.Second, 100*time.Millisecond)
	for _, name := range []string{manager.MetricProbeTotal, manager.MetricProbeDuration} {
		for _, s := range e.gather(name) {
			if s.labels["pod"] == pod.Name || s.labels["pod_uid"] == string(pod.UID) {
				t.Errorf("series left after removal: %s%v", name, s.labels)
			}
		}
	}
}

func oneOf(s string, set ...string) bool {
	for _, v := range set {
		if s == v {
			return true
		}
	}
	return false
}

// ---------------------------------------------------------------------------
// A recording TracerProvider for BR-22: it keeps every span's name,
// attributes, events and status.

type recordingTP struct {
	embedded.TracerProvider
	mu    sync.Mutex
	spans []*recSpan
}

func (p *recordingTP) Tracer(string, ...trace.TracerOption) trace.Tracer { return &recTracer{tp: p} }

type recTracer struct {
	embedded.Tracer
	tp *recordingTP
}

func (t *recTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	cfg := trace.NewSpanStartConfig(opts...)
	s := &recSpan{tp: t.tp, name: name}
	s.attrs = append(s.attrs, cfg.Attributes()...)
	t.tp.mu.Lock()
	t.tp.spans = append(t.tp.spans, s)
	t.tp.mu.Unlock()
	return trace.ContextWithSpan(ctx, s), s
}

type recSpan struct {
	embedded.Span
	tp *recordingTP

	mu    sync.Mutex
	name  string
	attrs []attribute.KeyValue
	text  []string // events, errors and status descriptions
	ended bool
}

func (s *recSpan) End(...trace.SpanEndOption) {
	s.mu.Lock()
	s.ended = true
	s.mu.Unlock()
}

func (s *recSpan) AddEvent(name string, opts ...trace.EventOption) {
	cfg := trace.NewEventConfig(opts...)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.text = append(s.text, name)
	for _, a := range cfg.Attributes() {
		s.text = append(s.text, string(a.Key)+"="+a.Value.Emit())
	}
}
func (s *recSpan) AddLink(trace.Link) {}
func (s *recSpan) IsRecording() bool  { return true }
func (s *recSpan) RecordError(err error, opts ...trace.EventOption) {
	s.AddEvent("exception: "+err.Error(), opts...)
}
func (s *recSpan) SpanContext() trace.SpanContext { return trace.SpanContext{} }
func (s *recSpan) SetStatus(_ codes.Code, desc string) {
	s.mu.Lock()
	s.text = append(s.text, desc)
	s.mu.Unlock()
}
func (s *recSpan) SetName(name string) {
	s.mu.Lock()
	s.name = name
	s.mu.Unlock()
}
func (s *recSpan) SetAttributes(kv ...attribute.KeyValue) {
	s.mu.Lock()
	s.attrs = append(s.attrs, kv...)
	s.mu.Unlock()
}
func (s *recSpan) TracerProvider() trace.TracerProvider { return s.tp }

// dump returns everything the spans carry, one line each.
func (p *recordingTP) dump() (lines []string, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.spans {
		s.mu.Lock()
		lines = append(lines, "name "+s.name)
		for _, a := range s.attrs {
			lines = append(lines, string(a.Key)+"="+a.Value.Emit())
		}
		lines = append(lines, s.text...)
		s.mu.Unlock()
	}
	return lines, len(p.spans)
}

// BR-22: a response body never leaks through probe results: the failure
// message is exactly "HTTP probe failed with statuscode: 500", and the
// secret in the body appears in no event, log line (at any level), metric
// label, span or run record, whether the probe fails (500), succeeds (200)
// or gets a redirect to another host that is not followed (Warning).
func TestBR22_BodyNeverLeaks(t *testing.T) {
	const secret = "EXAMPLE-SECRET-123"
	tp := &recordingTP{}
	e := newEnv(t, withTracer(tp), withLogLevel(-8))
	var port int
	srv := startServer(t, e.clk, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/fail":
			w.WriteHeader(http.StatusInternalServerError)
		case "/redirect":
			w.Header().Set("Location", "http://localhost:"+itoa(port)+"/ok")
			w.WriteHeader(http.StatusFound)
		default:
			w.WriteHeader(http.StatusOK)
		}
		_, _ = w.Write([]byte("token=" + secret))
	})
	port = srv.Port
	pods := map[string]*v1.Pod{}
	for _, path := range []string{"/fail", "/ok", "/redirect"} {
		name := "br22-" + strings.TrimPrefix(path, "/")
		pods[path] = e.add(newPod(name, v1.Container{Name: "app",
			ReadinessProbe: timing(httpProbe(path, srv.Port), 0, 1, 0, 0, 1)}))
	}
	e.advance(5*time.Second, 100*time.Millisecond)

	byPod := map[types.UID][]runRec{}
	for _, r := range e.allRuns() {
		byPod[r.PodUID] = append(byPod[r.PodUID], r)
	}
	for path, want := range map[string]struct {
		result runtime.Result
		msg    string
		ready  bool
	}{
		"/fail":     {runtime.Failure, "HTTP probe failed with statuscode: 500", false},
		"/ok":       {runtime.Success, "", true},
		"/redirect": {runtime.Warning, "Probe terminated redirects", true},
	} {
		pod := pods[path]
		runs := byPod[pod.UID]
		if len(runs) < 5 {
			t.Fatalf("%s: %d attempts", path, len(runs))
		}
		for _, r := range runs {
			if r.Err != nil || r.Result != want.result || r.Message != want.msg {
				t.Errorf("%s: %v %v %q, want %v with message %q", path, r.Result, r.Err, r.Message, want.result, want.msg)
			}
		}
		if cs := e.container(pod.UID, "app"); cs.Ready != want.ready {
			t.Errorf("%s: Ready %v, want %v", path, cs.Ready, want.ready)
		}
	}
	var sawFailed, sawWarning bool
	for _, ev := range e.eventList() {
		switch {
		case ev.Pod == "br22-fail" && ev.Reason == "Unhealthy":
			sawFailed = true
			if ev.Message != "Readiness probe failed: HTTP probe failed with statuscode: 500" {
				t.Errorf("failure event %q", ev.Message)
			}
		case ev.Pod == "br22-redirect" && ev.Reason == "ProbeWarning":
			sawWarning = true
		case ev.Pod == "br22-ok":
			t.Errorf("event for a successful probe: %+v", ev)
		}
	}
	if !sawFailed || !sawWarning {
		t.Errorf("events %+v: want the failure and the redirect warning", e.eventList())
	}

	// The secret is nowhere.
	var where []string
	for _, ev := range e.eventList() {
		if strings.Contains(fmt.Sprintf("%+v", ev), secret) {
			where = append(where, "event "+ev.Message)
		}
	}
	if strings.Contains(e.logs.String(), secret) {
		for _, line := range strings.Split(e.logs.String(), "\n") {
			if strings.Contains(line, secret) {
				where = append(where, "log "+line)
			}
		}
	}
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if strings.Contains(lp.GetValue(), secret) {
					where = append(where, "metric "+mf.GetName())
				}
			}
		}
	}
	lines, spans := tp.dump()
	if spans == 0 {
		t.Errorf("no spans recorded")
	}
	for _, l := range lines {
		if strings.Contains(l, secret) {
			where = append(where, "span "+l)
		}
	}
	for _, r := range e.allRuns() {
		if strings.Contains(r.Message, secret) {
			where = append(where, "run record "+r.Message)
		}
	}
	sort.Strings(where)
	if len(where) > 0 {
		t.Errorf("the secret leaked: %q", where)
	}
	if !strings.Contains(e.logs.String(), "level=") {
		t.Errorf("no logs captured")
	}
}

// BR-23: the pod's primary IP is ::1 (secondary 127.0.0.1). (a) A server on
// [::1] passes both probes; the request goes to http://[::1]:port with
// Host [::1]:port. (b) A server only on 127.0.0.1 fails both (connection
// refused on ::1): Ready=false and a restart after 3 failures, with no
// fallback to the secondary IP.
func TestBR23_IPv6PodIP(t *testing.T) {
	if ln, err := net.Listen("tcp", "[::1]:0"); err != nil {
		t.Skipf("IPv6 loopback unavailable: %v", err)
	} else {
		ln.Close()
	}
	podOn := func(name string, port int) *v1.Pod {
		p := newPod(name, v1.Container{Name: "app",
			ReadinessProbe: timing(httpProbe("/healthz", port), 0, 1, 0, 0, 0),
			LivenessProbe:  timing(tcpProbe(port), 0, 1, 0, 0, 3),
		})
		p.Status.PodIP = "::1"
		p.Status.PodIPs = []v1.PodIP{{IP: "::1"}, {IP: "127.0.0.1"}}
		return p
	}
	t.Run("a-server-on-v6", func(t *testing.T) {
		e := newEnv(t)
		srv := startServer(t, e.clk, "[::1]:0", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
		pod := e.add(podOn("br23a", srv.Port))
		e.advance(5*time.Second, 100*time.Millisecond)
		for _, pt := range []runtime.ProbeType{runtime.Readiness, runtime.Liveness} {
			runs := e.runsOf("app", pt)
			if len(runs) < 4 {
				t.Fatalf("%v: %d attempts", pt, len(runs))
			}
			for _, r := range runs {
				if r.Err != nil || r.Result != runtime.Success {
					t.Fatalf("%v: %v %v %q, want Success", pt, r.Result, r.Err, r.Message)
				}
			}
		}
		want := fmt.Sprintf("[::1]:%d", srv.Port)
		for _, r := range srv.requests("/healthz") {
			if r.Host != want || r.Local != want {
				t.Errorf("request Host %q to %s, want %s", r.Host, r.Local, want)
			}
		}
		if cs := e.container(pod.UID, "app"); !cs.Ready {
			t.Errorf("Ready = false")
		}
		if rs := e.restartList(); len(rs) != 0 {
			t.Errorf("restarts %+v", rs)
		}
	})
	t.Run("b-server-on-v4-only", func(t *testing.T) {
		e := newEnv(t)
		var conns atomic.Int64
		var srv *server
		for i := 0; ; i++ {
			srv = startServer(t, e.clk, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) },
				func(s *http.Server) {
					s.ConnState = func(_ net.Conn, st http.ConnState) {
						if st == http.StateNew {
							conns.Add(1)
						}
					}
				})
			if ln, err := net.Listen("tcp", fmt.Sprintf("[::1]:%d", srv.Port)); err == nil {
				ln.Close()
				break
			}
			if i == 10 {
				t.Skip("no port free on both families")
			}
		}
		pod := e.add(podOn("br23b", srv.Port))
		e.advance(5*time.Second, 100*time.Millisecond)
		expectRestartAtFailure(t, e, "app", 3)
		for _, r := range e.runsOf("app", runtime.Readiness) {
			if r.Err != nil || r.Result != runtime.Failure || !strings.Contains(r.Message, "[::1]:"+itoa(srv.Port)) {
				t.Errorf("readiness: %v %v %q, want Failure on [::1]:%d", r.Result, r.Err, r.Message, srv.Port)
			}
		}
		if cs := e.container(pod.UID, "app"); cs.Ready {
			t.Errorf("Ready = true")
		}
		if n := conns.Load(); n != 0 {
			t.Errorf("%d connections reached the IPv4 server: fell back to the secondary pod IP", n)
		}
	})
}
