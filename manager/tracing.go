package manager

import (
	"context"
	"net"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/probed/probed/manager/results"
	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/bound"
	"github.com/probed/probed/runtime/redact"
)

// Span names are low-cardinality: "probe liveness", "probe readiness",
// "probe startup".
var spanNames = [3]string{"probe liveness", "probe readiness", "probe startup"}

// Attribute keys: k8s.* are OpenTelemetry semantic conventions; prober.* are
// probed's own namespace.
const (
	attrPodUID        = attribute.Key("k8s.pod.uid")
	attrPodName       = attribute.Key("k8s.pod.name")
	attrNamespace     = attribute.Key("k8s.namespace.name")
	attrContainerName = attribute.Key("k8s.container.name")
	attrProbeType     = attribute.Key("prober.type")
	attrHandler       = attribute.Key("prober.handler")
	attrResult        = attribute.Key("prober.result")
	attrCached        = attribute.Key("prober.cached_result")
	attrAttempt       = attribute.Key("prober.attempt")
	attrApplied       = attribute.Key("prober.applied")
	attrChanged       = attribute.Key("prober.changed")
	attrStatusCode    = attribute.Key("http.response.status_code")
	attrExitCode      = attribute.Key("process.exit.code")
)

// probeSpan is the span of one executed run. A prober that carries the
// trace context out of the process (runtime.TraceCarrier: plugins) gets its
// span before the run, so the plugin's spans are its children. Any other
// run's span is deferred: created when the run has ended, with the run's
// start time and its result and changed attributes given at start, so that
// the sampler decides with the verdict in hand and an unremarkable run that
// it drops costs one sampling decision, not a recorded span (issue #6:
// the default sampler's cost).
type probeSpan struct {
	span     trace.Span // nil: tracing off, or deferred
	deferred bool
	start    time.Time
	podIP    string
}

// startSpan starts the span of one executed probe, or defers it. With the
// no-op provider given explicitly, or the global provider never set, it
// does nothing; attributes are built only when the span records.
func (m *manager) startSpan(ctx context.Context, w *worker, podIP string) (context.Context, probeSpan) {
	if m.tracer == nil || (m.unsetTP != nil && otel.GetTracerProvider() == m.unsetTP) {
		return ctx, probeSpan{}
	}
	if !w.prepared.CarriesTrace() {
		return ctx, probeSpan{deferred: true, start: m.clock.Now(), podIP: podIP}
	}
	var span trace.Span
	if m.realClock {
		ctx, span = m.tracer.Start(ctx, spanNames[w.rs.ProbeType], spanKindInternal)
	} else {
		ctx, span = m.tracer.Start(ctx, spanNames[w.rs.ProbeType], spanKindInternal, trace.WithTimestamp(m.clock.Now()))
	}
	if span.IsRecording() {
		setRunAttributes(span, w, podIP)
	}
	return ctx, probeSpan{span: span}
}

// end records the verdict and ends the span, creating it first if it was
// deferred; see endSpan.
func (m *manager) endSpan(ctx context.Context, ps *probeSpan, w *worker, rep runtime.Report, cached results.Result, applied, changed bool) {
	span := ps.span
	if ps.deferred {
		_, span = m.tracer.Start(ctx, spanNames[w.rs.ProbeType], spanKindInternal, trace.WithTimestamp(ps.start), verdictOption(rep, changed))
		if span.IsRecording() {
			setRunAttributes(span, w, ps.podIP)
		}
	}
	if span != nil {
		endSpan(span, w, rep, cached, applied, changed, ps.deferred, m.spanEnd())
	}
}

// spanEnd returns the options that end a span at the manager's clock: none
// for the real clock (the SDK reads it itself, and an option is an
// allocation), the clock's now otherwise, so spans are timed on the same
// clock as the runs and their metrics (DESIGN: all timing goes through
// Options.Clock).
func (m *manager) spanEnd() []trace.SpanEndOption {
	if m.realClock {
		return nil
	}
	return []trace.SpanEndOption{trace.WithTimestamp(m.clock.Now())}
}

// setRunAttributes puts the pod, container, probe and target attributes on
// a recording span.
func setRunAttributes(span trace.Span, w *worker, podIP string) {
	span.SetAttributes(
		attrPodUID.String(string(w.rs.Pod.UID)),
		attrPodName.String(w.rs.Pod.Name),
		attrNamespace.String(w.rs.Pod.Namespace),
		attrContainerName.String(w.rs.Container.Name),
		attrProbeType.String(w.rs.ProbeType.Lower()),
		attrHandler.String(w.rs.Kind),
	)
	span.SetAttributes(targetAttributes(&w.rs, podIP)...)
}

// spanKindInternal is built once: an option boxed per run is an allocation.
var spanKindInternal = trace.WithSpanKind(trace.SpanKindInternal)

// numVerdicts is the number of runtime.Result values (Unknown … Failure).
const numVerdicts = int(runtime.Failure) + 1

// verdictOptions are the start attributes of a deferred span, by
// runtime.Result (and a last row for errored) and changed, built once.
var verdictOptions = func() (o [numVerdicts + 1][2]trace.SpanStartEventOption) {
	for r := range o {
		res := "errored"
		if r < numVerdicts {
			res = runtime.Result(r).String()
		}
		for c := range o[r] {
			o[r][c] = trace.WithAttributes(attrResult.String(res), attrChanged.Bool(c == 1))
		}
	}
	return o
}()

// verdictOption returns the start attributes of a run's deferred span: the
// same prober.result as resultAttribute, and prober.changed.
func verdictOption(rep runtime.Report, changed bool) trace.SpanStartEventOption {
	r := numVerdicts // errored
	if rep.Err == nil {
		if r = int(rep.Outcome.Result); r >= numVerdicts {
			r = int(runtime.Unknown) // String() says "unknown" for any other value
		}
	}
	c := 0
	if changed {
		c = 1
	}
	return verdictOptions[r][c]
}

// resultAttribute is prober.result of a run: the handler's verdict, or
// "errored" when every attempt errored.
func resultAttribute(rep runtime.Report) attribute.KeyValue {
	if rep.Err != nil {
		return attrResult.String("errored")
	}
	return attrResult.String(rep.Outcome.Result.String())
}

// targetAttributes describes what the probe talks to, by semantic
// convention: server.address/port for network probes, url.full (redacted
// by runtime/redact: every query value, credential pairs) for HTTP, rpc.*
// for gRPC, the executable (redacted too) for exec.
func targetAttributes(spec *runtime.Spec, podIP string) []attribute.KeyValue {
	p := spec.Probe
	portOf := func(v intstr.IntOrString) int {
		n, err := runtime.ResolvePort(v, spec.Container)
		if err != nil {
			return 0
		}
		return n
	}
	var out []attribute.KeyValue
	switch {
	case spec.Plugin != nil:
		out = append(out, attribute.String("server.address", podIP))
		if port := portOf(spec.Plugin.Port); port > 0 {
			out = append(out, attribute.Int("server.port", port))
		}
	case p == nil:
	case p.HTTPGet != nil:
		host := p.HTTPGet.Host
		if host == "" {
			host = podIP
		}
		port := portOf(p.HTTPGet.Port)
		scheme := strings.ToLower(string(p.HTTPGet.Scheme))
		if scheme == "" {
			scheme = "http"
		}
		full := (&url.URL{Scheme: scheme, Host: net.JoinHostPort(host, strconv.Itoa(port))}).String()
		if ref, err := url.Parse(p.HTTPGet.Path); err == nil {
			target := ref.EscapedPath()
			if ref.RawQuery != "" {
				target += "?" + ref.RawQuery
			}
			full += redact.URL(target)
		}
		full = bound.Cut(full, bound.TargetBytes) // a path is the manifest's length otherwise
		out = append(out, attribute.String("server.address", host), attribute.Int("server.port", port),
			attribute.String("url.full", full), attribute.String("url.scheme", scheme),
			attribute.String("http.request.method", "GET"))
	case p.TCPSocket != nil:
		host := p.TCPSocket.Host
		if host == "" {
			host = podIP
		}
		out = append(out, attribute.String("server.address", host), attribute.Int("server.port", portOf(p.TCPSocket.Port)),
			attribute.String("network.transport", "tcp"))
	case p.GRPC != nil:
		out = append(out, attribute.String("server.address", podIP), attribute.Int("server.port", int(p.GRPC.Port)),
			attribute.String("rpc.system", "grpc"), attribute.String("rpc.service", "grpc.health.v1.Health"),
			attribute.String("rpc.method", "Check"))
	case p.Exec != nil && len(p.Exec.Command) > 0:
		name := bound.Cut(redact.ForContainer(spec.Container, nil).Text(path.Base(p.Exec.Command[0])), bound.TargetBytes)
		out = append(out, attribute.String("process.executable.name", name))
	}
	return out
}

// endSpan records the verdict on the span and ends it; it runs after the
// result has been applied to the results manager. No output or body is put
// on the span (BR-22): only the verdict, codes and the error text.
//
// applied says whether the result reached the results manager (the
// threshold was met); changed whether that changed the cached result;
// verdictSet that prober.result and prober.changed are on the span already.
func endSpan(span trace.Span, w *worker, rep runtime.Report, cached results.Result, applied, changed, verdictSet bool, end []trace.SpanEndOption) {
	if !span.IsRecording() {
		span.End(end...)
		return
	}
	attrs := make([]attribute.KeyValue, 0, 6)
	attrs = append(attrs, attrAttempt.Int(rep.Attempts), attrApplied.Bool(applied))
	if !verdictSet { // a deferred span got them at its start
		attrs = append(attrs, attrChanged.Bool(changed), resultAttribute(rep))
	}
	if rep.Err != nil {
		span.RecordError(rep.Err)
		span.SetStatus(codes.Error, rep.Err.Error())
	} else {
		attrs = append(attrs, attrCached.String(cached.String()))
		if rep.Outcome.Result == runtime.Failure || rep.Outcome.Result == runtime.Unknown {
			span.SetStatus(codes.Error, "probe "+rep.Outcome.Result.String())
		}
	}
	switch w.rs.Kind {
	case runtime.KindHTTP:
		if rep.Outcome.StatusCode != 0 {
			attrs = append(attrs, attrStatusCode.Int(rep.Outcome.StatusCode))
		}
	case runtime.KindExec:
		if rep.Outcome.ExitCode >= 0 && rep.Err == nil {
			attrs = append(attrs, attrExitCode.Int(rep.Outcome.ExitCode))
		}
	case runtime.KindGRPC:
		if rep.Outcome.StatusCode != 0 {
			attrs = append(attrs, attribute.String("rpc.grpc.health_status", strconv.Itoa(rep.Outcome.StatusCode)))
		}
	}
	span.SetAttributes(attrs...)
	span.End(end...)
}
