package manager

import (
	"context"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

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
	attrStatusCode    = attribute.Key("http.response.status_code")
	attrExitCode      = attribute.Key("process.exit.code")
)

// startSpan starts the span of one executed probe. With tracing off (the
// default no-op provider) it costs one interface call.
func (m *manager) startSpan(ctx context.Context, w *worker) (context.Context, trace.Span) {
	return m.tracer.Start(ctx, spanNames[w.key.probeType],
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(
			attrPodUID.String(string(w.pod.UID)),
			attrPodName.String(w.pod.Name),
			attrNamespace.String(w.pod.Namespace),
			attrContainerName.String(w.container.Name),
			attrProbeType.String(w.key.probeType.Lower()),
			attrHandler.String(w.prepared.Spec.Kind),
		))
}

// endSpan records the verdict on the span and ends it; it runs after the
// result has been applied to the results manager. No output or body is put
// on the span (BR-22): only the verdict, codes and the error text.
func endSpan(span trace.Span, w *worker, rep runtime.Report, cached results.Result, applied bool) {
	if !span.IsRecording() {
		span.End()
		return
	}
	attrs := []attribute.KeyValue{
		attrAttempt.Int(rep.Attempts),
		attrApplied.Bool(applied),
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
	switch w.prepared.Spec.Kind {
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
