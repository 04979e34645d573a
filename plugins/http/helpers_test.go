package http

import (
	"context"
	"crypto/tls"
	"net"
	nethttp "net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/probed/probed/internal/nettest"
	"github.com/probed/probed/runtime"
)

const podIP = "127.0.0.1"

// httpSpec wraps g in a spec with timeoutSeconds 1 and the given container
// ports.
func httpSpec(g v1.HTTPGetAction, ports ...v1.ContainerPort) *runtime.Spec {
	return &runtime.Spec{
		Kind:      runtime.KindHTTP,
		ProbeType: runtime.Readiness,
		Probe: &v1.Probe{
			ProbeHandler:   v1.ProbeHandler{HTTPGet: &g},
			TimeoutSeconds: 1,
		},
		Container: &v1.Container{Name: "app", Ports: ports},
	}
}

// portOf returns the TCP port a test server listens on.
func portOf(t testing.TB, s *httptest.Server) int {
	t.Helper()
	return s.Listener.Addr().(*net.TCPAddr).Port
}

// get builds an action for path on port.
func get(port int, path string) v1.HTTPGetAction {
	return v1.HTTPGetAction{Path: path, Port: intstr.FromInt32(int32(port)), Scheme: v1.URISchemeHTTP}
}

// prepare prepares spec with h and fails the test on a Prepare error.
func prepare(t testing.TB, h runtime.Handler, spec *runtime.Spec) runtime.Prober {
	t.Helper()
	p, err := h.Prepare(spec)
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	return p
}

// probeWithin runs one attempt against pod IP ip with a context deadline d
// (the runtime's per-attempt deadline, P3).
func probeWithin(p runtime.Prober, ip string, d time.Duration) (runtime.Outcome, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return p.Probe(ctx, runtime.Target{PodIP: ip, Attempt: 1})
}

// run prepares g with a default handler and makes one attempt against
// 127.0.0.1 with the probe's own 1 s deadline.
func run(t testing.TB, g v1.HTTPGetAction, opts ...Option) (runtime.Outcome, error) {
	t.Helper()
	return probeWithin(prepare(t, New(opts...), httpSpec(g)), podIP, time.Second)
}

// serve starts a loopback HTTP server closed at the end of the test.
func serve(t testing.TB, f nethttp.HandlerFunc) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(f)
	t.Cleanup(s.Close)
	return s
}

// closedPort returns a loopback port nothing listens on.
func closedPort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

// selfSignedCert returns a self-signed certificate for dnsName, which no
// verifying client would accept for 127.0.0.1.
func selfSignedCert(t testing.TB, dnsName string) tls.Certificate {
	return nettest.Certificate(t, dnsName, time.Now().Add(time.Hour))
}

// wantOutcome checks a verdict, its output and a nil error.
func wantOutcome(t testing.TB, got runtime.Outcome, err error, result runtime.Result, output string) {
	t.Helper()
	if err != nil {
		t.Fatalf("error = %v, want nil (a verdict, not errored)", err)
	}
	if got.Result != result || got.Output != output {
		t.Fatalf("outcome = (%v, %q), want (%v, %q)", got.Result, got.Output, result, output)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
