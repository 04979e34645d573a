package grpc_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ggrpc "google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	v1 "k8s.io/api/core/v1"

	"github.com/probed/probed/internal/nettest"
	probegrpc "github.com/probed/probed/plugins/grpc"
	"github.com/probed/probed/runtime"
)

func grpcSpec(port int, service *string, mode *v1.GRPCProbeMode) *runtime.Spec {
	return &runtime.Spec{
		Kind:      runtime.KindGRPC,
		ProbeType: runtime.Readiness,
		Container: &v1.Container{Name: "c"},
		Probe: &v1.Probe{
			ProbeHandler:   v1.ProbeHandler{GRPC: &v1.GRPCAction{Port: int32(port), Service: service, Mode: mode}},
			TimeoutSeconds: 1,
		},
	}
}

func ptr[T any](v T) *T { return &v }

// prepare returns the prepared prober for spec.
func prepare(t *testing.T, spec *runtime.Spec) runtime.Prober {
	t.Helper()
	p, err := probegrpc.New().Prepare(spec)
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	return p
}

// probe makes one attempt against host with the probe deadline on ctx (P3)
// and returns the outcome and the time it took.
func probe(t *testing.T, p runtime.Prober, host string) (runtime.Outcome, error, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	out, err := p.Probe(ctx, runtime.Target{PodIP: host, Attempt: 1})
	return out, err, time.Since(start)
}

// serve starts a gRPC server on a loopback listener (network "tcp4" on
// 127.0.0.1 or "tcp6" on ::1) and returns its port; it stops with the test.
func serve(t *testing.T, lis net.Listener, register func(*ggrpc.Server), opts ...ggrpc.ServerOption) int {
	t.Helper()
	s := ggrpc.NewServer(opts...)
	if register != nil {
		register(s)
	}
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return lis.Addr().(*net.TCPAddr).Port
}

func listen(t *testing.T, addr string) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	return lis
}

// healthServer serves grpc.health.v1 with "" SERVING and the given statuses.
func healthServer(t *testing.T, lis net.Listener, statuses map[string]healthpb.HealthCheckResponse_ServingStatus, opts ...ggrpc.ServerOption) int {
	hs := health.NewServer()
	for svc, st := range statuses {
		hs.SetServingStatus(svc, st)
	}
	return serve(t, lis, func(s *ggrpc.Server) { healthpb.RegisterHealthServer(s, hs) }, opts...)
}

// closedPort returns a loopback port nothing listens on.
func closedPort(t *testing.T, host string) int {
	lis := listen(t, net.JoinHostPort(host, "0"))
	port := lis.Addr().(*net.TCPAddr).Port
	_ = lis.Close()
	return port
}

// recordingHealth answers SERVING and records the user agent and service of
// each call; with delay it first sleeps that long.
type recordingHealth struct {
	healthpb.UnimplementedHealthServer
	delay time.Duration
	slept chan struct{} // with delay: receives once per call after the sleep

	mu       sync.Mutex
	agents   []string
	services []string
}

func (h *recordingHealth) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	h.mu.Lock()
	h.agents = append(h.agents, strings.Join(md.Get("user-agent"), ","))
	h.services = append(h.services, req.GetService())
	h.mu.Unlock()
	if h.delay > 0 {
		// Sleep regardless of the call's deadline: a server-side deadline
		// (from grpc-timeout) may fire a hair before the client's.
		time.Sleep(h.delay)
		h.slept <- struct{}{}
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func want(t *testing.T, got runtime.Outcome, err error, result runtime.Result, output string) {
	t.Helper()
	if err != nil {
		t.Fatalf("err = %v, want nil (G2: every verdict has a nil error)", err)
	}
	if got.Result != result || got.Output != output {
		t.Fatalf("outcome = %v %q, want %v %q", got.Result, got.Output, result, output)
	}
}

// TestGR1_EmptyHostConnectTimeout is GR1's first case: an empty pod IP
// dials ":<port>" (the local system); nothing listens, the connection is
// retried until the deadline, and the verdict is the connect-timeout text.
func TestGR1_EmptyHostConnectTimeout(t *testing.T) {
	t.Parallel()
	port := closedPort(t, "127.0.0.1")
	got, err, took := probe(t, prepare(t, grpcSpec(port, nil, nil)), "")
	want(t, got, err, runtime.Failure, fmt.Sprintf(`timeout: failed to connect service ":%d" within 1s: context deadline exceeded`, port))
	if took > 1500*time.Millisecond {
		t.Fatalf("took %v", took)
	}
}

// TestGR1_ClosedPortConnectTimeout: a refused port on the pod IP is the
// same connect-timeout Failure (the kubelet's blocking dial retries until its
// deadline).
func TestGR1_ClosedPortConnectTimeout(t *testing.T) {
	t.Parallel()
	port := closedPort(t, "127.0.0.1")
	got, err, _ := probe(t, prepare(t, grpcSpec(port, nil, nil)), "127.0.0.1")
	want(t, got, err, runtime.Failure, fmt.Sprintf(`timeout: failed to connect service "127.0.0.1:%d" within 1s: context deadline exceeded`, port))
}

// TestGR1_HTTPServerIsFailure: a plain HTTP/1.1 server never completes the
// gRPC handshake: Failure, nil error.
func TestGR1_HTTPServerIsFailure(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	t.Cleanup(srv.Close)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	got, err, _ := probe(t, prepare(t, grpcSpec(port, nil, nil)), "127.0.0.1")
	want(t, got, err, runtime.Failure, fmt.Sprintf(`timeout: failed to connect service "127.0.0.1:%d" within 1s: context deadline exceeded`, port))
}

// TestGR1_NotServing: a NOT_SERVING answer is a Failure with the exact G2
// text and the status number.
func TestGR1_NotServing(t *testing.T) {
	t.Parallel()
	port := healthServer(t, listen(t, "127.0.0.1:0"), map[string]healthpb.HealthCheckResponse_ServingStatus{"": healthpb.HealthCheckResponse_NOT_SERVING})
	got, err, _ := probe(t, prepare(t, grpcSpec(port, nil, nil)), "127.0.0.1")
	want(t, got, err, runtime.Failure, `service unhealthy (responded with "NOT_SERVING")`)
	if got.StatusCode != int(healthpb.HealthCheckResponse_NOT_SERVING) {
		t.Fatalf("StatusCode = %d", got.StatusCode)
	}
}

// TestGR1_RPCDeadline: a server that answers after the deadline (timeout
// 1 s, server delay 2 s) gives `timeout: health rpc did not complete within
// 1s`, at ~1 s.
func TestGR1_RPCDeadline(t *testing.T) {
	t.Parallel()
	h := &recordingHealth{delay: 2 * time.Second, slept: make(chan struct{}, 1)}
	t.Cleanup(func() { // runs after the server's Stop: no handler left behind
		select {
		case <-h.slept:
		case <-time.After(5 * time.Second):
			t.Error("the sleeping handler did not return")
		}
	})
	port := serve(t, listen(t, "127.0.0.1:0"), func(s *ggrpc.Server) { healthpb.RegisterHealthServer(s, h) })
	got, err, took := probe(t, prepare(t, grpcSpec(port, nil, nil)), "127.0.0.1")
	want(t, got, err, runtime.Failure, "timeout: health rpc did not complete within 1s")
	if took > 1500*time.Millisecond {
		t.Fatalf("took %v, want ~1 s", took)
	}
}

// TestGR1_ServingTwice: SERVING is Success "service healthy", twice with the
// same prepared prober.
func TestGR1_ServingTwice(t *testing.T) {
	t.Parallel()
	port := healthServer(t, listen(t, "127.0.0.1:0"), nil)
	p := prepare(t, grpcSpec(port, nil, nil))
	for i := 0; i < 2; i++ {
		got, err, _ := probe(t, p, "127.0.0.1")
		want(t, got, err, runtime.Success, "service healthy")
		if got.StatusCode != int(healthpb.HealthCheckResponse_SERVING) {
			t.Fatalf("StatusCode = %d", got.StatusCode)
		}
	}
}

// TestG2_Unimplemented: a gRPC server without the health service gives the
// Unimplemented text with the server's message.
func TestG2_Unimplemented(t *testing.T) {
	t.Parallel()
	port := serve(t, listen(t, "127.0.0.1:0"), nil)
	got, err, _ := probe(t, prepare(t, grpcSpec(port, nil, nil)), "127.0.0.1")
	want(t, got, err, runtime.Failure, "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): unknown service grpc.health.v1.Health")
}

// TestG2_OtherRPCError: any other RPC error (NotFound for an unknown
// service) gives `error: health rpc probe failed: <err>`.
func TestG2_OtherRPCError(t *testing.T) {
	t.Parallel()
	port := healthServer(t, listen(t, "127.0.0.1:0"), nil)
	got, err, _ := probe(t, prepare(t, grpcSpec(port, ptr("no.such.Service"), nil)), "127.0.0.1")
	want(t, got, err, runtime.Failure, "error: health rpc probe failed: rpc error: code = NotFound desc = unknown service")
}

// TestG1_UserAgentAndService: the server sees the user agent
// "kube-probe/1.37" (plus grpc-go's suffix) and the service, "" when nil.
func TestG1_UserAgentAndService(t *testing.T) {
	t.Parallel()
	h := &recordingHealth{}
	port := serve(t, listen(t, "127.0.0.1:0"), func(s *ggrpc.Server) { healthpb.RegisterHealthServer(s, h) })
	for _, svc := range []*string{nil, ptr("my.Service")} {
		got, err, _ := probe(t, prepare(t, grpcSpec(port, svc, nil)), "127.0.0.1")
		want(t, got, err, runtime.Success, "service healthy")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.agents) != 2 {
		t.Fatalf("server saw %d calls", len(h.agents))
	}
	for _, ua := range h.agents {
		if !strings.HasPrefix(ua, "kube-probe/1.37") || !strings.Contains(ua, "grpc-go/") {
			t.Fatalf("user agent = %q, want kube-probe/1.37 grpc-go/…", ua)
		}
	}
	if h.services[0] != "" || h.services[1] != "my.Service" {
		t.Fatalf("services = %q, want [\"\" \"my.Service\"]", h.services)
	}
}

// TestG1_IPv6: an IPv6 pod IP is joined with brackets: ::1 works, and a
// closed port's text shows "[::1]:port".
func TestG1_IPv6(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("IPv6 loopback unavailable: %v", err)
	}
	port := healthServer(t, lis, nil)
	got, err, _ := probe(t, prepare(t, grpcSpec(port, nil, nil)), "::1")
	want(t, got, err, runtime.Success, "service healthy")

	closed := closedPort(t, "::1")
	got, err, _ = probe(t, prepare(t, grpcSpec(closed, nil, nil)), "::1")
	want(t, got, err, runtime.Failure, fmt.Sprintf(`timeout: failed to connect service "[::1]:%d" within 1s: context deadline exceeded`, closed))
}

// selfSigned returns a TLS server certificate nobody signed.
func selfSigned(t *testing.T) tls.Certificate {
	return nettest.Certificate(t, "svc.example.test", time.Now().Add(time.Hour))
}

// TestG1_TLSMode: mode TLS talks TLS without verifying the (self-signed,
// wrong-name) certificate → Success; plaintext (default or explicit) against
// the TLS server and TLS against a plaintext server never connect → Failure.
func TestG1_TLSMode(t *testing.T) {
	t.Parallel()
	creds := credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{selfSigned(t)}})
	tlsPort := healthServer(t, listen(t, "127.0.0.1:0"), nil, ggrpc.Creds(creds))
	plainPort := healthServer(t, listen(t, "127.0.0.1:0"), nil)
	tlsMode := ptr(v1.GRPCProbeModeTLS)
	plainMode := ptr(v1.GRPCProbeModePlaintext)

	got, err, _ := probe(t, prepare(t, grpcSpec(tlsPort, nil, tlsMode)), "127.0.0.1")
	want(t, got, err, runtime.Success, "service healthy")
	got, err, _ = probe(t, prepare(t, grpcSpec(plainPort, nil, plainMode)), "127.0.0.1")
	want(t, got, err, runtime.Success, "service healthy")

	var wg sync.WaitGroup
	for name, c := range map[string]struct {
		port int
		mode *v1.GRPCProbeMode
	}{
		"default plaintext vs TLS":  {tlsPort, nil},
		"explicit plaintext vs TLS": {tlsPort, plainMode},
		"TLS vs plaintext":          {plainPort, tlsMode},
	} {
		wg.Go(func() {
			got, err, _ := probe(t, prepare(t, grpcSpec(c.port, nil, c.mode)), "127.0.0.1")
			if err != nil || got.Result != runtime.Failure || !strings.HasPrefix(got.Output, "timeout: failed to connect service") {
				t.Errorf("%s: %v %q, %v; want connect-timeout failure", name, got.Result, got.Output, err)
			}
		})
	}
	wg.Wait()
}

// countingListener counts accepted and closed server-side connections.
type countingListener struct {
	net.Listener
	accepted, closed atomic.Int32
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.accepted.Add(1)
	return &countingConn{Conn: c, l: l}, nil
}

type countingConn struct {
	net.Conn
	l    *countingListener
	once sync.Once
}

func (c *countingConn) Close() error {
	c.once.Do(func() { c.l.closed.Add(1) })
	return c.Conn.Close()
}

// TestG1_ConnectionPerProbeClosed: every probe opens its own connection and
// closes it (the server sees the client go away); nothing is reused across
// runs.
func TestG1_ConnectionPerProbeClosed(t *testing.T) {
	t.Parallel()
	lis := &countingListener{Listener: listen(t, "127.0.0.1:0")}
	port := healthServer(t, lis, nil)
	p := prepare(t, grpcSpec(port, nil, nil))
	for i := int32(1); i <= 3; i++ {
		got, err, _ := probe(t, p, "127.0.0.1")
		want(t, got, err, runtime.Success, "service healthy")
		if n := lis.accepted.Load(); n != i {
			t.Fatalf("after probe %d: %d connections accepted, want %d", i, n, i)
		}
		deadline := time.Now().Add(2 * time.Second)
		for lis.closed.Load() != i {
			if time.Now().After(deadline) {
				t.Fatalf("after probe %d: %d connections closed, want %d", i, lis.closed.Load(), i)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// TestG1_CancelIsErrored: a cancelled (not timed-out) context makes the
// attempt errored with context.Canceled instead of a Failure verdict.
func TestG1_CancelIsErrored(t *testing.T) {
	t.Parallel()
	port := closedPort(t, "127.0.0.1")
	p := prepare(t, grpcSpec(port, nil, nil))
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	got, err := p.Probe(ctx, runtime.Target{PodIP: "127.0.0.1"})
	if !errors.Is(err, context.Canceled) || got.Result != runtime.Unknown {
		t.Fatalf("outcome %v %q, err %v; want unknown with context.Canceled", got.Result, got.Output, err)
	}
}

// TestPrepareErrors: specs that cannot be probed are errored at Prepare.
func TestPrepareErrors(t *testing.T) {
	for name, spec := range map[string]*runtime.Spec{
		"nil spec":     nil,
		"nil probe":    {Kind: runtime.KindGRPC},
		"no grpc":      {Kind: runtime.KindGRPC, Probe: &v1.Probe{}},
		"port 0":       grpcSpec(0, nil, nil),
		"port 65536":   grpcSpec(65536, nil, nil),
		"unknown mode": grpcSpec(80, nil, ptr(v1.GRPCProbeMode("mTLS"))),
	} {
		if p, err := probegrpc.New().Prepare(spec); err == nil || p != nil {
			t.Errorf("%s: Prepare = (%v, %v), want an error", name, p, err)
		}
	}
	if _, err := probegrpc.New().Prepare(grpcSpec(0, nil, nil)); err == nil || err.Error() != "invalid port number: 0" {
		t.Errorf("port 0: err = %v", err)
	}
}
