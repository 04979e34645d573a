// Package telemetry sets up the agent's OpenTelemetry tracer provider from
// the standard environment variables and the matching flags:
//
//   - OTEL_TRACES_EXPORTER (--otel-traces-exporter): none (default), console
//     (stdout) or otlp;
//   - OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
//     (--otel-endpoint) and OTEL_EXPORTER_OTLP_PROTOCOL (--otel-protocol):
//     grpc (default) or http/protobuf; the exporters read the other
//     OTEL_EXPORTER_OTLP_* variables (headers, TLS, timeouts) themselves;
//   - OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG (--otel-sampler,
//     --otel-sampler-arg): probed_default (default), always_on, always_off,
//     traceidratio, parentbased_always_on, parentbased_always_off,
//     parentbased_traceidratio;
//   - OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME, merged into a resource
//     with service.name=probed, service.version and k8s.node.name.
//
// Flags win over the environment. The default sampler, probed_default, keeps
// every span of a probe run that failed, errored or changed the cached
// result, and a ratio (OTEL_TRACES_SAMPLER_ARG, default 0.01) of the others,
// chosen by trace ID.
package telemetry

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Options select the exporter and sampler; empty fields fall back to the
// environment, then to the defaults.
type Options struct {
	Exporter   string // none, console, otlp
	Endpoint   string // OTLP endpoint: host:port (plaintext) or a URL
	Protocol   string // grpc or http/protobuf
	Sampler    string
	SamplerArg string
	// ServiceVersion and NodeName go into the resource.
	ServiceVersion string
	NodeName       string
	// Console is where the console exporter writes; default os.Stdout.
	Console io.Writer
}

// Provider is the configured tracer provider and its shutdown.
type Provider struct {
	trace.TracerProvider
	// Shutdown flushes and stops the exporter; a no-op for "none".
	Shutdown func(context.Context) error
}

// DefaultRatio is the share of unremarkable probe spans the default sampler
// keeps.
const DefaultRatio = 0.01

// Setup builds the provider, sets it and the W3C trace-context and baggage
// propagators as the globals (so trace context reaches plugins), and returns
// it. With exporter "none" it returns a no-op provider.
func Setup(ctx context.Context, opts Options) (*Provider, error) {
	pick := func(flag string, envs ...string) string {
		if flag != "" {
			return flag
		}
		for _, e := range envs {
			if v := os.Getenv(e); v != "" {
				return v
			}
		}
		return ""
	}
	exporter := strings.ToLower(pick(opts.Exporter, "OTEL_TRACES_EXPORTER"))
	protocol := strings.ToLower(pick(opts.Protocol, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"))
	endpoint := pick(opts.Endpoint)
	samplerName := strings.ToLower(pick(opts.Sampler, "OTEL_TRACES_SAMPLER"))
	samplerArg := pick(opts.SamplerArg, "OTEL_TRACES_SAMPLER_ARG")

	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	if exporter == "" || exporter == "none" {
		return &Provider{TracerProvider: noop.NewTracerProvider(), Shutdown: func(context.Context) error { return nil }}, nil
	}

	var exp sdktrace.SpanExporter
	var err error
	switch exporter {
	case "console", "stdout":
		w := opts.Console
		if w == nil {
			w = os.Stdout
		}
		exp, err = stdouttrace.New(stdouttrace.WithWriter(w), stdouttrace.WithPrettyPrint())
	case "otlp":
		exp, err = otlpExporter(ctx, protocol, endpoint)
	default:
		return nil, fmt.Errorf("traces exporter %q: want none, console or otlp", exporter)
	}
	if err != nil {
		return nil, fmt.Errorf("traces exporter %s: %w", exporter, err)
	}

	sampling, err := SamplingFor(samplerName, samplerArg, exp)
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, err
	}

	attrs := []attribute.KeyValue{attribute.String("service.name", "probed")}
	if opts.ServiceVersion != "" {
		attrs = append(attrs, attribute.String("service.version", opts.ServiceVersion))
	}
	if opts.NodeName != "" {
		attrs = append(attrs, attribute.String("k8s.node.name", opts.NodeName))
	}
	// Default (SDK, host) < our attributes < OTEL_RESOURCE_ATTRIBUTES and
	// OTEL_SERVICE_NAME from the environment.
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attrs...))
	if err == nil {
		var env *resource.Resource
		env, err = resource.New(ctx, resource.WithFromEnv())
		if err == nil {
			res, err = resource.Merge(res, env)
		}
	}
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("telemetry resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(append(sampling, sdktrace.WithResource(res))...)
	otel.SetTracerProvider(tp)
	return &Provider{TracerProvider: tp, Shutdown: tp.Shutdown}, nil
}

// SamplingFor returns the tracer-provider options of a sampler name (as in
// OTEL_TRACES_SAMPLER, "" meaning probed_default) and argument, exporting to
// exp through a batch span processor — and, for probed_default, through
// the filter that keeps failed, errored and changed probes and a ratio of
// the rest.
func SamplingFor(name, arg string, exp sdktrace.SpanExporter) ([]sdktrace.TracerProviderOption, error) {
	sampler, ratio, filter, err := buildSampler(strings.ToLower(name), arg)
	if err != nil {
		return nil, err
	}
	var proc sdktrace.SpanProcessor = sdktrace.NewBatchSpanProcessor(exp)
	if filter {
		proc = &keepInteresting{next: proc, ratio: ratio}
	}
	return []sdktrace.TracerProviderOption{sdktrace.WithSampler(sampler), sdktrace.WithSpanProcessor(proc)}, nil
}

func otlpExporter(ctx context.Context, protocol, endpoint string) (sdktrace.SpanExporter, error) {
	isURL := strings.Contains(endpoint, "://")
	switch protocol {
	case "", "grpc":
		var o []otlptracegrpc.Option
		if endpoint != "" {
			if isURL {
				o = append(o, otlptracegrpc.WithEndpointURL(endpoint))
			} else {
				o = append(o, otlptracegrpc.WithEndpoint(endpoint), otlptracegrpc.WithInsecure())
			}
		}
		return otlptracegrpc.New(ctx, o...)
	case "http/protobuf", "http":
		var o []otlptracehttp.Option
		if endpoint != "" {
			if isURL {
				o = append(o, otlptracehttp.WithEndpointURL(endpoint))
			} else {
				o = append(o, otlptracehttp.WithEndpoint(endpoint), otlptracehttp.WithInsecure())
			}
		}
		return otlptracehttp.New(ctx, o...)
	}
	return nil, fmt.Errorf("OTLP protocol %q: want grpc or http/protobuf", protocol)
}

// buildSampler maps the OTEL_TRACES_SAMPLER names; filter reports whether
// the probed_default processor-side filter applies.
func buildSampler(name, arg string) (s sdktrace.Sampler, ratio float64, filter bool, err error) {
	ratio = DefaultRatio
	if name == "" {
		name = "probed_default"
	}
	needRatio := name == "traceidratio" || name == "parentbased_traceidratio" || name == "probed_default"
	if arg != "" && needRatio {
		ratio, err = strconv.ParseFloat(arg, 64)
		// !(in range), not (out of range): NaN compares false both ways.
		if err != nil || !(ratio >= 0 && ratio <= 1) {
			return nil, 0, false, fmt.Errorf("sampler argument %q: want a ratio in [0, 1]", arg)
		}
	} else if needRatio && name != "probed_default" {
		ratio = 1
	}
	switch name {
	case "probed_default":
		return sdktrace.ParentBased(probeSampler{ratio: ratio}), ratio, true, nil
	case "always_on":
		return sdktrace.AlwaysSample(), 0, false, nil
	case "always_off":
		return sdktrace.NeverSample(), 0, false, nil
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(ratio), 0, false, nil
	case "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), 0, false, nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), 0, false, nil
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio)), 0, false, nil
	}
	return nil, 0, false, errors.New("sampler " + strconv.Quote(name) + ": want probed_default, always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio")
}

// keepInteresting is the probed_default sampler's second half: a probe span
// the sampler could not judge at its start (a plugin probe's) is exported at
// its end only if the run failed, errored or changed the cached result, or
// its trace ID falls in the ratio.
// Other spans (children such as plugin RPCs) follow the trace-ID ratio.
type keepInteresting struct {
	next  sdktrace.SpanProcessor
	ratio float64
}

func (k *keepInteresting) OnStart(ctx context.Context, s sdktrace.ReadWriteSpan) {
	k.next.OnStart(ctx, s)
}

func (k *keepInteresting) OnEnd(s sdktrace.ReadOnlySpan) {
	if k.keep(s) {
		k.next.OnEnd(s)
	}
}

func (k *keepInteresting) Shutdown(ctx context.Context) error   { return k.next.Shutdown(ctx) }
func (k *keepInteresting) ForceFlush(ctx context.Context) error { return k.next.ForceFlush(ctx) }

func (k *keepInteresting) keep(s sdktrace.ReadOnlySpan) bool {
	if strings.HasPrefix(s.Name(), "probe ") {
		for _, a := range s.Attributes() {
			switch a.Key {
			case "prober.result":
				if interestingResult(a.Value.AsString()) {
					return true
				}
			case "prober.changed":
				if a.Value.AsBool() {
					return true
				}
			}
		}
	}
	return inRatio(s.SpanContext().TraceID(), k.ratio)
}

// inRatio is the SDK's TraceIDRatioBased decision: ratio 1 keeps every
// trace, and the bound is compared as an integer (as a float64, the trace
// IDs near the top of the range rounded up to 2^63 and were dropped).
func inRatio(id trace.TraceID, ratio float64) bool {
	if ratio >= 1 {
		return true
	}
	x := binary.BigEndian.Uint64(id[8:16]) >> 1
	return x < uint64(ratio*(1<<63))
}

// interestingResult reports whether a prober.result value is one the
// default sampler always keeps.
func interestingResult(v string) bool {
	return v == "failure" || v == "unknown" || v == "errored"
}

// probeSampler is the probed_default sampler's first half, for root spans
// (ParentBased handles children). The manager creates the span of an
// in-process probe when the run has ended, with prober.result and
// prober.changed among its start attributes: it is kept when the run
// failed, errored or changed the cached result, or its trace ID falls in
// the ratio, and otherwise dropped before anything is recorded — which
// makes the default sampler cheap. The span of a plugin probe starts before
// its run (its plugin's spans are children) without a verdict: it is
// recorded, and keepInteresting decides at its end. Other root spans follow
// the ratio.
type probeSampler struct{ ratio float64 }

func (s probeSampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	keep := sdktrace.SamplingResult{Decision: sdktrace.RecordAndSample}
	if strings.HasPrefix(p.Name, "probe ") {
		judged := false
		for _, a := range p.Attributes {
			switch a.Key {
			case "prober.result":
				judged = true
				if interestingResult(a.Value.AsString()) {
					return keep
				}
			case "prober.changed":
				if a.Value.AsBool() {
					return keep
				}
			}
		}
		if !judged {
			return keep
		}
	}
	if inRatio(p.TraceID, s.ratio) {
		return keep
	}
	return sdktrace.SamplingResult{Decision: sdktrace.Drop}
}

func (s probeSampler) Description() string {
	return "ProbedDefault{ratio=" + strconv.FormatFloat(s.ratio, 'g', -1, 64) + "}"
}
