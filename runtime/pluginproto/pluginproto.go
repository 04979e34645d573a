// Package pluginproto is the shared half of probed's plugin contract: the
// go-plugin handshake, the go-plugin Plugin that carries the
// probeplugin.v1 gRPC service (generated code in probeplugin/v1), and the
// conversions between runtime types and their wire form. The host
// (runtime/pluginhost) and the plugin SDK (plugins/sdk) both import it, so
// neither imports the other.
//
// The wire contract is documented in probeplugin/v1/probeplugin.proto and,
// for plugin authors, in docs/plugins.md.
package pluginproto

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/hashicorp/go-plugin"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	pb "github.com/probed/probed/runtime/pluginproto/probeplugin/v1"

	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/egress"
	"github.com/probed/probed/runtime/expect"
)

// ProtocolVersion is the go-plugin protocol version of probeplugin.v1. A
// new major version of the proto package (probeplugin.v2) gets a new
// go-plugin version and its own VersionedPlugins entry.
const ProtocolVersion = 1

// APIVersion is the base feature level of probeplugin.v1, reported in
// GetInfoResponse.api_versions by every plugin.
const APIVersion = "v1.0"

// APIVersionEgress is the feature level of a plugin that enforces
// ProbeRequest.egress, the host's egress policy, on every connection its
// probes make (runtime/egress). In cluster mode the host runs the probes of
// a plugin without it only when the operator trusts the plugin
// (pluginhost.PluginConfig.TrustEgress).
const APIVersionEgress = "v1.1"

// PluginKey is the name of the probe plugin in go-plugin's PluginSet.
const PluginKey = "probe"

// Handshake is the go-plugin handshake both sides use. The magic cookie only
// keeps users from running a plugin binary by hand (a plugin started without
// it prints a hint and exits); it is not a security measure.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  ProtocolVersion,
	MagicCookieKey:   "PROBED_PLUGIN_MAGIC_COOKIE",
	MagicCookieValue: "4f1c7d0e-probed-probe-plugin",
}

// EnvLogLevel names the environment variable through which the host tells a
// plugin the lowest level to log at ("trace", "debug", "info", "warn",
// "error").
const EnvLogLevel = "PROBED_PLUGIN_LOG_LEVEL"

// ReservedParamPrefix starts the parameter names reserved for the host: a
// probe may not declare such a parameter.
const ReservedParamPrefix = "probed.io/"

// SpecParam is the reserved parameter that carries the container and probe
// of a built-in kind (http, tcp, exec, grpc) served out of process, as the
// JSON of BuiltinSpec.
const SpecParam = ReservedParamPrefix + "spec"

// GRPCPlugin is the go-plugin Plugin of probeplugin.v1. On the plugin side
// set Server; on the host side GRPCClient returns a *Conn.
type GRPCPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	// Impl serves the plugin's side; nil on the host.
	Impl pb.ProbePluginServer
}

var _ plugin.GRPCPlugin = (*GRPCPlugin)(nil)

// GRPCServer registers the ProbePlugin service; it fails when Impl is nil.
func (p *GRPCPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	if p.Impl == nil {
		return errors.New("pluginproto: GRPCPlugin.Impl is nil")
	}
	pb.RegisterProbePluginServer(s, p.Impl)
	return nil
}

// GRPCClient returns a *Conn on cc. go-plugin cancels ctx when the plugin
// process exits, which Conn.Done reports.
func (p *GRPCPlugin) GRPCClient(ctx context.Context, _ *plugin.GRPCBroker, cc *grpc.ClientConn) (any, error) {
	return &Conn{ProbePluginClient: pb.NewProbePluginClient(cc), Done: ctx.Done()}, nil
}

// Conn is the host's side of one running plugin process.
type Conn struct {
	pb.ProbePluginClient
	// Done is closed when the plugin process has exited.
	Done <-chan struct{}
}

// VersionedPlugins returns the go-plugin plugin sets by protocol version:
// today only ProtocolVersion with server (nil on the host).
func VersionedPlugins(server pb.ProbePluginServer) map[int]plugin.PluginSet {
	return map[int]plugin.PluginSet{
		ProtocolVersion: {PluginKey: &GRPCPlugin{Impl: server}},
	}
}

// TraceFilter selects the RPCs the otelgrpc stats handlers trace on both
// sides: the probeplugin services only, not go-plugin's own (health, stdio,
// broker, controller).
func TraceFilter() otelgrpc.Filter { return filters.ServicePrefix("probeplugin.") }

// Propagator is the propagator both sides use for the plugin RPCs (W3C
// trace context and baggage), independent of the process's global one, so
// that a plugin sees the probe's trace even when it sets up nothing.
func Propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}

// ResultToProto maps a runtime verdict to its wire value.
func ResultToProto(r runtime.Result) pb.Result {
	switch r {
	case runtime.Success:
		return pb.Result_RESULT_SUCCESS
	case runtime.Warning:
		return pb.Result_RESULT_WARNING
	case runtime.Failure:
		return pb.Result_RESULT_FAILURE
	}
	return pb.Result_RESULT_UNKNOWN
}

// ResultFromProto maps a wire verdict to the runtime's. RESULT_UNSPECIFIED
// and values outside the enum are errors: a plugin that sends them is
// misbehaving, and the run is discarded rather than counted.
func ResultFromProto(r pb.Result) (runtime.Result, error) {
	switch r {
	case pb.Result_RESULT_SUCCESS:
		return runtime.Success, nil
	case pb.Result_RESULT_WARNING:
		return runtime.Warning, nil
	case pb.Result_RESULT_FAILURE:
		return runtime.Failure, nil
	case pb.Result_RESULT_UNKNOWN:
		return runtime.Unknown, nil
	}
	return runtime.Unknown, fmt.Errorf("the plugin answered with no valid result (%v)", r)
}

// ProbeTypeToProto maps a probe type to its wire value.
func ProbeTypeToProto(t runtime.ProbeType) pb.ProbeType {
	switch t {
	case runtime.Liveness:
		return pb.ProbeType_PROBE_TYPE_LIVENESS
	case runtime.Readiness:
		return pb.ProbeType_PROBE_TYPE_READINESS
	case runtime.Startup:
		return pb.ProbeType_PROBE_TYPE_STARTUP
	}
	return pb.ProbeType_PROBE_TYPE_UNSPECIFIED
}

// ProbeTypeFromProto maps a wire probe type to the runtime's; it fails on
// PROBE_TYPE_UNSPECIFIED and unknown values.
func ProbeTypeFromProto(t pb.ProbeType) (runtime.ProbeType, error) {
	switch t {
	case pb.ProbeType_PROBE_TYPE_LIVENESS:
		return runtime.Liveness, nil
	case pb.ProbeType_PROBE_TYPE_READINESS:
		return runtime.Readiness, nil
	case pb.ProbeType_PROBE_TYPE_STARTUP:
		return runtime.Startup, nil
	}
	return 0, fmt.Errorf("unknown probe type %v", t)
}

// BuiltinSpec is the JSON of SpecParam: what a built-in handler reads from
// a runtime.Spec besides its identity. Container is trimmed to the fields
// the built-in handlers use (name, ports for named-port resolution, env for
// exec's $(VAR) expansion).
type BuiltinSpec struct {
	Container *v1.Container `json:"container,omitempty"`
	Probe     *v1.Probe     `json:"probe"`
	// Milliseconds are an annotation probe's timing offsets (sub-second
	// timeouts); absent for whole seconds.
	Milliseconds *runtime.Milliseconds `json:"milliseconds,omitempty"`
	// Expect is an annotation probe's httpGet.expect or tcpSocket.expect
	// (runtime/expect): the handler checks the status and
	// the body, and, for a certificate check, reports the certificate's
	// expiry back (CertificateNotAfterDetail); absent for none.
	Expect *expect.Expect `json:"expect,omitempty"`
}

// CertificateNotAfterDetail is the reserved ProbeResponse.details key by
// which a built-in handler served out of process reports when the
// certificate its target presented expires (runtime.Outcome.NotAfter,
// RFC 3339): the host checks it against certificateExpiresAfterDays.
const CertificateNotAfterDetail = ReservedParamPrefix + "certificate-not-after"

// DetailsOf returns the ProbeResponse.details of out: its Details, plus
// CertificateNotAfterDetail when out has a NotAfter.
func DetailsOf(out runtime.Outcome) map[string]string {
	if out.NotAfter.IsZero() {
		return out.Details
	}
	d := make(map[string]string, len(out.Details)+1)
	for k, v := range out.Details {
		d[k] = v
	}
	d[CertificateNotAfterDetail] = out.NotAfter.UTC().Format(time.RFC3339Nano)
	return d
}

// NotAfterOf takes CertificateNotAfterDetail out of a response's details:
// the details without it, and the time it names (zero when absent or not
// RFC 3339).
func NotAfterOf(details map[string]string) (map[string]string, time.Time) {
	v, ok := details[CertificateNotAfterDetail]
	if !ok {
		return details, time.Time{}
	}
	rest := make(map[string]string, len(details)-1)
	for k, d := range details {
		if k != CertificateNotAfterDetail {
			rest[k] = d
		}
	}
	t, _ := time.Parse(time.RFC3339Nano, v)
	return rest, t
}

// EncodeBuiltinSpec returns the SpecParam value for spec.
func EncodeBuiltinSpec(spec *runtime.Spec) (string, error) {
	b := BuiltinSpec{Probe: spec.Probe, Milliseconds: spec.Milliseconds, Expect: runtime.ExpectOf(spec)}
	if c := spec.Container; c != nil {
		b.Container = &v1.Container{Name: c.Name, Ports: c.Ports, Env: c.Env}
	}
	data, err := json.Marshal(b)
	if err != nil {
		return "", fmt.Errorf("encoding the built-in probe spec: %w", err)
	}
	return string(data), nil
}

// ProbeID is the ProbeRequest.probe_id of a spec:
// "<pod uid>/<container>/<probe type>".
func ProbeID(spec *runtime.Spec) string {
	var uid types.UID
	if spec.Pod != nil {
		uid = spec.Pod.UID
	}
	name := ""
	if spec.Container != nil {
		name = spec.Container.Name
	}
	return string(uid) + "/" + name + "/" + spec.ProbeType.Lower()
}

// SpecFromRequest rebuilds, on the plugin side, the runtime.Spec a request
// was made from:
//   - Kind, ProbeType and the pod's identity (UID, namespace, name) always;
//   - for a built-in kind (SpecParam present), Container, Probe,
//     Milliseconds and, with an expect, an Extension carrying it, from
//     SpecParam, and no Plugin;
//   - otherwise a Container with only its name, a Probe with only
//     TimeoutSeconds and Milliseconds.Timeout (from timeout, to the
//     millisecond; at least 1 ms, else 1 s), and Plugin
//     with the kind, the resolved port (0: none) and the params (without
//     reserved names).
//
// It fails on an unknown probe type or an undecodable SpecParam.
func SpecFromRequest(req *pb.ProbeRequest) (*runtime.Spec, error) {
	pt, err := ProbeTypeFromProto(req.GetProbeType())
	if err != nil {
		return nil, err
	}
	tg := req.GetTarget()
	spec := &runtime.Spec{
		Kind:      req.GetKind(),
		ProbeType: pt,
		Pod: &v1.Pod{ObjectMeta: metav1.ObjectMeta{
			UID: types.UID(tg.GetPodUid()), Namespace: tg.GetPodNamespace(), Name: tg.GetPodName()}},
	}
	if raw, ok := req.GetParams()[SpecParam]; ok {
		var b BuiltinSpec
		if err := json.Unmarshal([]byte(raw), &b); err != nil {
			return nil, fmt.Errorf("decoding %s: %w", SpecParam, err)
		}
		if b.Probe == nil {
			return nil, fmt.Errorf("%s has no probe", SpecParam)
		}
		if b.Container == nil {
			b.Container = &v1.Container{Name: tg.GetContainerName()}
		}
		spec.Container, spec.Probe, spec.Milliseconds = b.Container, b.Probe, b.Milliseconds
		if b.Expect != nil {
			spec.Extension = &runtime.Extension{Expect: b.Expect}
		}
		return spec, nil
	}
	spec.Container = &v1.Container{Name: tg.GetContainerName()}
	spec.Probe = &v1.Probe{}
	spec.Probe.TimeoutSeconds, spec.Milliseconds = splitTimeout(req.GetTimeout().AsDuration())
	params := make(map[string]string, len(req.GetParams()))
	for k, v := range req.GetParams() {
		if strings.HasPrefix(k, ReservedParamPrefix) {
			continue
		}
		params[k] = v
	}
	spec.Plugin = &runtime.PluginAction{Name: req.GetKind(), Params: params}
	if p := tg.GetPort(); p != 0 {
		spec.Plugin.Port = intstr.FromInt32(int32(p))
	}
	return spec, nil
}

// TargetFromRequest returns the runtime.Target of a request.
func TargetFromRequest(req *pb.ProbeRequest) runtime.Target {
	return runtime.Target{
		PodIP:       req.GetTarget().GetPodIp(),
		ContainerID: req.GetTarget().GetContainerId(),
		Attempt:     int(req.GetAttempt()),
	}
}

// splitTimeout expresses a timeout as timeoutSeconds plus a
// timeoutMilliseconds offset (nil when it is whole seconds): 300 ms is 1 s
// and -700 ms, 2.5 s is 2 s and 500 ms. Below 1 ms it is 1 s (the API
// default).
func splitTimeout(d time.Duration) (int32, *runtime.Milliseconds) {
	ms := d.Milliseconds()
	if ms < 1 {
		return 1, nil
	}
	secs, rest := ms/1000, ms%1000
	if secs == 0 {
		secs, rest = 1, rest-1000
	}
	if rest == 0 {
		return int32(secs), nil
	}
	return int32(secs), &runtime.Milliseconds{Timeout: int32(rest)}
}

// EgressToProto is the wire form of an attempt's egress policy
// (ProbeRequest.egress); nil for none.
func EgressToProto(p *egress.Policy) *pb.Egress {
	if p == nil {
		return nil
	}
	e := &pb.Egress{PodIps: make([]string, len(p.PodIPs())), AllowedCidrs: make([]string, len(p.Allowed()))}
	for i, ip := range p.PodIPs() {
		e.PodIps[i] = ip.String()
	}
	for i, c := range p.Allowed() {
		e.AllowedCidrs[i] = c.String()
	}
	return e
}

// EgressFromProto rebuilds, on the plugin side, the policy a request
// carries; nil for none. It fails on a pod IP or CIDR that does not parse.
func EgressFromProto(e *pb.Egress) (*egress.Policy, error) {
	if e == nil {
		return nil, nil
	}
	ips := make([]netip.Addr, 0, len(e.GetPodIps()))
	for _, s := range e.GetPodIps() {
		ip, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("egress.pod_ips: %w", err)
		}
		ips = append(ips, ip)
	}
	cidrs := make([]netip.Prefix, 0, len(e.GetAllowedCidrs()))
	for _, s := range e.GetAllowedCidrs() {
		c, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("egress.allowed_cidrs: %w", err)
		}
		cidrs = append(cidrs, c)
	}
	return egress.NewPolicy(ips, cidrs), nil
}
