package manager

import (
	"context"
	"net"
	"net/url"
	"path"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/probed/probed/manager/results"
	"github.com/probed/probed/runtime"
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

// startSpan starts the span of one executed probe. With the no-op provider
// given explicitly it does nothing; with any other provider attributes are
// built only when the span records, so tracing off costs one interface call.
func (m *manager) startSpan(ctx context.Context, w *worker, podIP string) (context.Context, trace.Span) {
	if m.tracer == nil || (m.unsetTP != nil && otel.GetTracerProvider() == m.unsetTP) {
		return ctx, noopSpan
	}
	ctx, span := m.tracer.Start(ctx, spanNames[w.rs.ProbeType], trace.WithSpanKind(trace.SpanKindInternal))
	if span.IsRecording() {
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
	return ctx, span
}

// noopSpan is the span of runs when tracing is off.
var noopSpan = trace.SpanFromContext(context.Background())

// targetAttributes describes what the probe talks to, by semantic
// convention: server.address/port for network probes, url.full (query
// values redacted) for HTTP, rpc.* for gRPC, the executable for exec.
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
		u := url.URL{Scheme: scheme, Host: net.JoinHostPort(host, strconv.Itoa(port))}
		if ref, err := url.Parse(p.HTTPGet.Path); err == nil {
			u.Path = ref.Path
			if q := ref.Query(); len(q) > 0 {
				for k := range q {
					q[k] = []string{"REDACTED"}
				}
				u.RawQuery = q.Encode()
			}
		}
		out = append(out, attribute.String("server.address", host), attribute.Int("server.port", port),
			attribute.String("url.full", u.String()), attribute.String("url.scheme", scheme),
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
		out = append(out, attribute.String("process.executable.name", path.Base(p.Exec.Command[0])))
	}
	return out
}

// endSpan records the verdict on the span and ends it; it runs after the
// result has been applied to the results manager. No output or body is put
// on the span (BR-22): only the verdict, codes and the error text.
//
// applied says whether the result reached the results manager (the
// threshold was met); changed whether that changed the cached result.
func endSpan(span trace.Span, w *worker, rep runtime.Report, cached results.Result, applied, changed bool) {
	if !span.IsRecording() {
		span.End()
		return
	}
	attrs := []attribute.KeyValue{
		attrAttempt.Int(rep.Attempts),
		attrApplied.Bool(applied),
		attrChanged.Bool(changed),
	}
	if rep.Err != nil {
		attrs = append(attrs, attrResult.String("errored"))
		span.RecordError(rep.Err)
		span.SetStatus(codes.Error, rep.Err.Error())
	} else {
		attrs = append(attrs, attrResult.String(rep.Outcome.Result.String()), attrCached.String(cached.String()))
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
	span.End()
}
