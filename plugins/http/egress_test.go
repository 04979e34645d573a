package http

import (
	"context"
	nethttp "net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/probed/probed/internal/standin"
	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/egress"
)

// Tests of the egress rule in cluster mode (runtime/egress): a
// probe connects only to its pod's IP, and its texts carry nothing the
// target sent beyond the status code.

// podPolicy is the context of an attempt with deadline d under the egress
// policy of a pod whose IP is podIP (127.0.0.1) and the allowed ranges.
func podPolicy(t *testing.T, d time.Duration, allow ...string) context.Context {
	t.Helper()
	return standin.PodContext(t, d, podIP, allow...)
}

// TestEgressRefusesAHostThatIsNotThePod: httpGet.host 127.0.0.2 with the
// issue's metadata path and header is refused at dial time under a policy
// of pod IP 127.0.0.1: a Failure naming the egress policy, and the
// stand-in sees no connection; an allowed range lets it through.
func TestEgressRefusesAHostThatIsNotThePod(t *testing.T) {
	s := standin.HTTP(t, "127.0.0.2:0", "metadata")
	port := s.Port()
	g := v1.HTTPGetAction{Host: "127.0.0.2", Port: intstr.FromInt32(int32(port)), Path: "/computeMetadata/v1/",
		HTTPHeaders: []v1.HTTPHeader{{Name: "Metadata-Flavor", Value: "Google"}}}
	p := prepare(t, New(), httpSpec(g))
	out, err := p.Probe(podPolicy(t, time.Second), runtime.Target{PodIP: podIP, Attempt: 1})
	want := `Get "http://127.0.0.2:` + itoa(port) + `/computeMetadata/v1/": dial tcp 127.0.0.2:` + itoa(port) + ": " + egress.DeniedText
	wantOutcome(t, out, err, runtime.Failure, want)
	s.NoConnection(t)
	out, err = p.Probe(podPolicy(t, time.Second, "127.0.0.2/32"), runtime.Target{PodIP: podIP, Attempt: 1})
	wantOutcome(t, out, err, runtime.Success, "metadata")
	if r := s.Requests(); len(r) != 1 || !strings.Contains(r[0], "Metadata-Flavor: Google") {
		t.Fatalf("with 127.0.0.2/32 allowed the stand-in read %q, want the probe's request", r)
	}
}

// TestEgressRefusesARedirectOffThePod: the pod's own target redirects to
// 127.0.0.2; with redirects to other hosts followed (the H5 "true" mode,
// where the kubelet's hostname rule does not stop it) the redirect is
// refused at dial time, the stand-in sees no connection, and the output
// names the probe's own URL, not the Location the target sent.
func TestEgressRefusesARedirectOffThePod(t *testing.T) {
	standIn := standin.HTTP(t, "127.0.0.2:0", "metadata")
	location := "http://127.0.0.2:" + itoa(standIn.Port()) + "/computeMetadata/v1/?token=SECRET-FROM-TARGET"
	s := serve(t, func(w nethttp.ResponseWriter, r *nethttp.Request) {
		nethttp.Redirect(w, r, location, nethttp.StatusFound)
	})
	p := prepare(t, New(FollowNonLocalRedirects(true)), httpSpec(get(portOf(t, s), "/ready")))

	out, err := p.Probe(podPolicy(t, time.Second), runtime.Target{PodIP: podIP, Attempt: 1})
	want := `Get "http://127.0.0.1:` + itoa(portOf(t, s)) + `/ready": dial tcp: ` + egress.DeniedText
	wantOutcome(t, out, err, runtime.Failure, want)
	standIn.NoConnection(t)

	// Without a policy (manifest mode) the kubelet's behaviour holds: the
	// redirect is followed.
	out, err = probeWithin(p, podIP, time.Second)
	wantOutcome(t, out, err, runtime.Success, "metadata")
	if n := standIn.Connections(); n != 1 {
		t.Fatalf("without a policy the stand-in saw %d connections, want 1", n)
	}
}

// TestEgressWithholdsTheTargetsBytes: texts that would quote what a target
// sent carry none of it under a policy — an SSH banner read as an HTTP
// status line, a redirect loop's Location — and keep the kubelet's exact
// texts without one (H6).
func TestEgressWithholdsTheTargetsBytes(t *testing.T) {
	banner := standin.Banner(t, "127.0.0.1:0", "SSH-2.0-OpenSSH_9.2p1\r\n").Port()
	p := prepare(t, New(), httpSpec(get(banner, "/")))

	out, err := probeWithin(p, podIP, time.Second)
	if err != nil || out.Result != runtime.Failure || !strings.Contains(out.Output, `malformed HTTP response "SSH-2.0-OpenSSH_9.2p1"`) {
		t.Fatalf("without a policy: (%v, %q, %v), want the kubelet's text with the banner", out.Result, out.Output, err)
	}
	out, err = p.Probe(podPolicy(t, time.Second), runtime.Target{PodIP: podIP, Attempt: 1})
	wantOutcome(t, out, err, runtime.Failure, `Get "http://127.0.0.1:`+itoa(banner)+`/": `+egress.WithheldText)
	if out.Cause == nil || !strings.Contains(out.Cause.Error(), "SSH-2.0") {
		t.Errorf("Cause %v: the runtime still needs the real error", out.Cause)
	}

	loop := serve(t, func(w nethttp.ResponseWriter, r *nethttp.Request) {
		nethttp.Redirect(w, r, "/loop?from-target=SECRET", nethttp.StatusFound)
	})
	lp := prepare(t, New(), httpSpec(get(portOf(t, loop), "/start")))
	out, err = probeWithin(lp, podIP, time.Second)
	if err != nil || !strings.Contains(out.Output, "SECRET") {
		t.Fatalf("without a policy: %q, %v, want the kubelet's text with the Location", out.Output, err)
	}
	out, err = lp.Probe(podPolicy(t, time.Second), runtime.Target{PodIP: podIP, Attempt: 1})
	wantOutcome(t, out, err, runtime.Failure, `Get "http://127.0.0.1:`+itoa(portOf(t, loop))+`/start": stopped after 10 redirects`)

	// A refused connection to the pod itself keeps its text: addresses
	// probed dialled and the errno, nothing of a target's.
	closed := closedPort(t)
	out, err = prepare(t, New(), httpSpec(get(closed, "/"))).Probe(podPolicy(t, time.Second), runtime.Target{PodIP: podIP, Attempt: 1})
	wantOutcome(t, out, err, runtime.Failure, `Get "http://127.0.0.1:`+itoa(closed)+`/": dial tcp 127.0.0.1:`+itoa(closed)+`: connect: connection refused`)
}

// TestEgressHostHeaderDoesNotSteerTheDial: a Host header only names the
// virtual host (H2); under a policy the connection still goes to the pod
// IP, so it cannot reach another address.
func TestEgressHostHeaderDoesNotSteerTheDial(t *testing.T) {
	standIn := standin.HTTP(t, "127.0.0.2:0", "metadata")
	var host atomic.Value
	s := serve(t, func(_ nethttp.ResponseWriter, r *nethttp.Request) { host.Store(r.Host) })
	g := get(portOf(t, s), "/")
	g.HTTPHeaders = []v1.HTTPHeader{{Name: "Host", Value: "127.0.0.2"}}
	out, err := prepare(t, New(), httpSpec(g)).Probe(podPolicy(t, time.Second), runtime.Target{PodIP: podIP, Attempt: 1})
	wantOutcome(t, out, err, runtime.Success, "")
	if host.Load() != "127.0.0.2" {
		t.Fatalf("Host %v: want the pod's server with Host 127.0.0.2", host.Load())
	}
	standIn.NoConnection(t)
}

// TestEgressCoversEveryTransport: cleartext HTTP/2 (protocol HTTP2) and
// HTTPS dial through the same checked dialer: under a policy that does not
// allow the target, neither connects.
func TestEgressCoversEveryTransport(t *testing.T) {
	s := standin.HTTP(t, "127.0.0.1:0", "ok")
	h2c := v1.HTTPProtocolHTTP2
	h2 := get(s.Port(), "/")
	h2.Protocol = &h2c
	tlsGet := get(s.Port(), "/")
	tlsGet.Scheme = v1.URISchemeHTTPS
	for name, g := range map[string]v1.HTTPGetAction{"h2c": h2, "https": tlsGet} {
		ctx := standin.PodContext(t, time.Second, "10.9.9.9")
		out, err := prepare(t, New(), httpSpec(g)).Probe(ctx, runtime.Target{PodIP: podIP, Attempt: 1})
		if err != nil || out.Result != runtime.Failure || !strings.HasSuffix(out.Output, "dial tcp "+s.Addr()+": "+egress.DeniedText) {
			t.Errorf("%s: (%v, %q, %v), want refused by the egress policy", name, out.Result, out.Output, err)
		}
	}
	s.NoConnection(t)
}
