package telemetry_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/probed/probed/agent"
	"github.com/probed/probed/agent/telemetry"
)

const (
	tracedNS      = "tel"
	webPodName    = "web-7d4b9c6f5-x2x9z"
	webPodUID     = "0b1c2d3e-4f50-4617-8a9b-0c1d2e3f4a5b"
	plugPodName   = "plug"
	plugPodUID    = "5a4b3c2d-1e0f-4a1b-9c8d-7e6f5a4b3c2d"
	nodeName      = "node-under-test"
	serviceVer    = "v0.0.0-test"
	pluginRPCSpan = "probeplugin.v1.ProbePlugin/Probe"
)

// tracedManifests writes the pods of the tracing tests into dir:
//
//   - tel/web-7d4b9c6f5-x2x9z, container app: a startup probe on /redirect
//     (a redirect to another host: warning), a liveness probe on
//     /ok?token=abc&user=bob (200), a readiness probe on /fail (500);
//   - tel/plug, container side: custom probes of kind "test" (the test
//     plugin): readiness (success; the plugin appends the trace context it
//     receives to tracefile) and liveness (a handler error: errored).
//
// The targets' bodies carry secrets.
func tracedManifests(t *testing.T, dir string, port int, tracefile string) {
	t.Helper()
	writeManifest(t, filepath.Join(dir, "web.yaml"), fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: %s, uid: %s}
spec:
  containers:
  - name: app
    image: app
    startupProbe:
      httpGet: {path: /redirect, port: %[4]d}
      periodSeconds: 1
      timeoutSeconds: 5
    livenessProbe:
      httpGet: {path: "/ok?token=abc&user=bob", port: %[4]d}
      periodSeconds: 1
      timeoutSeconds: 5
    readinessProbe:
      httpGet: {path: /fail, port: %[4]d}
      periodSeconds: 1
      timeoutSeconds: 5
`, webPodName, tracedNS, webPodUID, port))
	writeManifest(t, filepath.Join(dir, "plug.yaml"), fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: %s
  uid: %s
  annotations:
    probed.io/probes: |
      [{"container": "side", "type": "readiness", "periodSeconds": 1, "timeoutSeconds": 5,
        "plugin": {"name": "test", "port": %d, "params": {"mode": "ok", "tracefile": %q}}},
       {"container": "side", "type": "liveness", "periodSeconds": 1, "timeoutSeconds": 5,
        "plugin": {"name": "test", "params": {"mode": "error"}}}]
spec:
  containers:
  - name: side
    image: side
`, plugPodName, tracedNS, plugPodUID, port, tracefile))
}

// tracedRun is what one run of the traced agent left behind.
type tracedRun struct {
	spans     []span
	raw       [][]byte // the export requests, marshalled
	tg        *target
	lines     []traceLine // trace contexts the plugin received
	hist      agent.PodHistory
	events    []byte
	agentLogs string
}

// runTraced runs an agent with a provider from telemetry.Setup exporting
// over OTLP/gRPC to an in-process receiver, until each probe has run a few
// times; it then stops the agent, shuts the provider down (which flushes
// the batch processor) and returns what the receiver got.
func runTraced(t *testing.T, sampler, samplerArg string) tracedRun {
	t.Helper()
	rcv := startReceiver(t)
	tg := newTarget(t)
	dir := t.TempDir()
	tracefile := filepath.Join(t.TempDir(), "trace-context")
	tracedManifests(t, dir, tg.port, tracefile)
	cfg, _ := pluginConfig(t)

	tp, err := telemetry.Setup(context.Background(), telemetry.Options{
		Exporter: "otlp", Protocol: "grpc", Endpoint: rcv.addr,
		Sampler: sampler, SamplerArg: samplerArg,
		ServiceVersion: serviceVer, NodeName: nodeName,
	})
	if err != nil {
		t.Fatal(err)
	}
	shut := false
	t.Cleanup(func() {
		if !shut {
			_ = tp.Shutdown(context.Background())
		}
	})
	ra := startAgent(t, dir, func(o *agent.Options) {
		o.TracerProvider = tp
		o.PluginConfig = cfg
	})
	eventually(t, 30*time.Second, "every probe ran three times", func() (bool, string) {
		n := len(readTraceFile(t, tracefile))
		desc := fmt.Sprintf("hits /redirect=%d /ok=%d /fail=%d, plugin calls=%d", tg.count("/redirect"), tg.count("/ok"), tg.count("/fail"), n)
		return tg.count("/redirect") >= 1 && tg.count("/ok") >= 3 && tg.count("/fail") >= 3 && n >= 3, desc
	})
	var run tracedRun
	run.hist, err = ra.history(tracedNS, webPodName)
	if err != nil {
		t.Fatal(err)
	}
	if run.events, err = ra.get("/events"); err != nil {
		t.Fatal(err)
	}
	ra.stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatalf("provider Shutdown: %v", err)
	}
	shut = true
	run.spans = rcv.spans()
	rcv.mu.Lock()
	for _, req := range rcv.reqs {
		b, err := proto.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		run.raw = append(run.raw, b)
	}
	rcv.mu.Unlock()
	run.tg = tg
	run.lines = readTraceFile(t, tracefile)
	run.agentLogs = ra.logs.String()
	return run
}

// probeSpans returns the probe spans named name of pod.
func probeSpans(spans []span, name, pod string) []span {
	var out []span
	for _, s := range spans {
		if s.Name == name && s.str("k8s.pod.name") == pod {
			out = append(out, s)
		}
	}
	return out
}

// wantAttrs checks string and int attributes of s.
func wantAttrs(t *testing.T, s span, strs map[string]string, ints map[string]int64) {
	t.Helper()
	for k, want := range strs {
		if got := s.str(k); got != want {
			t.Errorf("span %q (%s/%s): %s = %q, want %q", s.Name, s.str("k8s.pod.name"), s.str("prober.type"), k, got, want)
		}
	}
	for k, want := range ints {
		if got := s.int(k); got != want {
			t.Errorf("span %q (%s/%s): %s = %d, want %d", s.Name, s.str("k8s.pod.name"), s.str("prober.type"), k, got, want)
		}
	}
}

// checkNoSecret fails when a body's secret appears anywhere in what the
// receiver got (span names, attributes, events, status, resource): the
// marshalled requests hold every string as is.
func checkNoSecret(t *testing.T, run tracedRun) {
	t.Helper()
	for _, b := range run.raw {
		if bytes.Contains(b, []byte(secretMarker)) {
			for _, s := range run.spans {
				for k, v := range s.attrs {
					if strings.Contains(prototext.Format(v), secretMarker) {
						t.Errorf("span %q: attribute %s = %s: a response body (BR-22)", s.Name, k, prototext.Format(v))
					}
				}
				for _, e := range s.Events {
					if strings.Contains(prototext.Format(e), secretMarker) {
						t.Errorf("span %q: event %s: a response body (BR-22)", s.Name, prototext.Format(e))
					}
				}
				if strings.Contains(s.Status.GetMessage(), secretMarker) {
					t.Errorf("span %q: status %q: a response body (BR-22)", s.Name, s.Status.GetMessage())
				}
			}
			t.Fatal("a response body reached the exported traces (BR-22)")
		}
	}
	if b := fmt.Sprint(run.hist); strings.Contains(b, secretMarker) {
		t.Errorf("a response body reached the probe history (BR-22): %s", b)
	}
	if bytes.Contains(run.events, []byte(secretMarker)) {
		t.Errorf("a response body reached the events (BR-22): %s", run.events)
	}
	if strings.Contains(run.agentLogs, secretMarker) {
		t.Errorf("a response body reached the agent's logs (BR-22)")
	}
}

// TestTracesOverOTLP: with the always_on sampler, every executed probe run
// of the agent arrives at a real OTLP/gRPC collector as one span, flushed by
// the provider's Shutdown after the agent stopped: span names, the k8s.*,
// prober.* and target attributes (url.full with query values redacted),
// status codes, the resource (service.name, service.version,
// k8s.node.name); the plugin probe's RPC span is a child of the probe span,
// and the real plugin process received that span's trace context; no
// response body appears anywhere.
func TestTracesOverOTLP(t *testing.T) {
	run := runTraced(t, "always_on", "")
	spans := run.spans
	if len(spans) == 0 {
		t.Fatal("the receiver got no span")
	}

	// One span per executed run: the targets counted the runs.
	live := probeSpans(spans, "probe liveness", webPodName)
	ready := probeSpans(spans, "probe readiness", webPodName)
	startup := probeSpans(spans, "probe startup", webPodName)
	plugReady := probeSpans(spans, "probe readiness", plugPodName)
	plugLive := probeSpans(spans, "probe liveness", plugPodName)
	for _, c := range []struct {
		what  string
		spans []span
		runs  int
	}{
		{"web liveness (/ok)", live, run.tg.count("/ok")},
		{"web readiness (/fail)", ready, run.tg.count("/fail")},
		{"web startup (/redirect)", startup, run.tg.count("/redirect")},
		{"plug readiness (plugin calls)", plugReady, len(run.lines)},
	} {
		if len(c.spans) != c.runs || c.runs == 0 {
			t.Errorf("%s: %d spans for %d executed runs, want one span per run", c.what, len(c.spans), c.runs)
		}
	}
	if len(plugLive) == 0 {
		t.Error("no span of the errored plugin liveness probe")
	}

	port := int64(run.tg.port)
	common := func(container, typ, handler string) map[string]string {
		return map[string]string{"k8s.namespace.name": tracedNS, "k8s.container.name": container,
			"prober.type": typ, "prober.handler": handler, "server.address": "127.0.0.1"}
	}
	for _, s := range append(append(append([]span{}, live...), ready...), startup...) {
		want := common("app", s.str("prober.type"), "http")
		want["k8s.pod.name"] = webPodName
		want["k8s.pod.uid"] = webPodUID
		want["url.scheme"] = "http"
		want["http.request.method"] = "GET"
		wantAttrs(t, s, want, map[string]int64{"server.port": port, "prober.attempt": 1})
	}
	for _, s := range live {
		wantAttrs(t, s, map[string]string{
			"url.full":      fmt.Sprintf("http://127.0.0.1:%d/ok?token=REDACTED&user=REDACTED", port),
			"prober.result": "success", "prober.cached_result": "Success",
		}, map[string]int64{"http.response.status_code": 200})
		// Liveness starts as Success: a successful run changes nothing.
		if changed, ok := s.boolean("prober.changed"); !ok || changed {
			t.Errorf("liveness span: prober.changed = %v (present %v), want false", changed, ok)
		}
		if applied, ok := s.boolean("prober.applied"); !ok || !applied {
			t.Errorf("liveness span: prober.applied = %v (present %v), want true", applied, ok)
		}
		if s.Kind != tracepb.Span_SPAN_KIND_INTERNAL || s.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR {
			t.Errorf("liveness span: kind %v status %v, want internal and not an error", s.Kind, s.Status)
		}
	}
	for _, s := range ready {
		wantAttrs(t, s, map[string]string{
			"url.full":      fmt.Sprintf("http://127.0.0.1:%d/fail", port),
			"prober.result": "failure", "prober.cached_result": "Failure",
		}, map[string]int64{"http.response.status_code": 500})
		if s.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || s.Status.GetMessage() != "probe failure" {
			t.Errorf("readiness span status %v, want Error \"probe failure\"", s.Status)
		}
	}
	for _, s := range startup {
		wantAttrs(t, s, map[string]string{"prober.result": "warning", "prober.cached_result": "Success"},
			map[string]int64{"http.response.status_code": 302})
		if changed, _ := s.boolean("prober.changed"); !changed {
			t.Error("the startup span that started the container: prober.changed = false, want true")
		}
	}
	for _, s := range plugReady {
		want := common("side", "readiness", "test")
		want["k8s.pod.name"] = plugPodName
		want["k8s.pod.uid"] = plugPodUID
		want["prober.result"] = "success"
		wantAttrs(t, s, want, map[string]int64{"server.port": port})
	}
	for _, s := range plugLive {
		wantAttrs(t, s, map[string]string{"prober.result": "errored", "prober.handler": "test"}, map[string]int64{"prober.attempt": 3})
		if s.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || !strings.Contains(s.Status.GetMessage(), "handler error on purpose") {
			t.Errorf("errored span status %v, want Error with the plugin's error", s.Status)
		}
		if len(s.Events) == 0 || s.Events[0].Name != "exception" {
			t.Errorf("errored span events %v, want the recorded error", s.Events)
		}
	}
	// The emitter, on every probe span.
	for _, s := range spans {
		if !strings.HasPrefix(s.Name, "probe ") {
			continue
		}
		for k, want := range map[string]string{"service.name": "probed", "service.version": serviceVer, "k8s.node.name": nodeName} {
			if got := s.resource[k].GetStringValue(); got != want {
				t.Fatalf("resource %s = %q, want %q", k, got, want)
			}
		}
		if _, ok := s.attrs["k8s.node.name"]; ok {
			t.Errorf("span %q carries k8s.node.name; it belongs to the resource", s.Name)
		}
	}

	// Across the plugin process: each call the plugin received carried the
	// trace context of the host's RPC client span, a child of the probe
	// span.
	byID := map[string]span{}
	for _, s := range spans {
		byID[s.spanID()] = s
	}
	rpcChildren := map[string]int{}
	for _, s := range spans {
		if s.Name == pluginRPCSpan && s.Kind == tracepb.Span_SPAN_KIND_CLIENT {
			rpcChildren[s.parentID()]++
		}
	}
	for _, l := range run.lines {
		rpc, ok := byID[l.spanID.String()]
		if !ok {
			t.Errorf("the plugin received span %s of trace %s, which the agent did not export", l.spanID, l.traceID)
			continue
		}
		if rpc.Name != pluginRPCSpan || rpc.Kind != tracepb.Span_SPAN_KIND_CLIENT || rpc.traceID() != l.traceID.String() {
			t.Errorf("the plugin's parent span is %q (kind %v, trace %s), want the client span %q of trace %s", rpc.Name, rpc.Kind, rpc.traceID(), pluginRPCSpan, l.traceID)
			continue
		}
		probe, ok := byID[rpc.parentID()]
		if !ok || probe.Name != "probe readiness" || probe.str("k8s.pod.name") != plugPodName || probe.traceID() != l.traceID.String() {
			t.Errorf("the RPC span's parent is %q of pod %q (found %v), want the plug readiness probe span of the same trace", probe.Name, probe.str("k8s.pod.name"), ok)
		}
		if l.flags != "01" {
			t.Errorf("the plugin received trace flags %s, want 01 (sampled)", l.flags)
		}
	}
	for _, s := range plugReady {
		if rpcChildren[s.spanID()] != 1 {
			t.Errorf("plug readiness span %s has %d RPC client children, want 1", s.spanID(), rpcChildren[s.spanID()])
		}
	}

	checkHistory(t, run)
	checkNoSecret(t, run)
}

// checkHistory: the probe history API gives the kubelet's messages, never a
// body.
func checkHistory(t *testing.T, run tracedRun) {
	t.Helper()
	r := probeHistory(run.hist, "app", "readiness")
	if r == nil || r.LastFailure == nil || r.LastFailure.Message != "HTTP probe failed with statuscode: 500" || r.LastFailure.Result != "failure" {
		t.Errorf("readiness history %+v, want last failure \"HTTP probe failed with statuscode: 500\"", r)
	}
	s := probeHistory(run.hist, "app", "startup")
	if s == nil || len(s.Results) != 1 || s.Results[0].Result != "warning" || s.Results[0].Message != "Probe terminated redirects" {
		t.Errorf("startup history %+v, want one warning \"Probe terminated redirects\"", s)
	}
}

// TestDefaultSamplerOverOTLP: with the default sampler (probed_default) at
// ratio 0, every probe span is recorded but only those of runs that failed,
// errored or changed the cached result are exported: all the failing
// readiness runs, all the errored runs, the startup run that started the
// container and the plugin readiness run that made it ready; the unchanged
// successful liveness runs are dropped, and so are the later successful
// plugin runs. The plugin still received a sampled trace context.
func TestDefaultSamplerOverOTLP(t *testing.T) {
	run := runTraced(t, "", "0")
	spans := run.spans
	for _, s := range spans {
		if !strings.HasPrefix(s.Name, "probe ") {
			t.Errorf("exported %q: at ratio 0 only interesting probe spans are exported", s.Name)
		}
	}
	if n := len(probeSpans(spans, "probe liveness", webPodName)); n != 0 {
		t.Errorf("%d spans of the unchanged successful liveness probe (%d runs) exported, want 0", n, run.tg.count("/ok"))
	}
	if got, want := len(probeSpans(spans, "probe readiness", webPodName)), run.tg.count("/fail"); got != want || want == 0 {
		t.Errorf("%d failing readiness spans exported for %d runs, want all", got, want)
	}
	startup := probeSpans(spans, "probe startup", webPodName)
	if len(startup) != 1 || startup[0].str("prober.result") != "warning" {
		t.Errorf("startup spans %d, want the one run that started the container", len(startup))
	}
	errored := probeSpans(spans, "probe liveness", plugPodName)
	if len(errored) == 0 {
		t.Error("no span of the errored plugin liveness runs exported")
	}
	for _, s := range errored {
		if s.str("prober.result") != "errored" {
			t.Errorf("plug liveness span with prober.result %q, want errored", s.str("prober.result"))
		}
	}
	plug := probeSpans(spans, "probe readiness", plugPodName)
	if len(plug) != 1 || len(run.lines) < 3 {
		t.Fatalf("%d plug readiness spans exported for %d runs, want only the one that changed the result", len(plug), len(run.lines))
	}
	if changed, _ := plug[0].boolean("prober.changed"); !changed || plug[0].str("prober.result") != "success" {
		t.Errorf("the exported plug readiness span: changed %v result %q, want the successful run that changed the result", changed, plug[0].str("prober.result"))
	}
	seen := false
	for _, l := range run.lines {
		if l.flags != "01" {
			t.Errorf("the plugin received trace flags %s, want 01: probed_default records every probe span", l.flags)
		}
		seen = seen || l.traceID.String() == plug[0].traceID()
	}
	if !seen {
		t.Errorf("the plugin never received the trace %s of the exported plug readiness span", plug[0].traceID())
	}
	for _, s := range spans {
		if s.resource["service.name"].GetStringValue() != "probed" || s.resource["k8s.node.name"].GetStringValue() != nodeName {
			t.Fatalf("resource %v, want service.name=probed and k8s.node.name=%s", s.resource, nodeName)
		}
	}
	checkNoSecret(t, run)
}
