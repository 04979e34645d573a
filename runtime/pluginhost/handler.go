package pluginhost

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/egress"
	"github.com/probed/probed/runtime/pluginproto"
	pb "github.com/probed/probed/runtime/pluginproto/probeplugin/v1"
)

var kindPattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$`)

// validKind reports whether a plugin may serve a kind of this name (the
// rule of plugins/sdk.Kind.Name).
func validKind(s string) bool { return kindPattern.MatchString(s) }

// param is one allowed parameter of a kind.
type param struct {
	required bool
	pattern  *regexp.Regexp
}

// kindHandler is the runtime.Handler of one kind served by a plugin.
type kindHandler struct {
	in   *instance
	kind string
	// params is the parameter schema; nil accepts any parameter.
	params map[string]param
}

var _ runtime.Handler = (*kindHandler)(nil)

// newKindHandler builds the handler of k with the configured schema when
// there is one, else the plugin's.
func newKindHandler(in *instance, k *pb.KindInfo, configured map[string]ParamSchema) (*kindHandler, error) {
	kh := &kindHandler{in: in, kind: k.GetName()}
	switch {
	case configured != nil:
		kh.params = map[string]param{}
		for name, s := range configured {
			p := param{required: s.Required}
			if s.Pattern != "" {
				re, err := regexp.Compile(`^(?:` + s.Pattern + `)$`)
				if err != nil {
					return nil, fmt.Errorf("plugin %q: params.%s.%s.pattern: %w", in.cfg.Name, kh.kind, name, err)
				}
				p.pattern = re
			}
			kh.params[name] = p
		}
	case len(k.GetParams()) > 0:
		kh.params = map[string]param{}
		for _, p := range k.GetParams() {
			kh.params[p.GetName()] = param{required: p.GetRequired()}
		}
	}
	return kh, nil
}

// Prepare checks spec and binds it to a prober that calls the plugin.
//
// For a plugin kind (spec.Plugin set) Prepare fails — every run of the probe
// errored (P5) — when a parameter name is reserved ("probed.io/..."), or
// when the kind has a parameter schema and a parameter is unknown, a
// required one is missing or a value does not match its pattern. A port
// that does not resolve (spec 1.4) makes every Probe call errored with the
// resolution error, as for httpGet (BR-20).
//
// For a built-in kind served by a plugin (spec.Plugin nil), the container
// and probe travel as JSON in pluginproto.SpecParam and the plugin checks
// them as the in-process handler does.
func (k *kindHandler) Prepare(spec *runtime.Spec) (runtime.Prober, error) {
	if spec == nil {
		return nil, errors.New("plugin probe: no spec")
	}
	req := &pb.ProbeRequest{
		ProbeId:   pluginproto.ProbeID(spec),
		Kind:      k.kind,
		ProbeType: pluginproto.ProbeTypeToProto(spec.ProbeType),
		Target:    &pb.Target{},
		Timeout:   durationpb.New(spec.Timeout()),
	}
	if spec.Pod != nil {
		req.Target.PodUid, req.Target.PodNamespace, req.Target.PodName = string(spec.Pod.UID), spec.Pod.Namespace, spec.Pod.Name
	}
	if spec.Container != nil {
		req.Target.ContainerName = spec.Container.Name
	}
	if spec.Plugin == nil {
		if !runtime.IsBuiltinKind(k.kind) {
			return nil, fmt.Errorf("probe kind %q (plugin %q) needs a plugin handler: declare the probe in the %s annotation", k.kind, k.in.cfg.Name, "probed.io/probes")
		}
		raw, err := pluginproto.EncodeBuiltinSpec(spec)
		if err != nil {
			return nil, err
		}
		req.Params = map[string]string{pluginproto.SpecParam: raw}
	} else {
		if err := k.checkParams(spec.Plugin.Params); err != nil {
			return nil, err
		}
		if len(spec.Plugin.Params) > 0 {
			req.Params = make(map[string]string, len(spec.Plugin.Params))
			for n, v := range spec.Plugin.Params {
				req.Params[n] = v
			}
		}
		if port := spec.Plugin.Port; (port.Type == intstr.String && port.StrVal != "") || (port.Type == intstr.Int && port.IntVal != 0) {
			port, err := runtime.ResolvePort(spec.Plugin.Port, spec.Container)
			if err != nil {
				return runtime.ProberFunc(func(context.Context, runtime.Target) (runtime.Outcome, error) {
					return runtime.Outcome{Result: runtime.Unknown, ExitCode: -1}, err
				}), nil
			}
			req.Target.Port = uint32(port)
		}
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("plugin probe: %w", err)
	}
	sum := sha256.Sum256(b)
	req.SpecId = hex.EncodeToString(sum[:16])
	return &prober{k: k, tmpl: req, timeout: spec.Timeout()}, nil
}

// checkParams applies the kind's schema to params.
func (k *kindHandler) checkParams(params map[string]string) error {
	var errs []string
	names := make([]string, 0, len(params))
	for n := range params {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if strings.HasPrefix(n, pluginproto.ReservedParamPrefix) {
			errs = append(errs, fmt.Sprintf("parameter %q: names starting with %q are reserved", n, pluginproto.ReservedParamPrefix))
			continue
		}
		if k.params == nil {
			continue
		}
		p, ok := k.params[n]
		switch {
		case !ok:
			errs = append(errs, fmt.Sprintf("unknown parameter %q (known: %s)", n, strings.Join(k.paramNames(), ", ")))
		case p.pattern != nil && !p.pattern.MatchString(params[n]):
			errs = append(errs, fmt.Sprintf("parameter %q does not match %s", n, p.pattern))
		}
	}
	for _, n := range k.paramNames() {
		if _, ok := params[n]; !ok && k.params[n].required {
			errs = append(errs, fmt.Sprintf("missing required parameter %q", n))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("probe kind %q (plugin %q): %s", k.kind, k.in.cfg.Name, strings.Join(errs, "; "))
	}
	return nil
}

func (k *kindHandler) paramNames() []string {
	out := make([]string, 0, len(k.params))
	for n := range k.params {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// prober is one prepared probe of a plugin kind.
type prober struct {
	k       *kindHandler
	tmpl    *pb.ProbeRequest // immutable; Probe sends a copy with the run's fields
	timeout time.Duration
}

// CarriesTrace implements runtime.TraceCarrier: the call carries the
// probe span's context into the plugin (otelgrpc), whose spans are its
// children, so the manager starts the span before the run.
func (p *prober) CarriesTrace() bool { return true }

// Error is the error of a probe attempt the plugin could not carry out. It
// makes the run errored (discarded by the worker), never a failure.
type Error struct {
	// Plugin and Kind name the plugin and the probe kind.
	Plugin, Kind string
	// Code is the gRPC status code of the call (codes.Unavailable when the
	// plugin is not running, codes.DeadlineExceeded when it did not answer
	// in time, codes.ResourceExhausted when the in-flight cap held the
	// probe until its deadline, codes.Unknown for a handler error, ...).
	Code codes.Code
	// Message says what happened.
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("plugin %q (kind %q): %s", e.Plugin, e.Kind, e.Message)
}

func (p *prober) fail(code codes.Code, format string, args ...any) (runtime.Outcome, error) {
	return runtime.Outcome{Result: runtime.Unknown, ExitCode: -1},
		&Error{Plugin: p.k.in.cfg.Name, Kind: p.k.kind, Code: code, Message: fmt.Sprintf(format, args...)}
}

// Probe sends one attempt to the plugin. ctx's deadline is the attempt's
// (the probe's timeout, spec P3): the plugin is told the time left
// (ProbeRequest.remaining) and the RPC may take Options.Grace longer, so
// a verdict reached at the deadline still counts. When the deadline runs on
// an injected clock (runtime.OnInjectedClock), the plugin, a process of its
// own, cannot see that clock: it is told no time left (remaining unset, so
// the SDK sets no deadline of its own; ProbeRequest.timeout still names the
// probe's timeout), the RPC has no deadline, and it is cancelled when the
// clock passes the deadline, with no grace: the run is errored
// (codes.DeadlineExceeded), as when a plugin does not answer by its
// deadline on the real clock (docs/plugins.md). The result, message
// (capped at runtime.MaxOutputBytes), status code, exit code and details
// are the plugin's.
//
// Under an egress policy (cluster mode: egress.FromContext(ctx)) the
// request carries it (ProbeRequest.egress) for the plugin to enforce; a
// plugin that does not announce pluginproto.APIVersionEgress and is not
// trusted (PluginConfig.TrustEgress) is not called: the attempt is errored
// with codes.FailedPrecondition, naming the plugin and the missing level.
//
// Errors (*Error; the run is errored, spec P5/W5.10): the plugin is not
// running (it died and is being restarted), its in-flight cap held the
// probe until its deadline, it did not answer by the deadline plus grace,
// the call failed, the plugin's handler failed, or the answer has no valid
// result.
func (p *prober) Probe(ctx context.Context, t runtime.Target) (runtime.Outcome, error) {
	in := p.k.in
	select {
	case in.sem <- struct{}{}:
	default:
		select {
		case in.sem <- struct{}{}:
		case <-ctx.Done():
			return p.fail(codes.ResourceExhausted, "%d probes already in flight (the plugin's cap); this one waited until its deadline", cap(in.sem))
		}
	}
	defer func() { <-in.sem }()
	policy := egress.FromContext(ctx)
	if policy != nil && !in.egressOK() {
		return p.fail(codes.FailedPrecondition, "the plugin does not announce probeplugin %s (it does not enforce the egress policy): in cluster mode its probes run only when its configuration sets trustEgress: true", pluginproto.APIVersionEgress)
	}
	proc := in.live.Load()
	if proc == nil {
		if in.h.ctx.Err() != nil {
			return p.fail(codes.Unavailable, "the plugin host is closed")
		}
		return p.fail(codes.Unavailable, "the plugin is not running (it exited and is being restarted)")
	}
	req := &pb.ProbeRequest{
		ProbeId:   p.tmpl.ProbeId,
		Kind:      p.tmpl.Kind,
		ProbeType: p.tmpl.ProbeType,
		Timeout:   p.tmpl.Timeout,
		Params:    p.tmpl.Params,
		SpecId:    p.tmpl.SpecId,
		Attempt:   uint32(max(t.Attempt, 0)),
		Target: &pb.Target{
			PodIp:         t.PodIP,
			Port:          p.tmpl.Target.Port,
			PodUid:        p.tmpl.Target.PodUid,
			PodNamespace:  p.tmpl.Target.PodNamespace,
			PodName:       p.tmpl.Target.PodName,
			ContainerName: p.tmpl.Target.ContainerName,
			ContainerId:   t.ContainerID,
		},
		Egress: pluginproto.EgressToProto(policy),
	}
	// The RPC outlives ctx's deadline by the grace, but not a cancellation.
	var rctx context.Context
	var cancel context.CancelFunc
	injected := runtime.OnInjectedClock(ctx)
	deadline, hasDeadline := ctx.Deadline()
	switch {
	case injected:
		// No remaining and no grace: the call ends with ctx.
		rctx, cancel = context.WithCancel(ctx)
	case hasDeadline:
		req.Remaining = durationpb.New(time.Until(deadline))
		rctx, cancel = context.WithDeadline(context.WithoutCancel(ctx), deadline.Add(in.h.opts.Grace))
	default:
		req.Remaining = p.tmpl.Timeout
		rctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), p.timeout+in.h.opts.Grace)
	}
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			cancel()
		}
	})
	defer stop()
	resp, err := proc.conn.Probe(rctx, req)
	if err != nil {
		st := status.Convert(err)
		code := st.Code()
		if injected && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			code = codes.DeadlineExceeded // cut by the injected clock
		}
		switch code {
		case codes.DeadlineExceeded:
			if injected {
				return p.fail(codes.DeadlineExceeded, "no answer before the injected clock passed the probe's timeout of %s", p.timeout)
			}
			return p.fail(codes.DeadlineExceeded, "no answer within the probe's timeout of %s (plus %s grace)", p.timeout, in.h.opts.Grace)
		case codes.Canceled:
			// Canceled means the caller cancelled only if it did; otherwise
			// the connection was closed under the call because the plugin
			// exited (go-plugin's Kill closes it, which can beat the
			// transport's EOF): that is an unavailable plugin.
			if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return p.fail(codes.Canceled, "probe cancelled")
			}
			return p.fail(codes.Unavailable, "the plugin is unavailable (it exited or is restarting): %s", st.Message())
		case codes.Unavailable:
			return p.fail(codes.Unavailable, "the plugin is unavailable (it exited or is restarting): %s", st.Message())
		}
		return p.fail(st.Code(), "%s", st.Message())
	}
	res, err := pluginproto.ResultFromProto(resp.GetResult())
	if err != nil {
		return p.fail(codes.Internal, "%v", err)
	}
	msg := resp.GetMessage()
	if len(msg) > runtime.MaxOutputBytes {
		msg = msg[:runtime.MaxOutputBytes]
	}
	details, notAfter := pluginproto.NotAfterOf(resp.GetDetails())
	return runtime.Outcome{
		Result:     res,
		Output:     msg,
		StatusCode: int(resp.GetStatusCode()),
		ExitCode:   int(resp.GetExitCode()),
		Details:    details,
		NotAfter:   notAfter,
	}, nil
}
