package builtin_test

import (
	"context"
	"crypto/tls"
	"io"
	nethttp "net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/probed/probed/internal/nettest"
	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/expect"
)

// expiringCert is a self-signed certificate that expires at notAfter.
func expiringCert(t *testing.T, notAfter time.Time) tls.Certificate {
	return nettest.Certificate(t, "target.test", notAfter)
}

// Body checks out of process: an annotation probe's httpGet.expect and
// tcpSocket.expect reach a built-in kind served by `probed plugin serve`
// (in the spec parameter), which checks the status and the body as in
// process, and reports the target's certificate expiry back (a reserved
// detail) for the host's certificateExpiresAfterDays check: every case
// has the in-process verdict and output.
func TestOutOfProcessExpect(t *testing.T) {
	inProc, outOfProc := runtimes(t)
	mux := nethttp.NewServeMux()
	mux.HandleFunc("/up", func(w nethttp.ResponseWriter, _ *nethttp.Request) { _, _ = io.WriteString(w, `{"status":"up"}`) })
	mux.HandleFunc("/down", func(w nethttp.ResponseWriter, _ *nethttp.Request) {
		w.WriteHeader(nethttp.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `{"status":"down"}`)
	})
	plain := httptest.NewServer(mux)
	defer plain.Close()
	secure := httptest.NewUnstartedServer(mux)
	secure.TLS = &tls.Config{Certificates: []tls.Certificate{expiringCert(t, time.Now().Add(3*24*time.Hour+time.Hour))}}
	secure.StartTLS()
	defer secure.Close()

	get := func(port int, scheme v1.URIScheme, path string, e expect.Expect) *runtime.Spec {
		s := spec(&v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: path, Scheme: scheme, Port: intstr.FromInt32(int32(port))}}})
		s.Extension = &runtime.Extension{Expect: &e}
		return s
	}
	plainPort, securePort := portOf(t, plain.Listener.Addr().String()), portOf(t, secure.Listener.Addr().String())
	tcp := spec(&v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(int32(securePort))}}})
	tcp.Extension = &runtime.Extension{Expect: &expect.Expect{CertificateExpiresAfterDays: 7}}
	cases := []struct {
		name string
		spec *runtime.Spec
		want runtime.Result
		msg  string
	}{
		{"503 listed", get(plainPort, v1.URISchemeHTTP, "/down", expect.Expect{Status: []expect.StatusRange{{From: 503, To: 503}}}), runtime.Success, `{"status":"down"}`},
		{"jsonPath holds", get(plainPort, v1.URISchemeHTTP, "/up", expect.Expect{JSONPath: &expect.JSONPath{Path: ".status", Value: "up"}}), runtime.Success, `{"status":"up"}`},
		{"regex fails", get(plainPort, v1.URISchemeHTTP, "/up", expect.Expect{BodyRegex: "^down"}), runtime.Failure, "the body does not match expect.bodyRegex"},
		{"https certificate too close", get(securePort, v1.URISchemeHTTPS, "/up", expect.Expect{CertificateExpiresAfterDays: 30}), runtime.Failure, "the certificate expires in 3 days"},
		{"https certificate far enough", get(securePort, v1.URISchemeHTTPS, "/up", expect.Expect{CertificateExpiresAfterDays: 2}), runtime.Success, `{"status":"up"}`},
		{"tcp TLS certificate too close", tcp, runtime.Failure, "the certificate expires in 3 days"},
	}
	target := runtime.Target{PodIP: "127.0.0.1"}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := inProc.Run(context.Background(), inProc.Prepare(c.spec), target)
			got := outOfProc.Run(context.Background(), outOfProc.Prepare(c.spec), target)
			if want.Err != nil || got.Err != nil {
				t.Fatalf("errored: in process %v, out of process %v", want.Err, got.Err)
			}
			w, g := want.Outcome, got.Outcome
			if w.Result != c.want || !strings.Contains(w.Output, c.msg) {
				t.Fatalf("in process: %v %q, want %v %q", w.Result, w.Output, c.want, c.msg)
			}
			if w.Result != g.Result || w.Output != g.Output || w.StatusCode != g.StatusCode || !w.NotAfter.Equal(g.NotAfter) || len(g.Details) != 0 {
				t.Errorf("outcomes differ:\nin process:     %+v\nout of process: %+v", w, g)
			}
		})
	}
}
