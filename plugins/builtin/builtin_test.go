package builtin_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	nethttp "net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	ggrpc "google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/probed/probed/plugins/builtin"
	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/egress"
	"github.com/probed/probed/runtime/pluginhost"
	"github.com/probed/probed/runtime/pluginhost/pluginhosttest"
)

var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "builtin-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := pluginhosttest.Build(dir, "./testdata/probed-builtin"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	binDir = dir
	os.Setenv("GORACE", "atexit_sleep_ms=0") // race-built plugins exit at once
	goleak.VerifyTestMain(m, goleak.IgnoreCurrent(), goleak.Cleanup(func(code int) {
		os.RemoveAll(dir)
		os.Exit(code)
	}))
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// runtimes returns a runtime with the in-process built-in handlers and one
// whose built-in kinds are served by a plugin process (probed plugin serve
// exec grpc http tcp), closed at cleanup.
func runtimes(t testing.TB) (inProc, outOfProc *runtime.Runtime) {
	t.Helper()
	return runtimesWith(t, nil)
}

// runtimesWith is runtimes whose runs are under the egress rule (nil:
// none, manifest mode).
func runtimesWith(t testing.TB, rule *egress.Rule) (inProc, outOfProc *runtime.Runtime) {
	t.Helper()
	inProc, err := runtime.New(runtime.Options{PoolSize: 4, ExecPoolSize: 4, Logger: quiet(), Egress: rule})
	if err != nil {
		t.Fatal(err)
	}
	outOfProc, err = runtime.New(runtime.Options{PoolSize: 4, ExecPoolSize: 4, Logger: quiet(), Egress: rule})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range builtin.Kinds() {
		h, err := builtin.Handler(k)
		if err != nil {
			t.Fatal(err)
		}
		if err := inProc.Register(k, h); err != nil {
			t.Fatal(err)
		}
	}
	host, err := pluginhost.New(context.Background(), pluginhost.Options{
		Plugins: []pluginhost.PluginConfig{{
			Name: "builtin",
			Path: filepath.Join(binDir, "probed-builtin"),
			Args: builtin.Kinds(),
		}},
		Logger: quiet(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(host.Kinds(), ","); got != "exec,grpc,http,tcp" {
		t.Fatalf("plugin kinds %s", got)
	}
	if err := host.Register(outOfProc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = inProc.Close(ctx)
		_ = outOfProc.Close(ctx)
		if err := host.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return inProc, outOfProc
}

func spec(probe *v1.Probe) *runtime.Spec {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid"}}
	c := &v1.Container{Name: "app", Ports: []v1.ContainerPort{{Name: "web", ContainerPort: 1}},
		Env: []v1.EnvVar{{Name: "CODE", Value: "1"}}}
	if probe.TimeoutSeconds == 0 {
		probe.TimeoutSeconds = 1
	}
	return &runtime.Spec{Kind: runtime.KindOf(probe), ProbeType: runtime.Liveness, Pod: pod, Container: c, Probe: probe}
}

func httpGet(port int, path string) *v1.Probe {
	return &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: path, Port: intstr.FromInt32(int32(port))}}}
}

func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return n
}

// closedPort returns a loopback port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := portOf(t, l.Addr().String())
	l.Close()
	return p
}

// TestOutOfProcessEquivalence: every built-in kind served by `probed plugin
// serve` gives the verdict, output, status code, exit code and error of the
// in-process handler on the same case.
func TestOutOfProcessEquivalence(t *testing.T) {
	inProc, outOfProc := runtimes(t)

	mux := nethttp.NewServeMux()
	mux.HandleFunc("/ok", func(w nethttp.ResponseWriter, _ *nethttp.Request) { _, _ = io.WriteString(w, "all good") })
	mux.HandleFunc("/fail", func(w nethttp.ResponseWriter, _ *nethttp.Request) {
		w.WriteHeader(nethttp.StatusInternalServerError)
		_, _ = io.WriteString(w, "broken")
	})
	mux.HandleFunc("/redirect", func(w nethttp.ResponseWriter, r *nethttp.Request) { nethttp.Redirect(w, r, "/ok", nethttp.StatusFound) })
	mux.HandleFunc("/elsewhere", func(w nethttp.ResponseWriter, r *nethttp.Request) {
		nethttp.Redirect(w, r, "http://localhost.invalid/", nethttp.StatusFound)
	})
	mux.HandleFunc("/slow", func(w nethttp.ResponseWriter, r *nethttp.Request) {
		select {
		case <-time.After(3 * time.Second):
		case <-r.Context().Done():
		}
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	httpPort := portOf(t, srv.Listener.Addr().String())

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := ggrpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("down", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	go func() { _ = gs.Serve(lis) }()
	defer gs.Stop()
	grpcPort := int32(portOf(t, lis.Addr().String()))
	down := "down"

	closed := closedPort(t)
	cases := []struct {
		name  string
		probe *v1.Probe
	}{
		{"http 200", httpGet(httpPort, "/ok")},
		{"http 500", httpGet(httpPort, "/fail")},
		{"http redirect followed", httpGet(httpPort, "/redirect")},
		{"http redirect elsewhere", httpGet(httpPort, "/elsewhere")},
		{"http timeout", httpGet(httpPort, "/slow")},
		{"http bad port (closed)", httpGet(closed, "/")},
		{"http bad port (unknown name)", &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Port: intstr.FromString("metrcis")}}}},
		{"tcp open", &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(int32(httpPort))}}}},
		{"tcp closed", &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(int32(closed))}}}},
		{"exec exit 0", &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"sh", "-c", "echo fine"}}}}},
		{"exec exit 1", &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"sh", "-c", "echo bad $(CODE); exit $(CODE)"}}}}},
		{"exec timeout", &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"sleep", "5"}}}}},
		{"grpc serving", &v1.Probe{ProbeHandler: v1.ProbeHandler{GRPC: &v1.GRPCAction{Port: grpcPort}}}},
		{"grpc not serving", &v1.Probe{ProbeHandler: v1.ProbeHandler{GRPC: &v1.GRPCAction{Port: grpcPort, Service: &down}}}},
		{"grpc closed port", &v1.Probe{ProbeHandler: v1.ProbeHandler{GRPC: &v1.GRPCAction{Port: int32(closed)}}}},
	}
	target := runtime.Target{PodIP: "127.0.0.1", ContainerID: "containerd://abc"}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// Both at once: the timeout cases take their timeout each.
			var want runtime.Report
			done := make(chan struct{})
			go func() {
				defer close(done)
				want = inProc.Run(context.Background(), inProc.Prepare(spec(c.probe.DeepCopy())), target)
			}()
			got := outOfProc.Run(context.Background(), outOfProc.Prepare(spec(c.probe.DeepCopy())), target)
			<-done
			if (want.Err == nil) != (got.Err == nil) {
				t.Fatalf("in process: %+v, %v\nout of process: %+v, %v", want.Outcome, want.Err, got.Outcome, got.Err)
			}
			if want.Err != nil {
				if !strings.Contains(got.Err.Error(), want.Err.Error()) {
					t.Errorf("errors differ:\nin process:     %v\nout of process: %v", want.Err, got.Err)
				}
				return
			}
			w, g := want.Outcome, got.Outcome
			if w.Result != g.Result || w.Output != g.Output || w.StatusCode != g.StatusCode || w.ExitCode != g.ExitCode || len(g.Details) != 0 {
				t.Errorf("outcomes differ:\nin process:     %+v\nout of process: %+v", w, g)
			}
			t.Logf("%v %q (status %d, exit %d)", g.Result, g.Output, g.StatusCode, g.ExitCode)
		})
	}
}

// BenchmarkProbe compares one TCP probe (connect to a loopback listener)
// in process and through a plugin process (`probed plugin serve tcp`, the
// same handler behind go-plugin, gRPC and mutual TLS), one at a time and
// many at once. Results: docs/benchmarks.md, "Plugins".
func BenchmarkProbe(b *testing.B) {
	inProc, outOfProc := runtimes(b)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	_, p, _ := net.SplitHostPort(l.Addr().String())
	port, _ := strconv.Atoi(p)
	probe := &v1.Probe{TimeoutSeconds: 5, ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(int32(port))}}}
	target := runtime.Target{PodIP: "127.0.0.1"}
	for _, bc := range []struct {
		name string
		rt   *runtime.Runtime
	}{{"in-process", inProc}, {"plugin", outOfProc}} {
		b.Run(bc.name, func(b *testing.B) {
			prepared := bc.rt.Prepare(spec(probe.DeepCopy()))
			b.ReportAllocs()
			for b.Loop() {
				rep := bc.rt.Run(context.Background(), prepared, target)
				if rep.Err != nil || rep.Outcome.Result != runtime.Success {
					b.Fatalf("%+v", rep)
				}
			}
		})
		// 8 × GOMAXPROCS probes at once: throughput rather than latency.
		b.Run(bc.name+"-parallel", func(b *testing.B) {
			prepared := bc.rt.Prepare(spec(probe.DeepCopy()))
			b.ReportAllocs()
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					rep := bc.rt.Run(context.Background(), prepared, target)
					if rep.Err != nil || rep.Outcome.Result != runtime.Success {
						b.Errorf("%+v", rep)
						return
					}
				}
			})
		})
	}
}

// P4: every built-in kind (runtime.BuiltinKinds, the one list) can be
// served and has a description.
func TestP4_EveryBuiltinKindIsDescribed(t *testing.T) {
	if got, want := len(builtin.Kinds()), len(runtime.BuiltinKinds()); got != want {
		t.Fatalf("%d kinds served, %d built-in kinds", got, want)
	}
	for _, kind := range runtime.BuiltinKinds() {
		p, err := builtin.Plugin("test", kind)
		if err != nil {
			t.Fatalf("Plugin(%q): %v", kind, err)
		}
		if p.Kinds[0].Description == "" {
			t.Errorf("built-in kind %q has no description", kind)
		}
	}
}
