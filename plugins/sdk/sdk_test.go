package sdk

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/egress"
	"github.com/probed/probed/runtime/pluginproto"
	pb "github.com/probed/probed/runtime/pluginproto/probeplugin/v1"
)

// IgnoreCurrent: ants starts its default pool at init (imported through runtime).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }

// countingHandler counts Prepare calls and answers with its spec.
type countingHandler struct {
	prepares atomic.Int64
	probe    func(ctx context.Context, spec *runtime.Spec, t runtime.Target) (runtime.Outcome, error)
}

func (h *countingHandler) Prepare(spec *runtime.Spec) (runtime.Prober, error) {
	h.prepares.Add(1)
	if spec.Plugin != nil && spec.Plugin.Params["prepare"] == "fail" {
		return nil, errors.New("bad params")
	}
	return runtime.ProberFunc(func(ctx context.Context, t runtime.Target) (runtime.Outcome, error) {
		return h.probe(ctx, spec, t)
	}), nil
}

func request(params map[string]string) *pb.ProbeRequest {
	return &pb.ProbeRequest{
		ProbeId:   "uid/app/readiness",
		Kind:      "k",
		ProbeType: pb.ProbeType_PROBE_TYPE_READINESS,
		Target:    &pb.Target{PodIp: "10.0.0.1", Port: 8080, PodUid: "uid", PodNamespace: "ns", PodName: "p", ContainerName: "app", ContainerId: "c://1"},
		Timeout:   durationpb.New(3 * time.Second),
		Remaining: durationpb.New(time.Second),
		Params:    params,
		Attempt:   2,
	}
}

func TestNewServerValidates(t *testing.T) {
	h := &countingHandler{}
	cases := []struct {
		p    Plugin
		want string
	}{
		{Plugin{}, "serves no kind"},
		{Plugin{Kinds: []Kind{{Name: "Bad", Handler: h}}}, "invalid kind name"},
		{Plugin{Kinds: []Kind{{Name: "k", Handler: h}, {Name: "k", Handler: h}}}, "twice"},
		{Plugin{Kinds: []Kind{{Name: "k"}}}, "no handler"},
		{Plugin{Kinds: []Kind{{Name: "k", Handler: h, Params: []Param{{}}}}}, "without a name"},
		{Plugin{Kinds: []Kind{{Name: "k", Handler: h, Params: []Param{{Name: "probed.io/x"}}}}}, "reserved"},
		{Plugin{Kinds: []Kind{{Name: "k", Handler: h, Params: []Param{{Name: "a"}, {Name: "a"}}}}}, "twice"},
	}
	for _, c := range cases {
		if _, err := NewServer(c.p); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.p, err, c.want)
		}
	}
	for _, ok := range []string{"a", "http-match", "dns.v2", "x1"} {
		if !ValidKindName(ok) {
			t.Errorf("%q rejected", ok)
		}
	}
	for _, bad := range []string{"", "-a", "a-", "A", "a_b", strings.Repeat("a", 64)} {
		if ValidKindName(bad) {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestGetInfoAndConfigure(t *testing.T) {
	var got Config
	srv, err := NewServer(Plugin{
		Name: "p", Version: "1.2.3", MaxConcurrency: 5,
		Kinds: []Kind{{Name: "k", Description: "d", Handler: &countingHandler{}, Params: []Param{{Name: "a", Required: true, Description: "x"}}}},
		Configure: func(_ context.Context, c Config) error {
			got = c
			if c.Settings["bad"] != "" {
				return errors.New("bad setting")
			}
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	info, err := srv.GetInfo(context.Background(), &pb.GetInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.GetName() != "p" || info.GetPluginVersion() != "1.2.3" || info.GetMaxConcurrency() != 5 ||
		!slices.Equal(info.GetApiVersions(), []string{pluginproto.APIVersion}) ||
		len(info.GetKinds()) != 1 || info.GetKinds()[0].GetName() != "k" || !info.GetKinds()[0].GetParams()[0].GetRequired() {
		t.Errorf("GetInfo: %v", info)
	}
	if _, err := srv.Configure(context.Background(), &pb.ConfigureRequest{NodeName: "n", HostVersion: "v", Config: map[string]string{"a": "b"}}); err != nil {
		t.Fatal(err)
	}
	if got.NodeName != "n" || got.HostVersion != "v" || got.Settings["a"] != "b" {
		t.Errorf("Configure got %+v", got)
	}
	_, err = srv.Configure(context.Background(), &pb.ConfigureRequest{Config: map[string]string{"bad": "1"}})
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("failing Configure: %v", err)
	}
}

// TestProbe: the handler gets the spec and target rebuilt from the request
// and a deadline of the time remaining; prepared probers are cached per
// spec; errors and panics become gRPC statuses.
func TestProbe(t *testing.T) {
	h := &countingHandler{}
	h.probe = func(ctx context.Context, spec *runtime.Spec, tg runtime.Target) (runtime.Outcome, error) {
		switch spec.Plugin.Params["mode"] {
		case "error":
			return runtime.Outcome{}, errors.New("cannot probe")
		case "panic":
			panic("boom")
		case "long":
			return runtime.Outcome{Result: runtime.Warning, Output: strings.Repeat("x", 2*runtime.MaxOutputBytes)}, nil
		}
		dl, ok := ctx.Deadline()
		if !ok || time.Until(dl) > time.Second || time.Until(dl) < 800*time.Millisecond {
			t.Errorf("handler deadline %v (%v)", dl, ok)
		}
		if spec.Kind != "k" || spec.ProbeType != runtime.Readiness || spec.Pod.Name != "p" || spec.Pod.Namespace != "ns" ||
			spec.Pod.UID != "uid" || spec.Container.Name != "app" || spec.Timeout() != 3*time.Second ||
			spec.Plugin.Port.IntValue() != 8080 || spec.Plugin.Name != "k" {
			t.Errorf("spec %+v, plugin %+v", spec, spec.Plugin)
		}
		if tg.PodIP != "10.0.0.1" || tg.ContainerID != "c://1" || tg.Attempt != 2 {
			t.Errorf("target %+v", tg)
		}
		return runtime.Outcome{Result: runtime.Success, Output: "fine", StatusCode: 204, Details: map[string]string{"a": "b"}}, nil
	}
	srv, err := NewServer(Plugin{Name: "p", Kinds: []Kind{{Name: "k", Handler: h}}, CacheSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		resp, err := srv.Probe(ctx, request(map[string]string{"x": "1"}))
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetResult() != pb.Result_RESULT_SUCCESS || resp.GetMessage() != "fine" || resp.GetStatusCode() != 204 || resp.GetDetails()["a"] != "b" || resp.GetDuration() == nil {
			t.Errorf("response %v", resp)
		}
	}
	if n := h.prepares.Load(); n != 1 {
		t.Errorf("prepared %d times for one spec, want 1", n)
	}
	// Other per-run fields: the same spec; other params: another.
	r := request(map[string]string{"x": "1"})
	r.Remaining = durationpb.New(950 * time.Millisecond)
	r.Target.ContainerId = "c://1"
	_, _ = srv.Probe(ctx, r)
	_, _ = srv.Probe(ctx, request(map[string]string{"x": "2"}))
	if n := h.prepares.Load(); n != 2 {
		t.Errorf("prepared %d times for two specs, want 2", n)
	}
	// spec_id from the host is the cache key when present.
	r = request(map[string]string{"x": "3"})
	r.SpecId = "same"
	_, _ = srv.Probe(ctx, r)
	r = request(map[string]string{"x": "4"})
	r.SpecId = "same"
	_, _ = srv.Probe(ctx, r)
	if n := h.prepares.Load(); n != 3 {
		t.Errorf("prepared %d times, want 3", n)
	}

	cases := []struct {
		req  *pb.ProbeRequest
		code codes.Code
		msg  string
	}{
		{request(map[string]string{"mode": "error"}), codes.Unknown, "cannot probe"},
		{request(map[string]string{"mode": "panic"}), codes.Internal, "panicked: boom"},
		{request(map[string]string{"prepare": "fail"}), codes.FailedPrecondition, "bad params"},
		{func() *pb.ProbeRequest { r := request(nil); r.Kind = "other"; return r }(), codes.NotFound, `does not serve probe kind "other"`},
		{func() *pb.ProbeRequest { r := request(nil); r.ProbeType = 0; return r }(), codes.InvalidArgument, "unknown probe type"},
	}
	for _, c := range cases {
		_, err := srv.Probe(ctx, c.req)
		if st := status.Convert(err); st.Code() != c.code || !strings.Contains(st.Message(), c.msg) {
			t.Errorf("%v: %v, want %v %q", c.req.GetParams(), err, c.code, c.msg)
		}
	}
	resp, err := srv.Probe(ctx, request(map[string]string{"mode": "long"}))
	if err != nil || len(resp.GetMessage()) != runtime.MaxOutputBytes || resp.GetResult() != pb.Result_RESULT_WARNING {
		t.Errorf("long output: %d bytes, %v", len(resp.GetMessage()), err)
	}
}

// TestBuiltinSpec: a request carrying the built-in spec rebuilds the
// container and probe.
func TestBuiltinSpec(t *testing.T) {
	var seen *runtime.Spec
	h := &countingHandler{probe: func(_ context.Context, spec *runtime.Spec, _ runtime.Target) (runtime.Outcome, error) {
		seen = spec
		return runtime.Outcome{Result: runtime.Success}, nil
	}}
	srv, _ := NewServer(Plugin{Kinds: []Kind{{Name: "tcp", Handler: h}}})
	req := request(map[string]string{pluginproto.SpecParam: `{"container":{"name":"app","ports":[{"name":"web","containerPort":81}]},"probe":{"tcpSocket":{"port":"web"},"timeoutSeconds":4}}`})
	req.Kind = "tcp"
	if _, err := srv.Probe(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if seen.Plugin != nil || seen.Probe.TCPSocket == nil || seen.Probe.TCPSocket.Port.StrVal != "web" || seen.Container.Ports[0].ContainerPort != 81 || seen.Timeout() != 4*time.Second {
		t.Errorf("spec %+v", seen)
	}
	req.Params[pluginproto.SpecParam] = "{"
	req.SpecId = "other"
	if _, err := srv.Probe(context.Background(), req); status.Code(err) != codes.InvalidArgument {
		t.Errorf("bad spec JSON: %v", err)
	}
}

func TestCacheEvicts(t *testing.T) {
	c := newCache(2)
	c.put("a", entry{})
	c.put("b", entry{})
	c.get("a")
	c.put("c", entry{})
	if _, ok := c.get("b"); ok {
		t.Error("least recently used entry kept")
	}
	if _, ok := c.get("a"); !ok {
		t.Error("recently used entry dropped")
	}
}

func TestWatchParent(t *testing.T) {
	exited := make(chan struct{})
	go watchParent(os.Getppid()+1, 5*time.Millisecond, func() { close(exited) })
	select {
	case <-exited:
	case <-time.After(time.Second):
		t.Fatal("a changed parent was not noticed")
	}
}

// TestProbeWithoutRemainingIsOnInjectedClock: a request without remaining
// comes from a host whose deadline runs on an injected clock. The handler
// gets no deadline, and its context says so (runtime.OnInjectedClock), so
// the built-in handlers set no real-time timer of their own either; the
// host's cancel of the call ends it.
func TestProbeWithoutRemainingIsOnInjectedClock(t *testing.T) {
	h := &countingHandler{}
	h.probe = func(ctx context.Context, _ *runtime.Spec, _ runtime.Target) (runtime.Outcome, error) {
		if dl, ok := ctx.Deadline(); ok {
			t.Errorf("handler deadline %v, want none", dl)
		}
		if !runtime.OnInjectedClock(ctx) {
			t.Error("the handler's context is not marked as on an injected clock")
		}
		<-ctx.Done()
		return runtime.Outcome{Result: runtime.Success}, nil
	}
	srv, err := NewServer(Plugin{Name: "p", Kinds: []Kind{{Name: "k", Handler: h}}})
	if err != nil {
		t.Fatal(err)
	}
	r := request(nil)
	r.Remaining = nil
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel) // the host cancels the call
	if _, err := srv.Probe(ctx, r); err != nil {
		t.Fatal(err)
	}
}

// TestEgressInTheSDK: a plugin that declares EnforcesEgress announces
// probeplugin v1.1; the request's egress policy reaches the handler's ctx
// (where Dialer enforces it), the same spec is prepared once whatever the
// policy, and a policy that does not parse is an InvalidArgument.
func TestEgressInTheSDK(t *testing.T) {
	var seen []string
	h := &countingHandler{probe: func(ctx context.Context, _ *runtime.Spec, _ runtime.Target) (runtime.Outcome, error) {
		p := egress.FromContext(ctx)
		seen = append(seen, fmt.Sprint(p.PodIPs(), p.Allowed(), p != nil))
		return runtime.Outcome{Result: runtime.Success}, nil
	}}
	plain, err := NewServer(Plugin{Name: "p", Kinds: []Kind{{Name: "k", Handler: h}}})
	if err != nil {
		t.Fatal(err)
	}
	info, _ := plain.GetInfo(context.Background(), &pb.GetInfoRequest{})
	if !slices.Equal(info.GetApiVersions(), []string{pluginproto.APIVersion}) {
		t.Errorf("a plugin without EnforcesEgress announces %v", info.GetApiVersions())
	}
	srv, err := NewServer(Plugin{Name: "p", Kinds: []Kind{{Name: "k", Handler: h}}, EnforcesEgress: true})
	if err != nil {
		t.Fatal(err)
	}
	info, _ = srv.GetInfo(context.Background(), &pb.GetInfoRequest{})
	if !slices.Equal(info.GetApiVersions(), []string{"v1.0", "v1.1"}) {
		t.Errorf("a plugin with EnforcesEgress announces %v, want [v1.0 v1.1]", info.GetApiVersions())
	}

	r := request(nil)
	r.Egress = &pb.Egress{PodIps: []string{"10.0.0.1", "fd00::1"}, AllowedCidrs: []string{"192.168.0.0/16"}}
	if _, err := srv.Probe(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Probe(context.Background(), request(nil)); err != nil {
		t.Fatal(err)
	}
	if want := []string{"[10.0.0.1 fd00::1] [192.168.0.0/16] true", "[] [] false"}; !slices.Equal(seen, want) {
		t.Errorf("handler saw %q, want %q", seen, want)
	}
	if n := h.prepares.Load(); n != 1 {
		t.Errorf("prepared %d times: the policy is not part of the spec", n)
	}
	r.Egress = &pb.Egress{PodIps: []string{"not-an-ip"}}
	if _, err := srv.Probe(context.Background(), r); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "egress.pod_ips") {
		t.Errorf("bad policy: %v", err)
	}
	if d := Dialer(time.Second); d.Timeout != time.Second || d.ControlContext == nil {
		t.Errorf("Dialer: %+v", d)
	}
}
