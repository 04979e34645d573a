// Package runtime runs one probe: it owns the handler registry, the bounded
// goroutine pools the probes run on, the per-attempt deadline (spec P3) on
// the injected clock (WithTimeout, the one place it is made), the retry
// loop (P2), the rule that an attempt the prober could not make for lack of
// its own resources is errored, not a Failure (ClassifyAttempt), the
// redaction of each run's report (runtime/redact), an annotation probe's
// latency and certificate checks (runtime/expect), and the mapping of
// handler results to a run's report (P5, P6).
//
// Handlers (built-in or plugin clients) implement Handler. The runtime knows
// nothing about workers, thresholds, events or pods beyond the identity it
// passes to handlers: the worker applies the thresholds (package manager),
// and the events of a run are recorded from its record by an observer
// (manager.ProbeEvents).
package runtime

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/probed/probed/runtime/expect"
	"github.com/probed/probed/runtime/tenant"
)

// ProbeType is the kind of probe a worker runs. The values and strings follow
// the kubelet's probeType enum (spec §2): liveness=0, readiness=1, startup=2.
type ProbeType uint8

const (
	Liveness ProbeType = iota
	Readiness
	Startup
)

// String returns "Liveness", "Readiness" or "Startup" (anything else "UNKNOWN"),
// the label values of prober_probe_total (X1) and the prefix of event messages (K4).
func (t ProbeType) String() string {
	switch t {
	case Liveness:
		return "Liveness"
	case Readiness:
		return "Readiness"
	case Startup:
		return "Startup"
	}
	return "UNKNOWN"
}

// Lower returns the lower-case name ("liveness", ...) used in span names and
// the custom-probe annotation.
func (t ProbeType) Lower() string {
	switch t {
	case Liveness:
		return "liveness"
	case Readiness:
		return "readiness"
	case Startup:
		return "startup"
	}
	return "unknown"
}

// ProbeOf returns the container's probe of type t (livenessProbe,
// readinessProbe or startupProbe), nil when it has none or t is unknown.
// The one mapping from a probe type to the container spec's field.
func ProbeOf(c *v1.Container, t ProbeType) *v1.Probe {
	switch t {
	case Liveness:
		return c.LivenessProbe
	case Readiness:
		return c.ReadinessProbe
	case Startup:
		return c.StartupProbe
	}
	return nil
}

// SetProbe sets the container's probe of type t (nil removes it); an
// unknown t changes nothing. ProbeOf's counterpart, for the offload
// webhook's move of a probe out of the spec and back.
func SetProbe(c *v1.Container, t ProbeType, p *v1.Probe) {
	switch t {
	case Liveness:
		c.LivenessProbe = p
	case Readiness:
		c.ReadinessProbe = p
	case Startup:
		c.StartupProbe = p
	}
}

// Origin is where a probe was declared (manager/podprobes works it out
// once per pod and spec change). Status views, events and logs show it;
// the zero value is unknown (a Spec built without one).
type Origin uint8

const (
	// OriginSpec: the container's own livenessProbe, readinessProbe or
	// startupProbe.
	OriginSpec Origin = iota + 1
	// OriginAnnotation: an element of the pod's probed.io/probes
	// annotation.
	OriginAnnotation
	// OriginOffloaded: a container's own probe that the offload webhook
	// moved out of the spec into probed's care, read from the pod's
	// probed.io/offloaded record. It has a spec probe's meaning (the
	// kubelet's semantics and Event texts: Spec.Extension is nil).
	OriginOffloaded
)

// String returns "spec", "annotation" or "offloaded" ("" for an unknown
// origin): the value of the origin fields of the agent's API, `probed
// status` and its events.
func (o Origin) String() string {
	switch o {
	case OriginSpec:
		return "spec"
	case OriginAnnotation:
		return "annotation"
	case OriginOffloaded:
		return "offloaded"
	}
	return ""
}

// IsRestartable reports whether the container's own restartPolicy is
// Always: for a container listed in spec.initContainers, that makes it a
// restartable init container (a sidecar), the only init container that may
// have probes (spec W7, upstream podutil.IsRestartableInitContainer).
func IsRestartable(c *v1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways
}

// ParseProbeType accepts "liveness", "readiness" or "startup" in any case.
func ParseProbeType(s string) (ProbeType, error) {
	switch s {
	case "liveness", "Liveness", "LIVENESS":
		return Liveness, nil
	case "readiness", "Readiness", "READINESS":
		return Readiness, nil
	case "startup", "Startup", "STARTUP":
		return Startup, nil
	}
	return 0, fmt.Errorf("unknown probe type %q (want liveness, readiness or startup)", s)
}

// Result is a handler's verdict, the kubelet's pkg/probe Result. The worker
// maps it to a results.Result (spec P6): Success and Warning count as success,
// Failure and Unknown as failure.
type Result uint8

const (
	Unknown Result = iota
	Success
	Warning
	Failure
)

// String returns the lower-case verdict ("success", "warning", "failure",
// "unknown") as upstream's probe.Result strings do; it appears in P5 event
// messages ("... resulted in unknown state").
func (r Result) String() string {
	switch r {
	case Success:
		return "success"
	case Warning:
		return "warning"
	case Failure:
		return "failure"
	}
	return "unknown"
}

// Outcome is what a handler reports for one attempt.
type Outcome struct {
	Result Result
	// Output is the handler's message: the kubelet's probe output (for HTTP
	// the body on success, capped at 10 KiB; for failures a fixed text).
	// It goes into events (K4) exactly as upstream, and is never logged,
	// exported as a metric label or put on a span (BR-22).
	Output string
	// StatusCode is the HTTP status code, or the gRPC health serving status;
	// 0 when the handler has none.
	StatusCode int
	// ExitCode is the exit code of an exec probe; -1 when the command did
	// not exit by itself (timeout, not started). Meaningless for other kinds.
	ExitCode int
	// Details are plugin-provided key/value details (probeplugin.v1
	// ProbeResponse.details); nil for built-in handlers.
	Details map[string]string
	// NotAfter is when the certificate the target presented expires: the
	// leaf of an HTTPS response, or of a tcpSocket probe's TLS handshake
	// when its expect asks for one (runtime/expect). Zero: no certificate.
	// The runtime checks it against expect.certificateExpiresAfterDays.
	NotAfter time.Time
	// Cause is the Go error behind a Failure (the dial or request error
	// whose text is Output), nil when there is none. The runtime reads it
	// only to tell a target's failure from an attempt the prober could not
	// make for lack of its own resources (ClassifyAttempt); it is never
	// shown, and it does not cross the plugin protocol.
	Cause error
}

// Built-in handler kinds. A probe's kind is chosen in the kubelet's order
// (spec P4): exec, then httpGet, then tcpSocket, then grpc.
const (
	KindExec = "exec"
	KindHTTP = "http"
	KindTCP  = "tcp"
	KindGRPC = "grpc"
)

// BuiltinKinds returns the built-in kinds in the kubelet's selection order
// (P4): exec, http, tcp, grpc. The one list of them: the handlers'
// constructors (plugins/handlers), the plugin host (a plugin may not serve
// them) and the custom-probe annotation (no plugin of their name) all read
// it.
func BuiltinKinds() []string { return []string{KindExec, KindHTTP, KindTCP, KindGRPC} }

// IsBuiltinKind reports whether kind is one of BuiltinKinds.
func IsBuiltinKind(kind string) bool {
	switch kind {
	case KindExec, KindHTTP, KindTCP, KindGRPC:
		return true
	}
	return false
}

// KindOf returns the built-in kind of a v1.Probe's handler in the kubelet's
// selection order (P4), or "" when it has none.
func KindOf(p *v1.Probe) string {
	switch {
	case p == nil:
		return ""
	case p.Exec != nil:
		return KindExec
	case p.HTTPGet != nil:
		return KindHTTP
	case p.TCPSocket != nil:
		return KindTCP
	case p.GRPC != nil:
		return KindGRPC
	}
	return ""
}

// PluginAction is the handler of a custom probe kind served by a plugin
// (the `plugin:` field of the probed.io/probes annotation).
type PluginAction struct {
	// Name is the probe kind the plugin serves, e.g. "http-match".
	Name string `json:"name"`
	// Port is resolved like an httpGet port (spec 1.4): a number or the name
	// of one of the container's ports. Zero means the kind needs no port.
	Port intstr.IntOrString `json:"port,omitempty"`
	// Params are the kind's parameters, passed to the plugin verbatim.
	Params map[string]string `json:"params,omitempty"`
}

// Spec is everything a handler needs to prepare the probe of one container.
// It is built once per worker and never mutated afterwards.
type Spec struct {
	// Kind selects the handler: a built-in kind or a plugin kind.
	Kind      string
	ProbeType ProbeType
	// Origin is where the probe was declared: the container's spec or the
	// probed.io/probes annotation (events and status views say it).
	Origin Origin
	// Pod is the pod snapshot the worker was created from; handlers read its
	// identity (UID, namespace, name) only.
	Pod *v1.Pod
	// Container is the probed container's spec: named ports (spec 1.4) and,
	// for exec, the env used for $(VAR) expansion (E1).
	Container *v1.Container
	// Probe carries the built-in handler (Exec, HTTPGet, TCPSocket, GRPC) and
	// the timing fields. For plugin kinds only the timing fields are set.
	Probe *v1.Probe
	// Plugin is set for plugin kinds.
	Plugin *PluginAction
	// Milliseconds, when set, are the millisecond offsets of an annotation
	// probe's timing fields (sub-second periods, timeouts and initial
	// delays); nil for spec probes. Read the timing through Timing.
	Milliseconds *Milliseconds
	// Extension is set for every annotation probe (periods by state,
	// expectations), nil for spec probes.
	Extension *Extension
}

// Timing is the probe's period, timeout and initial delay as durations,
// and its periods by state: TimingOf(s.Probe, s.Milliseconds) with the
// extension's StatePeriods.
func (s *Spec) Timing() Timing {
	t := TimingOf(s.Probe, s.Milliseconds)
	if s.Extension != nil {
		t = t.WithPeriods(&s.Extension.Periods)
	}
	return t
}

// Extension is what an annotation probe (probed.io/probes) has beyond
// v1.Probe and its millisecond offsets: periods by state and
// checks on the target's answer. Every annotation probe has one, spec
// probes none.
type Extension struct {
	// Periods are the periods by state (zero: the probe's period always).
	Periods StatePeriods
	// Expect is what the httpGet or tcpSocket handler expects of the
	// answer (runtime/expect); nil: the kubelet's verdict alone.
	Expect *expect.Expect
	// KeepAlive is httpGet.keepAlive: nil, the handler's default (off
	// unless the node turns it on); true, the probe keeps its connection
	// between runs (plugins/http); false, a new connection every run, the
	// kubelet's way, whatever the node's default.
	KeepAlive *bool
}

// KeepAliveOf returns spec's httpGet.keepAlive: nil for a spec probe or
// none.
func KeepAliveOf(spec *Spec) *bool {
	if spec == nil || spec.Extension == nil {
		return nil
	}
	return spec.Extension.KeepAlive
}

// ExpectOf returns spec's Expect, nil for a spec probe or none.
func ExpectOf(spec *Spec) *expect.Expect {
	if spec == nil || spec.Extension == nil {
		return nil
	}
	return spec.Extension.Expect
}

// Timeout is the probe's timeout as a duration (spec P3): timeoutSeconds
// plus timeoutMilliseconds for an annotation probe; a non-positive value
// counts as the API default of 1 s (TimingOf).
func (s *Spec) Timeout() time.Duration { return s.Timing().Timeout }

// Target is what changes from run to run of a prepared probe.
type Target struct {
	// PodIP is the pod's primary IP from the cached status (spec P7).
	PodIP string
	// PodIPs are all of the pod's IPs (status.podIPs: both families of a
	// dual-stack pod), read only by the runtime's egress policy
	// (Options.Egress: in cluster mode a probe connects only to these and
	// the operator's ranges). Handlers dial PodIP.
	PodIPs []v1.PodIP
	// ContainerID is the runtime ID of the running container
	// ("containerd://abc"), used by exec runners.
	ContainerID string
	// Attempt counts the tries within one run, from 1 (spec P2).
	Attempt int
}

// Handler prepares probes of one or more kinds. Built-in handlers and the
// go-plugin client implement it alike, so the runtime never cares which one
// it calls.
type Handler interface {
	// Prepare checks the spec and returns a Prober bound to it. Prepare is
	// called once per worker; an error makes every run of that probe errored
	// (spec P5): the error text names what is wrong (e.g. `port "metrcis"
	// not found`).
	Prepare(spec *Spec) (Prober, error)
}

// Prober runs one prepared probe.
type Prober interface {
	// Probe makes one attempt. ctx carries the deadline of the probe's
	// timeout (P3), made by WithTimeout on the runtime's clock: when
	// OnInjectedClock(ctx) is true, ctx reports no Deadline and ends with
	// context.DeadlineExceeded when that clock passes it, and Probe must
	// set no real-time timer of its own. A non-nil error means the probe could not be carried out
	// (errored: retried per P2, then discarded by the worker per W5.10); a
	// verdict about the target, including a timeout, is an Outcome with a nil
	// error.
	Probe(ctx context.Context, t Target) (Outcome, error)
}

// Releaser is implemented by probers that hold something between runs (an
// HTTP probe's kept-alive connection, plugins/http): Release frees it when
// the probe is removed. The owner calls it once, after the probe's last
// run has ended (Prepared.Release); Probe is not called afterwards.
type Releaser interface {
	Release()
}

// TraceCarrier is implemented by probers that carry the run's trace context
// out of the process, as a plugin call does (its spans must be children of
// the probe's span). The manager starts the span of such a probe before the
// run; the span of any other probe is created when the run has ended, with
// the run's start time, so that a sampler sees the result and can drop an
// unremarkable run before anything is recorded.
type TraceCarrier interface {
	// CarriesTrace reports whether Probe sends ctx's span context on.
	CarriesTrace() bool
}

// ProberFunc adapts a function to Prober.
type ProberFunc func(ctx context.Context, t Target) (Outcome, error)

// Probe calls f.
func (f ProberFunc) Probe(ctx context.Context, t Target) (Outcome, error) { return f(ctx, t) }

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(spec *Spec) (Prober, error)

// Prepare calls f.
func (f HandlerFunc) Prepare(spec *Spec) (Prober, error) { return f(spec) }

// KubeProbeUserAgent is the User-Agent sent by HTTP and gRPC probes when the
// probe does not set one (spec H2, G1): probed follows Kubernetes 1.37.
const KubeProbeUserAgent = "kube-probe/1.37"

// MaxOutputBytes is the most output a handler keeps: 10 KiB, the kubelet's
// limit for HTTP bodies and exec output (H6, E2; tenant.OutputBytes).
const MaxOutputBytes = tenant.OutputBytes

// MaxResponseHeaderBytes caps the response header bytes an HTTP handler
// reads (net/http Transport.MaxResponseHeaderBytes): 64 KiB
// (tenant.ResponseHeaderBytes, which says why). A response whose headers
// are longer fails the attempt with Go's error, as the kubelet's does past
// its limit: `Get "<url>": net/http: server response headers exceeded
// 65536 bytes; aborted`.
const MaxResponseHeaderBytes = tenant.ResponseHeaderBytes
