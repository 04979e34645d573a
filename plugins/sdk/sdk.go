// Package sdk is the plugin author's side of probed's plugin contract
// (probeplugin.v1 over hashicorp/go-plugin, gRPC): one call, Serve, turns a
// runtime.Handler — the interface the built-in http, tcp, exec and grpc
// handlers implement — into a plugin binary that probed starts, talks to
// over mutual TLS and restarts when it dies.
//
// A minimal plugin:
//
//	func main() {
//		sdk.Serve(sdk.Plugin{
//			Name:    "redis",
//			Version: "1.0.0",
//			Kinds: []sdk.Kind{{
//				Name:    "redis",
//				Params:  []sdk.Param{{Name: "password"}, {Name: "tls"}},
//				Handler: redisHandler{},
//			}},
//		})
//	}
//
// Rules for plugin binaries (see docs/plugins.md):
//   - Write nothing to stdout before Serve (not even from init): go-plugin
//     reads its handshake line from stdout, and anything else there makes
//     the host refuse the plugin ("printed to stdout before the handshake").
//     Log through Logger (JSON on stderr), which the host re-logs.
//   - Prober.Probe reports a verdict about the target as an Outcome with a
//     nil error (a timeout of the target is a Failure); a non-nil error
//     means the probe could not be carried out, and the host discards the
//     run (it never counts as a failure).
//   - ctx carries the attempt's deadline; answer before it.
//   - In cluster mode ctx also carries the agent's egress policy
//     (runtime/egress): connect only through Dialer (or a net.Dialer whose
//     ControlContext is egress.Control), put nothing the target sent but
//     a status code in Output (egress.Withhold), and set
//     Plugin.EnforcesEgress. The agent runs the cluster-mode probes of a
//     plugin that does not set it only when its operator trusts it.
package sdk

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/egress"
	"github.com/probed/probed/runtime/pluginproto"
	pb "github.com/probed/probed/runtime/pluginproto/probeplugin/v1"
)

// Param describes one parameter of a kind. When a kind lists parameters,
// the host rejects probes that use other names or omit a required one.
type Param struct {
	Name        string
	Description string
	Required    bool
}

// Kind is one probe kind a plugin serves.
type Kind struct {
	// Name is the kind as written in the probed.io/probes annotation
	// (plugin.name): lower-case letters, digits, '-' and '.', starting and
	// ending with a letter or digit, at most 63 characters. The built-in
	// kinds (http, tcp, exec, grpc) may be served too: the host then sends
	// the container and probe in the reserved parameter
	// pluginproto.SpecParam and the Spec handed to Handler is the same as
	// in process.
	Name        string
	Description string
	// Params describes the parameters; empty means any are accepted.
	Params []Param
	// Handler prepares the kind's probes. Prepare receives a runtime.Spec
	// rebuilt from the request (pluginproto.SpecFromRequest): for plugin
	// kinds, Spec.Plugin carries the resolved port and the params, and
	// Spec.Timeout() is the probe's timeout. Prepare is called once per
	// probe (per distinct spec) and its result cached; a Prepare error makes
	// every run of that probe errored.
	Handler runtime.Handler
}

// Config is the plugin-wide configuration the host sends after each start.
type Config struct {
	// NodeName is the node the host runs on (may be empty).
	NodeName string
	// HostVersion is probed's version.
	HostVersion string
	// Settings are the plugin's settings from the host's plugin
	// configuration file (`config:` of the plugin's entry).
	Settings map[string]string
}

// Plugin describes a plugin binary.
type Plugin struct {
	// Name and Version are reported to the host (informative).
	Name, Version string
	// Kinds are the probe kinds served; at least one.
	Kinds []Kind
	// MaxConcurrency is the plugin's own cap on concurrent probes, used by
	// the host when its configuration sets none; 0: the host's default.
	MaxConcurrency int
	// Configure, when set, receives the host's configuration after each
	// start and before any probe; an error fails the start.
	Configure func(ctx context.Context, c Config) error
	// Logger; nil: Logger(Name).
	Logger hclog.Logger
	// ParentPollInterval is how often the plugin checks that the process
	// that started it is still its parent; when it is not (the agent died),
	// the plugin exits. Default 250 ms.
	ParentPollInterval time.Duration
	// CacheSize bounds the prepared probes kept (least recently used are
	// dropped and prepared again when needed); default 4096.
	CacheSize int
	// EnforcesEgress declares that every kind's handler makes its
	// connections only through Dialer (or egress.Control) with the
	// Probe's ctx, and keeps what a target sent out of its outputs
	// (egress.Withhold): the plugin then announces
	// pluginproto.APIVersionEgress ("v1.1"). The SDK puts the host's
	// egress policy (ProbeRequest.egress, cluster mode) on ctx either
	// way; without this declaration the agent errors the plugin's probes in
	// cluster mode unless its configuration trusts it (trustEgress).
	EnforcesEgress bool
}

// Dialer returns a dialer for a probe's connections: dialled with the
// Probe's ctx, it connects only where the host's egress policy allows
// (egress.Control checks each resolved address before connecting; a
// refused one fails the dial with `dial tcp IP:PORT: refused by probed's
// egress policy (...)`, a Failure of the probe); timeout bounds the
// connect (zero: ctx alone). Use it as an http.Transport's DialContext too:
// net/http hands the request's context values to it, so redirects are
// checked as well.
func Dialer(timeout time.Duration) *net.Dialer {
	d := egress.Dialer()
	d.Timeout = timeout
	return d
}

// Logger returns a logger that writes JSON lines to stderr, which the host
// parses and re-logs at the same level under the plugin's name. The level
// is the host's (environment variable pluginproto.EnvLogLevel), default
// info. Never log secrets or response bodies.
func Logger(name string) hclog.Logger {
	level := hclog.LevelFromString(os.Getenv(pluginproto.EnvLogLevel))
	if level == hclog.NoLevel {
		level = hclog.Info
	}
	return hclog.New(&hclog.LoggerOptions{
		Name:       name,
		Level:      level,
		Output:     os.Stderr,
		JSONFormat: true,
	})
}

// Serve serves p and never returns: it exits the process with status 0
// when the host shuts the plugin down or when the process that started the
// plugin is gone (the agent died: no orphan is left), and with status 1
// when p is invalid or the binary was not started by probed (go-plugin then
// prints a hint to stderr).
func Serve(p Plugin) {
	srv, err := NewServer(p)
	if err != nil {
		fmt.Fprintln(os.Stderr, "probed plugin:", err)
		os.Exit(1)
	}
	log := p.Logger
	if log == nil {
		log = Logger(p.Name)
	}
	if os.Getenv(pluginproto.Handshake.MagicCookieKey) == pluginproto.Handshake.MagicCookieValue {
		interval := p.ParentPollInterval
		if interval <= 0 {
			interval = 250 * time.Millisecond
		}
		go watchParent(os.Getppid(), interval, func() {
			log.Error("the agent that started this plugin is gone; exiting")
			os.Exit(0)
		})
	}
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig:  pluginproto.Handshake,
		VersionedPlugins: pluginproto.VersionedPlugins(srv),
		GRPCServer:       GRPCServer,
		Logger:           log,
	})
	os.Exit(0)
}

// GRPCServer builds the plugin's gRPC server from go-plugin's options (TLS)
// plus an OpenTelemetry stats handler, so that the trace context of the
// probe propagates into the handler's ctx (traces are recorded only if the
// plugin sets up a tracer provider; go-plugin's own services are not
// traced).
func GRPCServer(opts []grpc.ServerOption) *grpc.Server {
	opts = append(opts, grpc.StatsHandler(otelgrpc.NewServerHandler(
		otelgrpc.WithFilter(pluginproto.TraceFilter()),
		otelgrpc.WithPropagators(pluginproto.Propagator()),
	)))
	return grpc.NewServer(opts...)
}

// watchParent calls exit once the parent process is no longer ppid.
func watchParent(ppid int, interval time.Duration, exit func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for range t.C {
		if os.Getppid() != ppid {
			exit()
			return
		}
	}
}

// ServeHandler serves one kind with h: Serve(Plugin{Name: kind, Kinds:
// []Kind{{Name: kind, Handler: h}}}).
func ServeHandler(kind string, h runtime.Handler) {
	Serve(Plugin{Name: kind, Kinds: []Kind{{Name: kind, Handler: h}}})
}

var kindName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$`)

// ValidKindName reports whether s is a valid kind name (see Kind.Name).
func ValidKindName(s string) bool { return kindName.MatchString(s) }

// NewServer returns the gRPC service implementation of p, for Serve and
// for testing a plugin in process. It fails when p has no kinds, a kind
// has an invalid or duplicate name or no handler, or a parameter name is
// empty, duplicated or reserved (pluginproto.ReservedParamPrefix).
func NewServer(p Plugin) (pb.ProbePluginServer, error) {
	if len(p.Kinds) == 0 {
		return nil, errors.New("the plugin serves no kind")
	}
	s := &server{p: p, kinds: map[string]*Kind{}, cache: newCache(p.CacheSize)}
	if s.p.Logger == nil {
		s.p.Logger = hclog.NewNullLogger()
	}
	for i := range p.Kinds {
		k := &p.Kinds[i]
		if !ValidKindName(k.Name) {
			return nil, fmt.Errorf("invalid kind name %q: want lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, at most 63 characters", k.Name)
		}
		if s.kinds[k.Name] != nil {
			return nil, fmt.Errorf("kind %q is listed twice", k.Name)
		}
		if k.Handler == nil {
			return nil, fmt.Errorf("kind %q has no handler", k.Name)
		}
		seen := map[string]bool{}
		for _, prm := range k.Params {
			switch {
			case prm.Name == "":
				return nil, fmt.Errorf("kind %q has a parameter without a name", k.Name)
			case strings.HasPrefix(prm.Name, pluginproto.ReservedParamPrefix):
				return nil, fmt.Errorf("kind %q: parameter names starting with %q are reserved", k.Name, pluginproto.ReservedParamPrefix)
			case seen[prm.Name]:
				return nil, fmt.Errorf("kind %q lists parameter %q twice", k.Name, prm.Name)
			}
			seen[prm.Name] = true
		}
		s.kinds[k.Name] = k
	}
	return s, nil
}

type server struct {
	pb.UnimplementedProbePluginServer
	p     Plugin
	kinds map[string]*Kind
	cache *cache
}

func (s *server) GetInfo(context.Context, *pb.GetInfoRequest) (*pb.GetInfoResponse, error) {
	resp := &pb.GetInfoResponse{
		Name:           s.p.Name,
		PluginVersion:  s.p.Version,
		ApiVersions:    s.apiVersions(),
		MaxConcurrency: uint32(max(s.p.MaxConcurrency, 0)),
	}
	for i := range s.p.Kinds {
		k := &s.p.Kinds[i]
		ki := &pb.KindInfo{Name: k.Name, Description: k.Description}
		for _, prm := range k.Params {
			ki.Params = append(ki.Params, &pb.ParamInfo{Name: prm.Name, Description: prm.Description, Required: prm.Required})
		}
		resp.Kinds = append(resp.Kinds, ki)
	}
	return resp, nil
}

// apiVersions are the feature levels the plugin announces.
func (s *server) apiVersions() []string {
	if s.p.EnforcesEgress {
		return []string{pluginproto.APIVersion, pluginproto.APIVersionEgress}
	}
	return []string{pluginproto.APIVersion}
}

func (s *server) Configure(ctx context.Context, req *pb.ConfigureRequest) (*pb.ConfigureResponse, error) {
	if s.p.Configure == nil {
		return &pb.ConfigureResponse{}, nil
	}
	err := s.p.Configure(ctx, Config{NodeName: req.GetNodeName(), HostVersion: req.GetHostVersion(), Settings: req.GetConfig()})
	if err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	return &pb.ConfigureResponse{}, nil
}

// Probe prepares (or takes from the cache) the request's probe and runs
// one attempt with a deadline of req.remaining. A request without
// remaining comes from a host whose attempt deadline runs on an injected
// clock (a fake clock in its tests), which this process cannot see: the
// attempt gets no deadline here, its context is marked
// (runtime.WithInjectedDeadline) so that the built-in handlers set no
// real-time timer of their own either, and it ends when the host cancels
// the call as its clock passes the deadline. Errors, as gRPC status:
// NotFound for a kind the plugin does not serve, InvalidArgument for a
// request that cannot be decoded, FailedPrecondition for a Prepare error,
// Unknown for a handler error (and for a Failure whose Cause shows the
// plugin out of local resources, runtime.ClassifyAttempt), Internal for a
// handler panic. The request's egress policy (cluster mode) is put on the
// handler's ctx (egress.FromContext), where Dialer and the built-in
// handlers' dialer enforce it.
func (s *server) Probe(ctx context.Context, req *pb.ProbeRequest) (resp *pb.ProbeResponse, err error) {
	k := s.kinds[req.GetKind()]
	if k == nil {
		return nil, status.Errorf(codes.NotFound, "plugin %q does not serve probe kind %q", s.p.Name, req.GetKind())
	}
	defer func() {
		if v := recover(); v != nil {
			s.p.Logger.Error("probe handler panicked", "kind", k.Name, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			resp, err = nil, status.Errorf(codes.Internal, "probe kind %q panicked: %v", k.Name, v)
		}
	}()
	prober, err := s.prober(k, req)
	if err != nil {
		return nil, err
	}
	policy, err := pluginproto.EgressFromProto(req.GetEgress())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	ctx = egress.WithPolicy(ctx, policy)
	if d := req.GetRemaining(); d != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.AsDuration())
		defer cancel()
	} else {
		ctx = runtime.WithInjectedDeadline(ctx)
	}
	start := time.Now()
	// A Failure the plugin could not help (its own descriptors or ports
	// ran out) goes back as an error: errored on the host, never a Failure
	// of the target (the runtime's rule, runtime.ClassifyAttempt).
	out, perr := runtime.ClassifyAttempt(prober.Probe(ctx, pluginproto.TargetFromRequest(req)))
	if perr != nil {
		return nil, status.Error(codes.Unknown, perr.Error())
	}
	msg := out.Output
	if len(msg) > runtime.MaxOutputBytes {
		msg = msg[:runtime.MaxOutputBytes]
	}
	return &pb.ProbeResponse{
		Result:     pluginproto.ResultToProto(out.Result),
		Message:    msg,
		Details:    pluginproto.DetailsOf(out),
		StatusCode: int32(out.StatusCode),
		ExitCode:   int32(out.ExitCode),
		Duration:   durationpb.New(time.Since(start)),
	}, nil
}

// prober returns the cached prober of the request's spec, preparing it on
// a miss. Prepare errors are cached too.
func (s *server) prober(k *Kind, req *pb.ProbeRequest) (runtime.Prober, error) {
	key := req.GetSpecId()
	if key == "" {
		key = specKey(req)
	}
	key = k.Name + "\x00" + key
	if e, ok := s.cache.get(key); ok {
		return e.prober, e.err
	}
	var e entry
	spec, err := pluginproto.SpecFromRequest(req)
	if err != nil {
		e.err = status.Error(codes.InvalidArgument, err.Error())
	} else if e.prober, err = k.Handler.Prepare(spec); err != nil {
		e.err = status.Error(codes.FailedPrecondition, err.Error())
	} else if e.prober == nil {
		e.err = status.Errorf(codes.Internal, "probe kind %q: Prepare returned no prober", k.Name)
	}
	s.cache.put(key, e)
	return e.prober, e.err
}

// specKey identifies the immutable part of a request when the host sent no
// spec_id: the request without its per-run fields, deterministically
// marshalled.
func specKey(req *pb.ProbeRequest) string {
	c := proto.Clone(req).(*pb.ProbeRequest)
	c.Remaining, c.Attempt, c.Egress = nil, 0, nil
	if c.Target != nil {
		c.Target.PodIp, c.Target.ContainerId = "", ""
	}
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(c)
	return string(b)
}

type entry struct {
	prober runtime.Prober
	err    error
}

// cache is a small LRU of prepared probes.
type cache struct {
	mu    sync.Mutex
	size  int
	ll    *list.List
	items map[string]*list.Element
}

type cacheItem struct {
	key string
	e   entry
}

func newCache(size int) *cache {
	if size <= 0 {
		size = 4096
	}
	return &cache{size: size, ll: list.New(), items: map[string]*list.Element{}}
}

func (c *cache) get(key string) (entry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[key]
	if !ok {
		return entry{}, false
	}
	c.ll.MoveToFront(el)
	return el.Value.(*cacheItem).e, true
}

func (c *cache) put(key string, e entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		c.ll.MoveToFront(el)
		return
	}
	c.items[key] = c.ll.PushFront(&cacheItem{key: key, e: e})
	for c.ll.Len() > c.size {
		last := c.ll.Back()
		c.ll.Remove(last)
		delete(c.items, last.Value.(*cacheItem).key)
	}
}

// KindNames returns the names of p's kinds, sorted.
func (p Plugin) KindNames() []string {
	out := make([]string, 0, len(p.Kinds))
	for _, k := range p.Kinds {
		out = append(out, k.Name)
	}
	sort.Strings(out)
	return out
}
