package http

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	nethttp "net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/expect"
)

// expectSpec is httpSpec with an annotation probe's httpGet.expect.
func expectSpec(g v1.HTTPGetAction, e expect.Expect) *runtime.Spec {
	s := httpSpec(g)
	s.Extension = &runtime.Extension{Expect: &e}
	return s
}

// Without expect.status a redirect not followed is the
// kubelet's Warning (H6) even with body checks; listing its code makes it
// a Success.
func TestExpect_RedirectWarningUnlessListed(t *testing.T) {
	s := serve(t, func(w nethttp.ResponseWriter, r *nethttp.Request) {
		nethttp.Redirect(w, r, "http://elsewhere.invalid/", nethttp.StatusFound)
	})
	g := get(portOf(t, s), "/")
	out, err := probeWithin(prepare(t, New(), expectSpec(g, expect.Expect{BodyRegex: ".*"})), podIP, time.Second)
	if err != nil || out.Result != runtime.Warning || out.Output != "Probe terminated redirects" || out.StatusCode != 302 {
		t.Fatalf("unlisted 302: %+v, %v; want the kubelet's Warning", out, err)
	}
	out, err = probeWithin(prepare(t, New(), expectSpec(g, expect.Expect{Status: []expect.StatusRange{{From: 302, To: 302}}})), podIP, time.Second)
	if err != nil || out.Result != runtime.Success || out.StatusCode != 302 {
		t.Fatalf("listed 302: %+v, %v; want Success", out, err)
	}
}

// The body checks see at most runtime.MaxOutputBytes (10 KiB,
// the kubelet's limit, H6): text past it is never read.
func TestExpect_BodyReadUpToTheLimit(t *testing.T) {
	s := serve(t, func(w nethttp.ResponseWriter, _ *nethttp.Request) {
		fmt.Fprint(w, strings.Repeat("x", runtime.MaxOutputBytes)+"MARK")
	})
	g := get(portOf(t, s), "/")
	out, _ := probeWithin(prepare(t, New(), expectSpec(g, expect.Expect{BodyRegex: "MARK"})), podIP, time.Second)
	if out.Result != runtime.Failure || out.Output != "HTTP probe failed: the body does not match expect.bodyRegex" {
		t.Fatalf("a match past 10 KiB: %v %q, want the Failure", out.Result, out.Output)
	}
	out, _ = probeWithin(prepare(t, New(), expectSpec(g, expect.Expect{BodyRegex: "^x+$"})), podIP, time.Second)
	if out.Result != runtime.Success {
		t.Fatalf("a match of the first 10 KiB: %v %q", out.Result, out.Output)
	}
}

// With expect, an HTTPS answer reports its certificate's
// expiry for the runtime's certificateExpiresAfterDays check; a spec
// probe's outcome stays the kubelet's (no NotAfter), and an expect that
// does not compile is a Prepare error.
func TestExpect_NotAfterOfHTTPS(t *testing.T) {
	cert := selfSignedCert(t, "svc.example.test")
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewUnstartedServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, _ *nethttp.Request) { fmt.Fprint(w, "ok") }))
	s.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	s.StartTLS()
	t.Cleanup(s.Close)
	g := get(portOf(t, s), "/")
	g.Scheme = v1.URISchemeHTTPS
	out, err := probeWithin(prepare(t, New(), expectSpec(g, expect.Expect{CertificateExpiresAfterDays: 1})), podIP, time.Second)
	if err != nil || out.Result != runtime.Success || !out.NotAfter.Equal(leaf.NotAfter) {
		t.Fatalf("HTTPS with expect: %+v, %v; want the certificate's NotAfter %v", out, err, leaf.NotAfter)
	}
	out, _ = probeWithin(prepare(t, New(), httpSpec(g)), podIP, time.Second)
	if !out.NotAfter.IsZero() {
		t.Fatalf("a spec probe's outcome carries NotAfter %v", out.NotAfter)
	}
	if _, err := New().Prepare(expectSpec(g, expect.Expect{BodyRegex: "("})); err == nil || !strings.Contains(err.Error(), "expect.bodyRegex") {
		t.Fatalf("Prepare of a bad regex: %v", err)
	}
}
