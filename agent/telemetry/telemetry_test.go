package telemetry

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/goleak"

	"github.com/probed/probed/internal/testlog"
)

func TestMain(m *testing.M) {
	// Hermetic: no OTEL_* setting of the environment applies.
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "OTEL_") {
			os.Unsetenv(k)
		}
	}
	goleak.VerifyTestMain(m, goleak.IgnoreCurrent())
}

// setup calls Setup and registers the provider's Shutdown.
func setup(t *testing.T, opts Options) (*Provider, error) {
	t.Helper()
	p, err := Setup(context.Background(), opts)
	if err == nil {
		t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	}
	return p, err
}

func mustSetup(t *testing.T, opts Options) *Provider {
	t.Helper()
	p, err := setup(t, opts)
	if err != nil {
		t.Fatalf("Setup(%+v): %v", opts, err)
	}
	return p
}

// record starts and ends a span named name with attrs and reports whether
// it was recording.
func record(p trace.TracerProvider, name string, attrs ...attribute.KeyValue) bool {
	_, s := p.Tracer("test").Start(context.Background(), name, trace.WithAttributes(attrs...))
	rec := s.IsRecording()
	s.End()
	return rec
}

// TestSetupNoneIsNoop: without an exporter (none, or nothing configured)
// the provider is the no-op one, its Shutdown does nothing, and the W3C
// propagators are installed all the same.
func TestSetupNoneIsNoop(t *testing.T) {
	for _, exp := range []string{"", "none", "NONE"} {
		otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())
		p := mustSetup(t, Options{Exporter: exp})
		if _, ok := p.TracerProvider.(noop.TracerProvider); !ok {
			t.Errorf("exporter %q: provider %T, want the no-op provider", exp, p.TracerProvider)
		}
		if record(p, "probe liveness") {
			t.Errorf("exporter %q: a span is recording", exp)
		}
		if err := p.Shutdown(context.Background()); err != nil {
			t.Errorf("exporter %q: Shutdown: %v", exp, err)
		}
		fields := strings.Join(otel.GetTextMapPropagator().Fields(), ",")
		if !strings.Contains(fields, "traceparent") || !strings.Contains(fields, "baggage") {
			t.Errorf("exporter %q: global propagator fields %q, want W3C trace context and baggage", exp, fields)
		}
	}
}

// flush shuts the provider down (flushing it) and returns the console
// output.
func flush(t *testing.T, p *Provider, out *testlog.Buffer) string {
	t.Helper()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// otlpHTTPServer counts OTLP/HTTP trace exports by path.
type otlpHTTPServer struct {
	srv   *httptest.Server
	mu    sync.Mutex
	paths []string
}

func newOTLPHTTPServer(t *testing.T) *otlpHTTPServer {
	t.Helper()
	s := &otlpHTTPServer{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.paths = append(s.paths, r.Method+" "+r.URL.Path)
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *otlpHTTPServer) got() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.paths...)
}

func (s *otlpHTTPServer) hostPort() string { return s.srv.Listener.Addr().String() }

// TestSetupFlagsWinOverEnvironment: each setting comes from its option
// (the flag) when given, else from the OTEL_* variables, else the default.
func TestSetupFlagsWinOverEnvironment(t *testing.T) {
	t.Run("exporter from the environment", func(t *testing.T) {
		t.Setenv("OTEL_TRACES_EXPORTER", "console")
		var out testlog.Buffer
		p := mustSetup(t, Options{Console: &out, Sampler: "always_on"})
		record(p, "from-env")
		if got := flush(t, p, &out); !strings.Contains(got, `"Name": "from-env"`) {
			t.Errorf("console output %q, want the span", got)
		}
	})
	t.Run("exporter flag none wins", func(t *testing.T) {
		t.Setenv("OTEL_TRACES_EXPORTER", "console")
		p := mustSetup(t, Options{Exporter: "none"})
		if _, ok := p.TracerProvider.(noop.TracerProvider); !ok {
			t.Errorf("provider %T, want no-op: the flag wins", p.TracerProvider)
		}
	})
	t.Run("exporter flag wins over a bad environment", func(t *testing.T) {
		t.Setenv("OTEL_TRACES_EXPORTER", "zipkin")
		var out testlog.Buffer
		mustSetup(t, Options{Exporter: "console", Console: &out})
	})
	t.Run("sampler from the environment", func(t *testing.T) {
		t.Setenv("OTEL_TRACES_SAMPLER", "always_off")
		var out testlog.Buffer
		p := mustSetup(t, Options{Exporter: "console", Console: &out})
		if record(p, "s") {
			t.Error("OTEL_TRACES_SAMPLER=always_off: the span is recording")
		}
	})
	t.Run("sampler flag wins", func(t *testing.T) {
		t.Setenv("OTEL_TRACES_SAMPLER", "always_off")
		var out testlog.Buffer
		p := mustSetup(t, Options{Exporter: "console", Console: &out, Sampler: "always_on"})
		if !record(p, "s") {
			t.Error("--otel-sampler always_on over OTEL_TRACES_SAMPLER=always_off: the span is not recording")
		}
	})
	t.Run("sampler argument from the environment", func(t *testing.T) {
		t.Setenv("OTEL_TRACES_SAMPLER", "traceidratio")
		t.Setenv("OTEL_TRACES_SAMPLER_ARG", "2")
		if _, err := setup(t, Options{Exporter: "console", Console: &testlog.Buffer{}}); err == nil || !strings.Contains(err.Error(), `"2"`) {
			t.Errorf("OTEL_TRACES_SAMPLER_ARG=2: err %v, want a bad ratio", err)
		}
		mustSetup(t, Options{Exporter: "console", Console: &testlog.Buffer{}, SamplerArg: "0.5"})
	})
	t.Run("protocol from the environment", func(t *testing.T) {
		t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "thrift")
		if _, err := setup(t, Options{Exporter: "otlp", Endpoint: "127.0.0.1:1"}); err == nil || !strings.Contains(err.Error(), `OTLP protocol "thrift"`) {
			t.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=thrift: err %v, want a bad protocol", err)
		}
		mustSetup(t, Options{Exporter: "otlp", Endpoint: "127.0.0.1:1", Protocol: "grpc"})
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc")
		mustSetup(t, Options{Exporter: "otlp", Endpoint: "127.0.0.1:1"})
	})
	t.Run("endpoint from the environment", func(t *testing.T) {
		srv := newOTLPHTTPServer(t)
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.srv.URL)
		p := mustSetup(t, Options{Exporter: "otlp", Protocol: "http/protobuf", Sampler: "always_on"})
		record(p, "s")
		flush(t, p, &testlog.Buffer{})
		if got := srv.got(); len(got) != 1 || got[0] != "POST /v1/traces" {
			t.Errorf("the endpoint of OTEL_EXPORTER_OTLP_ENDPOINT got %v, want one POST /v1/traces", got)
		}
	})
	t.Run("endpoint flag wins", func(t *testing.T) {
		envSrv, flagSrv := newOTLPHTTPServer(t), newOTLPHTTPServer(t)
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", envSrv.srv.URL)
		p := mustSetup(t, Options{Exporter: "otlp", Protocol: "http/protobuf", Endpoint: flagSrv.hostPort(), Sampler: "always_on"})
		record(p, "s")
		flush(t, p, &testlog.Buffer{})
		if got := flagSrv.got(); len(got) != 1 || got[0] != "POST /v1/traces" {
			t.Errorf("the --otel-endpoint host:port got %v, want one POST /v1/traces", got)
		}
		if got := envSrv.got(); len(got) != 0 {
			t.Errorf("the environment's endpoint got %v although the flag was given", got)
		}
	})
	t.Run("endpoint flag as a URL", func(t *testing.T) {
		srv := newOTLPHTTPServer(t)
		p := mustSetup(t, Options{Exporter: "otlp", Protocol: "http/protobuf", Endpoint: srv.srv.URL + "/custom/traces", Sampler: "always_on"})
		record(p, "s")
		flush(t, p, &testlog.Buffer{})
		if got := srv.got(); len(got) != 1 || got[0] != "POST /custom/traces" {
			t.Errorf("the --otel-endpoint URL got %v, want one POST /custom/traces", got)
		}
	})
}

// resourceOf returns the resource attributes the provider puts on spans.
func resourceOf(t *testing.T, p *Provider) map[string]string {
	t.Helper()
	_, s := p.Tracer("test").Start(context.Background(), "s")
	defer s.End()
	ro, ok := s.(sdktrace.ReadOnlySpan)
	if !ok {
		t.Fatalf("span %T is not an SDK span", s)
	}
	out := map[string]string{}
	for _, kv := range ro.Resource().Attributes() {
		out[string(kv.Key)] = kv.Value.Emit()
	}
	return out
}

// TestSetupResource: the resource describes the emitter: service.name
// probed, service.version and k8s.node.name from the options, and
// OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME on top.
func TestSetupResource(t *testing.T) {
	opts := Options{Exporter: "console", Console: &testlog.Buffer{}, Sampler: "always_on", ServiceVersion: "v1.2.3", NodeName: "node-a"}
	res := resourceOf(t, mustSetup(t, opts))
	for k, want := range map[string]string{"service.name": "probed", "service.version": "v1.2.3", "k8s.node.name": "node-a"} {
		if res[k] != want {
			t.Errorf("resource %s = %q, want %q (all: %v)", k, res[k], want, res)
		}
	}
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "team=probes,k8s.cluster.name=c1")
	t.Setenv("OTEL_SERVICE_NAME", "probed-canary")
	res = resourceOf(t, mustSetup(t, opts))
	for k, want := range map[string]string{"service.name": "probed-canary", "team": "probes", "k8s.cluster.name": "c1", "k8s.node.name": "node-a"} {
		if res[k] != want {
			t.Errorf("with OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME: resource %s = %q, want %q", k, res[k], want)
		}
	}
}

// TestSetupErrors: bad exporters, protocols, samplers and ratios are
// errors that name the value.
func TestSetupErrors(t *testing.T) {
	console := &testlog.Buffer{}
	for _, c := range []struct {
		opts Options
		want string
	}{
		{Options{Exporter: "jaeger"}, `traces exporter "jaeger": want none, console or otlp`},
		{Options{Exporter: "otlp", Protocol: "thrift", Endpoint: "127.0.0.1:1"}, `OTLP protocol "thrift": want grpc or http/protobuf`},
		{Options{Exporter: "console", Console: console, Sampler: "sometimes"}, `sampler "sometimes": want probed_default`},
		{Options{Exporter: "console", Console: console, Sampler: "traceidratio", SamplerArg: "1.5"}, `sampler argument "1.5": want a ratio in [0, 1]`},
		{Options{Exporter: "console", Console: console, Sampler: "parentbased_traceidratio", SamplerArg: "-0.1"}, `sampler argument "-0.1"`},
		{Options{Exporter: "console", Console: console, SamplerArg: "abc"}, `sampler argument "abc"`},
		{Options{Exporter: "console", Console: console, SamplerArg: "NaN"}, `sampler argument "NaN"`},
		{Options{Exporter: "console", Console: console, SamplerArg: "Inf"}, `sampler argument "Inf"`},
	} {
		_, err := setup(t, c.opts)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Setup(%+v) = %v, want an error containing %q", c.opts, err, c.want)
		}
	}
	// A sampler that takes no argument ignores it.
	mustSetup(t, Options{Exporter: "console", Console: console, Sampler: "always_on", SamplerArg: "abc"})
}

// TestBuildSampler: the OTEL_TRACES_SAMPLER names map to the SDK's
// samplers; ratios default to 1 for the ratio samplers and DefaultRatio
// for probed_default, which alone adds the filter.
func TestBuildSampler(t *testing.T) {
	for _, c := range []struct {
		name, arg string
		desc      string
		ratio     float64
		filter    bool
	}{
		{"", "", "ParentBased{root:ProbedDefault{ratio=0.01},remoteParentSampled:AlwaysOnSampler,remoteParentNotSampled:AlwaysOffSampler,localParentSampled:AlwaysOnSampler,localParentNotSampled:AlwaysOffSampler}", DefaultRatio, true},
		{"probed_default", "0.25", "ParentBased{root:ProbedDefault{ratio=0.25},remoteParentSampled:AlwaysOnSampler,remoteParentNotSampled:AlwaysOffSampler,localParentSampled:AlwaysOnSampler,localParentNotSampled:AlwaysOffSampler}", 0.25, true},
		{"always_on", "", "AlwaysOnSampler", 0, false},
		{"always_off", "", "AlwaysOffSampler", 0, false},
		{"traceidratio", "", "TraceIDRatioBased{1}", 0, false},
		{"traceidratio", "0.5", "TraceIDRatioBased{0.5}", 0, false},
		{"parentbased_always_on", "", "ParentBased{root:AlwaysOnSampler,", 0, false},
		{"parentbased_always_off", "", "ParentBased{root:AlwaysOffSampler,", 0, false},
		{"parentbased_traceidratio", "0.1", "ParentBased{root:TraceIDRatioBased{0.1},", 0, false},
	} {
		s, ratio, filter, err := buildSampler(c.name, c.arg)
		if err != nil {
			t.Errorf("buildSampler(%q, %q): %v", c.name, c.arg, err)
			continue
		}
		if !strings.HasPrefix(s.Description(), c.desc) || ratio != c.ratio || filter != c.filter {
			t.Errorf("buildSampler(%q, %q) = %s, ratio %v, filter %v; want %s, %v, %v", c.name, c.arg, s.Description(), ratio, filter, c.desc, c.ratio, c.filter)
		}
	}
}

// idGen hands out the given trace IDs in turn.
type idGen struct {
	mu  sync.Mutex
	ids []trace.TraceID
	n   uint64
}

func (g *idGen) NewIDs(context.Context) (trace.TraceID, trace.SpanID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	id := g.ids[0]
	g.ids = g.ids[1:]
	g.n++
	var sid trace.SpanID
	binary.BigEndian.PutUint64(sid[:], g.n)
	return id, sid
}

func (g *idGen) NewSpanID(context.Context, trace.TraceID) trace.SpanID {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n++
	var sid trace.SpanID
	binary.BigEndian.PutUint64(sid[:], g.n)
	return sid
}

// traceID returns a trace ID whose ratio position (the low 8 bytes) is low.
func traceID(low uint64) trace.TraceID {
	var id trace.TraceID
	id[0] = 1
	binary.BigEndian.PutUint64(id[8:], low)
	return id
}

// TestKeepInteresting: the probed_default filter passes the span of a run
// that failed, was unknown or errored, or changed the cached result,
// whatever the ratio; other probe spans, and spans that are not probe
// spans whatever their attributes, pass only when their trace ID falls in
// the ratio.
func TestKeepInteresting(t *testing.T) {
	const low, high = 0, 1<<64 - 1 // trace ID positions: always in, never in (ratio < 1)
	for _, c := range []struct {
		what  string
		name  string
		attrs []attribute.KeyValue
		pos   uint64
		ratio float64
		keep  bool
	}{
		{"failure", "probe liveness", []attribute.KeyValue{attribute.String("prober.result", "failure"), attribute.Bool("prober.changed", false)}, high, 0, true},
		{"unknown", "probe readiness", []attribute.KeyValue{attribute.String("prober.result", "unknown")}, high, 0, true},
		{"errored", "probe startup", []attribute.KeyValue{attribute.String("prober.result", "errored")}, high, 0, true},
		{"changed success", "probe readiness", []attribute.KeyValue{attribute.String("prober.result", "success"), attribute.Bool("prober.changed", true)}, high, 0, true},
		{"unchanged success", "probe readiness", []attribute.KeyValue{attribute.String("prober.result", "success"), attribute.Bool("prober.changed", false)}, high, 0, false},
		{"unchanged warning", "probe liveness", []attribute.KeyValue{attribute.String("prober.result", "warning"), attribute.Bool("prober.changed", false)}, high, 0.99, false},
		{"unchanged success in the ratio", "probe liveness", []attribute.KeyValue{attribute.String("prober.result", "success"), attribute.Bool("prober.changed", false)}, low, 0.01, true},
		{"unchanged success, ratio 0", "probe liveness", []attribute.KeyValue{attribute.String("prober.result", "success")}, low, 0, false},
		{"unchanged success, ratio 1", "probe liveness", []attribute.KeyValue{attribute.String("prober.result", "success")}, high, 1, true},
		{"not a probe span", "probeplugin.v1.ProbePlugin/Probe", []attribute.KeyValue{attribute.String("prober.result", "failure"), attribute.Bool("prober.changed", true)}, high, 0, false},
		{"not a probe span in the ratio", "probeplugin.v1.ProbePlugin/Probe", nil, low, 0.5, true},
		{"a name that only starts like one", "prober liveness", []attribute.KeyValue{attribute.String("prober.result", "failure")}, high, 0, false},
	} {
		rec := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(
			sdktrace.WithSampler(sdktrace.AlwaysSample()),
			sdktrace.WithSpanProcessor(&keepInteresting{next: rec, ratio: c.ratio}),
			sdktrace.WithIDGenerator(&idGen{ids: []trace.TraceID{traceID(c.pos)}}),
		)
		// The verdict is set at the end, as endSpan does.
		_, s := tp.Tracer("test").Start(context.Background(), c.name)
		if len(rec.Started()) != 1 {
			t.Errorf("%s: OnStart not passed on", c.what)
		}
		s.SetAttributes(c.attrs...)
		s.End()
		if got := len(rec.Ended()) == 1; got != c.keep {
			t.Errorf("%s: exported %v, want %v", c.what, got, c.keep)
		}
		if err := tp.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestKeepInterestingRatioIsTraceIDRatio: for unremarkable spans the
// filter keeps exactly the trace IDs the SDK's TraceIDRatioBased sampler
// keeps at the same ratio, so both halves of a trace agree.
func TestKeepInterestingRatioIsTraceIDRatio(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, ratio := range []float64{0, 0.01, 0.3, 0.5, 0.999} {
		ids := make([]trace.TraceID, 2000)
		for i := range ids {
			binary.BigEndian.PutUint64(ids[i][:8], rng.Uint64())
			binary.BigEndian.PutUint64(ids[i][8:], rng.Uint64())
		}
		rec := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(
			sdktrace.WithSampler(sdktrace.AlwaysSample()),
			sdktrace.WithSpanProcessor(&keepInteresting{next: rec, ratio: ratio}),
			sdktrace.WithIDGenerator(&idGen{ids: append([]trace.TraceID(nil), ids...)}),
		)
		ref := sdktrace.TraceIDRatioBased(ratio)
		want := map[trace.TraceID]bool{}
		for _, id := range ids {
			want[id] = ref.ShouldSample(sdktrace.SamplingParameters{TraceID: id}).Decision == sdktrace.RecordAndSample
			_, s := tp.Tracer("test").Start(context.Background(), "probe liveness", trace.WithAttributes(attribute.String("prober.result", "success")))
			s.End()
		}
		kept := 0
		for _, s := range rec.Ended() {
			if !want[s.SpanContext().TraceID()] {
				t.Fatalf("ratio %v: kept trace %s, which TraceIDRatioBased drops", ratio, s.SpanContext().TraceID())
			}
			kept++
		}
		wantKept := 0
		for _, k := range want {
			if k {
				wantKept++
			}
		}
		if kept != wantKept {
			t.Errorf("ratio %v: kept %d spans, TraceIDRatioBased keeps %d", ratio, kept, wantKept)
		}
		_ = tp.Shutdown(context.Background())
	}
}

// TestSetupProbedDefault: the default sampler keeps the interesting probe
// spans and a ratio of the rest, in both forms the manager creates them. A
// span created after its run carries its verdict at start (in-process
// handlers): an unremarkable one is dropped before it records anything. A
// span started before its run (a plugin probe, whose trace context reaches
// the plugin) has no verdict yet: it is recorded, so the plugin's spans are
// sampled, and exported at its end only if interesting or in the ratio.
func TestSetupProbedDefault(t *testing.T) {
	for _, c := range []struct {
		arg  string
		want []string
	}{
		{"0", []string{"failing", "changed", "plugin-failing", "plugin-changed"}},
		{"1", []string{"failing", "changed", "steady", "plugin-failing", "plugin-changed", "plugin-steady"}},
	} {
		var out testlog.Buffer
		p := mustSetup(t, Options{Exporter: "console", Console: &out, SamplerArg: c.arg})
		verdicts := map[string][]attribute.KeyValue{
			"failing": {attribute.String("prober.result", "failure")},
			"changed": {attribute.String("prober.result", "success"), attribute.Bool("prober.changed", true)},
			"steady":  {attribute.String("prober.result", "success"), attribute.Bool("prober.changed", false)},
		}
		for name, attrs := range verdicts {
			attrs = append(attrs, attribute.String("test.name", name))
			wantRecording := c.arg == "1" || name != "steady"
			if got := record(p, "probe liveness", attrs...); got != wantRecording {
				t.Errorf("ratio %s: span %s (verdict at start) recording %v, want %v", c.arg, name, got, wantRecording)
			}
			// The plugin form: started bare, the verdict set at its end.
			_, s := p.Tracer("test").Start(context.Background(), "probe readiness", trace.WithAttributes(attribute.String("test.name", "plugin-"+name)))
			if !s.IsRecording() {
				t.Errorf("ratio %s: span plugin-%s (no verdict at start) not recording", c.arg, name)
			}
			s.SetAttributes(attrs[:len(attrs)-1]...)
			s.End()
		}
		got := flush(t, p, &out)
		for _, name := range []string{"failing", "changed", "steady", "plugin-failing", "plugin-changed", "plugin-steady"} {
			want := false
			for _, w := range c.want {
				want = want || w == name
			}
			if has := strings.Contains(got, `"Value": "`+name+`"`); has != want {
				t.Errorf("ratio %s: span %s exported %v, want %v", c.arg, name, has, want)
			}
		}
	}
}
