package http

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	nethttp "net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/probed/probed/plugins/internal/dialer"
	"github.com/probed/probed/runtime"
)

// HT1 (TestHTTPProbeProxy): HTTP_PROXY/HTTPS_PROXY pointing at a local
// proxy are ignored (H3). Go itself never proxies loopback targets, so the
// proof uses a target name that does not resolve: through the proxy it
// would succeed, without it the attempt fails on name resolution.
func TestHT1_ProxyEnvIgnored(t *testing.T) {
	var proxied atomic.Int32
	proxy := serve(t, func(w nethttp.ResponseWriter, r *nethttp.Request) {
		proxied.Add(1)
		io.WriteString(w, "via proxy")
	})
	for _, k := range []string{"HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"} {
		t.Setenv(k, proxy.URL)
	}
	for _, k := range []string{"NO_PROXY", "no_proxy"} {
		t.Setenv(k, "")
	}

	// A loopback target answers directly.
	target := serve(t, func(w nethttp.ResponseWriter, r *nethttp.Request) { io.WriteString(w, "direct") })
	got, err := run(t, get(portOf(t, target), "/"))
	wantOutcome(t, got, err, runtime.Success, "direct")

	// A non-loopback name would be proxied by a proxy-aware transport.
	const name = "probed-ht1.invalid"
	skipIfResolves(t, name)
	g := get(portOf(t, target), "/")
	g.Host = name
	got, err = run(t, g)
	if err != nil || got.Result != runtime.Failure || !strings.Contains(got.Output, name) {
		t.Fatalf("probe of %s = (%v, %q, %v), want a name-resolution Failure", name, got.Result, got.Output, err)
	}
	if n := proxied.Load(); n != 0 {
		t.Fatalf("the proxy received %d requests, want 0", n)
	}
	// net/http reads the proxy environment once per process, so the check
	// above only bites when it runs first; the transport must not consult
	// any proxy function at all.
	h := New().(*handler)
	for _, h2c := range []bool{false, true} {
		for _, injected := range []bool{false, true} {
			if h.client(clientKey{timeout: time.Second, h2c: h2c, onInjectedClock: injected}).Transport.(*nethttp.Transport).Proxy != nil {
				t.Fatalf("h2c=%v, injected clock=%v: transport has a proxy function", h2c, injected)
			}
		}
	}
}

// skipIfResolves makes name lookups of the probe dialers fail without a
// DNS query for the rest of the test, so a test never sends traffic off
// loopback; it skips when /etc/hosts maps the name.
func skipIfResolves(t *testing.T, name string) {
	t.Helper()
	t.Cleanup(dialer.NoDNSForTests())
	r := &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("DNS disabled in tests")
	}}
	if addrs, err := r.LookupHost(context.Background(), name); err == nil {
		t.Skipf("%s is in /etc/hosts here: %v", name, addrs)
	}
}

// HT2 (TestHTTPProbeChecker): status, headers, timeout and redirect
// handling of a single attempt.
func TestHT2_HTTPProbeChecker(t *testing.T) {
	echo := func(w nethttp.ResponseWriter, r *nethttp.Request) {
		// Echo what the test asks for; "-" when the header was absent.
		q := r.URL.Query().Get("h")
		switch {
		case q == "Host":
			io.WriteString(w, r.Host)
		case r.Header[q] == nil:
			io.WriteString(w, "-")
		default:
			io.WriteString(w, strings.Join(r.Header[q], ","))
		}
	}
	s := serve(t, echo)
	port := portOf(t, s)
	hdr := func(name, value string) []v1.HTTPHeader { return []v1.HTTPHeader{{Name: name, Value: value}} }

	cases := []struct {
		name    string
		path    string
		headers []v1.HTTPHeader
		result  runtime.Result
		output  string
	}{
		{"200 with body", "/?h=X-None", nil, runtime.Success, "-"},
		{"custom header echoed", "/?h=X-Custom", hdr("X-Custom", "value"), runtime.Success, "value"},
		{"custom user-agent kept", "/?h=User-Agent", hdr("User-Agent", "foo/1.0"), runtime.Success, "foo/1.0"},
		{"empty user-agent: none sent", "/?h=User-Agent", hdr("User-Agent", ""), runtime.Success, "-"},
		{"default user-agent", "/?h=User-Agent", nil, runtime.Success, runtime.KubeProbeUserAgent},
		{"default accept", "/?h=Accept", nil, runtime.Success, "*/*"},
		{"accept override", "/?h=Accept", hdr("Accept", "text/html"), runtime.Success, "text/html"},
		{"empty accept removed", "/?h=Accept", hdr("Accept", ""), runtime.Success, "-"},
		{"host override", "/?h=Host", hdr("Host", "probe.example.test"), runtime.Success, "probe.example.test"},
		{"no host override", "/?h=Host", nil, runtime.Success, "127.0.0.1:" + itoa(port)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := get(port, c.path)
			g.HTTPHeaders = c.headers
			got, err := run(t, g)
			wantOutcome(t, got, err, c.result, c.output)
			if !strings.HasPrefix(runtime.KubeProbeUserAgent, "kube-probe/") {
				t.Fatalf("KubeProbeUserAgent = %q", runtime.KubeProbeUserAgent)
			}
		})
	}

	t.Run("500", func(t *testing.T) {
		s := serve(t, func(w nethttp.ResponseWriter, r *nethttp.Request) {
			w.WriteHeader(nethttp.StatusInternalServerError)
		})
		got, err := run(t, get(portOf(t, s), "/"))
		wantOutcome(t, got, err, runtime.Failure, "HTTP probe failed with statuscode: 500")
		if got.StatusCode != 500 {
			t.Fatalf("StatusCode = %d, want 500", got.StatusCode)
		}
	})

	t.Run("no response (upstream status -1)", func(t *testing.T) {
		s := serve(t, func(w nethttp.ResponseWriter, r *nethttp.Request) { panic(nethttp.ErrAbortHandler) })
		got, err := run(t, get(portOf(t, s), "/"))
		if err != nil || got.Result != runtime.Failure || !strings.Contains(got.Output, "EOF") || got.StatusCode != 0 {
			t.Fatalf("outcome = (%v, %q, %d, %v), want Failure with an EOF transport error", got.Result, got.Output, got.StatusCode, err)
		}
	})

	t.Run("timeout", func(t *testing.T) {
		s := serve(t, func(w nethttp.ResponseWriter, r *nethttp.Request) { <-r.Context().Done() })
		p := prepare(t, New(), httpSpec(get(portOf(t, s), "/")))
		start := time.Now()
		got, err := probeWithin(p, podIP, 150*time.Millisecond)
		if err != nil || got.Result != runtime.Failure {
			t.Fatalf("outcome = (%v, %q, %v), want Failure", got.Result, got.Output, err)
		}
		if !strings.HasSuffix(got.Output, "context deadline exceeded (Client.Timeout exceeded while awaiting headers)") {
			t.Fatalf("output = %q, want the client timeout error", got.Output)
		}
		if d := time.Since(start); d > 900*time.Millisecond {
			t.Fatalf("attempt took %v, want about 150ms", d)
		}
	})

	for _, code := range []int{301, 302, 307, 308} {
		for _, c := range []struct {
			to     string
			result runtime.Result
			output string
		}{
			{"/ok", runtime.Success, "ok"},
			{"/fail", runtime.Failure, "HTTP probe failed with statuscode: 500"},
		} {
			t.Run("redirect "+itoa(code)+" to "+c.to, func(t *testing.T) {
				s := serve(t, redirector(code))
				got, err := run(t, get(portOf(t, s), "/redirect?to="+c.to))
				wantOutcome(t, got, err, c.result, c.output)
			})
		}
	}
}

// redirector serves /ok (200 "ok"), /fail (500 "fail") and
// /redirect?to=LOC (code, Location LOC, body "moved").
func redirector(code int) nethttp.HandlerFunc {
	return func(w nethttp.ResponseWriter, r *nethttp.Request) {
		switch r.URL.Path {
		case "/ok":
			io.WriteString(w, "ok")
		case "/fail":
			w.WriteHeader(nethttp.StatusInternalServerError)
			io.WriteString(w, "fail")
		case "/redirect":
			w.Header().Set("Location", r.URL.Query().Get("to"))
			w.WriteHeader(code)
			io.WriteString(w, "moved")
		default:
			w.WriteHeader(nethttp.StatusNotFound)
		}
	}
}

// HT3 (TestHTTPProbeChecker_NonLocalRedirects): same-hostname redirects
// (any port) are followed; a redirect to another hostname is returned as a
// Warning unless non-local redirects are followed; loops fail (H5).
func TestHT3_NonLocalRedirects(t *testing.T) {
	s := serve(t, redirector(nethttp.StatusFound))
	other := serve(t, redirector(nethttp.StatusFound))
	port, otherPort := portOf(t, s), portOf(t, other)
	const warning = "Probe terminated redirects" // no body (BR-22)

	cases := []struct {
		name      string
		to        string
		notFollow runtime.Result // followNonLocal=false
		follow    runtime.Result // followNonLocal=true
		outFalse  string
	}{
		{"local success", "/ok", runtime.Success, runtime.Success, "ok"},
		{"local fail", "/fail", runtime.Failure, runtime.Failure, "HTTP probe failed with statuscode: 500"},
		{"other port success", "http://127.0.0.1:" + itoa(otherPort) + "/ok", runtime.Success, runtime.Success, "ok"},
		{"other port fail", "http://127.0.0.1:" + itoa(otherPort) + "/fail", runtime.Failure, runtime.Failure, "HTTP probe failed with statuscode: 500"},
		// 127.0.0.1 and localhost are different hostnames (plain string compare).
		{"other hostname success", "http://localhost:" + itoa(otherPort) + "/ok", runtime.Warning, runtime.Success, warning},
		{"other hostname fail", "http://localhost:" + itoa(otherPort) + "/fail", runtime.Warning, runtime.Failure, warning},
	}
	for _, c := range cases {
		for _, follow := range []bool{false, true} {
			name := c.name + map[bool]string{false: " (followNonLocal=false)", true: " (followNonLocal=true)"}[follow]
			t.Run(name, func(t *testing.T) {
				got, err := run(t, get(port, "/redirect?to="+c.to), FollowNonLocalRedirects(follow))
				want := c.notFollow
				if follow {
					want = c.follow
				}
				if err != nil || got.Result != want {
					t.Fatalf("outcome = (%v, %q, %v), want %v", got.Result, got.Output, err, want)
				}
				if !follow && got.Output != c.outFalse {
					t.Fatalf("output = %q, want %q", got.Output, c.outFalse)
				}
				if got.Result == runtime.Warning && got.StatusCode != nethttp.StatusFound {
					t.Fatalf("StatusCode = %d, want 302", got.StatusCode)
				}
			})
		}
	}

	// Upstream's own non-local case: never followed, so nothing dials 0.0.0.0.
	t.Run("0.0.0.0 not followed", func(t *testing.T) {
		got, err := run(t, get(port, "/redirect?to=http://0.0.0.0/fail"))
		wantOutcome(t, got, err, runtime.Warning, warning)
	})

	for _, follow := range []bool{false, true} {
		t.Run("loop", func(t *testing.T) { testRedirectLoop(t, follow) })
	}
}

// testRedirectLoop checks H5's limit: exactly 10 requests, then Failure.
func testRedirectLoop(t *testing.T, follow bool) {
	var n atomic.Int32
	s := serve(t, func(w nethttp.ResponseWriter, r *nethttp.Request) {
		n.Add(1)
		w.Header().Set("Location", "/loop")
		w.WriteHeader(nethttp.StatusFound)
	})
	got, err := run(t, get(portOf(t, s), "/loop"), FollowNonLocalRedirects(follow))
	wantOutcome(t, got, err, runtime.Failure, `Get "/loop": stopped after 10 redirects`)
	if n.Load() != MaxRequests {
		t.Fatalf("server saw %d requests, want %d", n.Load(), MaxRequests)
	}
}

// HT4 (TestHTTPProbeChecker_HostHeaderPreservedAfterRedirect): the Host
// override survives a relative redirect, in both modes.
func TestHT4_HostHeaderPreservedAfterRedirect(t *testing.T) {
	const vhost = "probe.example.test"
	s := serve(t, func(w nethttp.ResponseWriter, r *nethttp.Request) {
		switch {
		case r.URL.Path == "/redirect":
			w.Header().Set("Location", "/ok")
			w.WriteHeader(nethttp.StatusFound)
		case r.URL.Path == "/ok" && r.Host == vhost:
			io.WriteString(w, "ok")
		default:
			w.WriteHeader(nethttp.StatusInternalServerError)
		}
	})
	for _, follow := range []bool{false, true} {
		for host, want := range map[string]runtime.Result{vhost: runtime.Success, "wrong.example.test": runtime.Failure} {
			g := get(portOf(t, s), "/redirect")
			g.HTTPHeaders = []v1.HTTPHeader{{Name: "Host", Value: host}}
			got, err := run(t, g, FollowNonLocalRedirects(follow))
			if err != nil || got.Result != want {
				t.Errorf("follow=%v host=%s: outcome (%v, %q, %v), want %v", follow, host, got.Result, got.Output, err, want)
			}
		}
	}
}

// bodyOf serves a 200 with body.
func bodyOf(body string) nethttp.HandlerFunc {
	return func(w nethttp.ResponseWriter, r *nethttp.Request) { io.WriteString(w, body) }
}

// HT5 (TestHTTPProbeChecker_PayloadTruncated): 10 KiB + 1 → Success, output
// exactly the first 10 KiB, no error (H6).
func TestHT5_PayloadTruncated(t *testing.T) {
	body := strings.Repeat("a", runtime.MaxOutputBytes) + "b"
	got, err := run(t, get(portOf(t, serve(t, bodyOf(body))), "/"))
	wantOutcome(t, got, err, runtime.Success, body[:runtime.MaxOutputBytes])
}

// HT6 (TestHTTPProbeChecker_PayloadNormal): 10 KiB − 1 is returned intact.
func TestHT6_PayloadNormal(t *testing.T) {
	body := strings.Repeat("x", runtime.MaxOutputBytes-2) + "y"
	got, err := run(t, get(portOf(t, serve(t, bodyOf(body))), "/"))
	wantOutcome(t, got, err, runtime.Success, body)
}

// H3: the transport's settings.
func TestH3_Transport(t *testing.T) {
	h := New().(*handler)
	for _, h2c := range []bool{false, true} {
		c := h.client(clientKey{timeout: time.Second, h2c: h2c})
		tr := c.Transport.(*nethttp.Transport)
		if tr.Proxy != nil || !tr.DisableKeepAlives || !tr.DisableCompression ||
			!tr.TLSClientConfig.InsecureSkipVerify || tr.TLSHandshakeTimeout != 10*time.Second || tr.DialContext == nil {
			t.Fatalf("h2c=%v: transport settings wrong: %+v", h2c, tr)
		}
		p := tr.Protocols
		if h2c && (p.HTTP1() || !p.UnencryptedHTTP2()) || !h2c && (!p.HTTP1() || !p.HTTP2() || p.UnencryptedHTTP2()) {
			t.Fatalf("h2c=%v: protocols %v", h2c, p)
		}
		if c.Timeout != time.Second || h.client(clientKey{timeout: time.Second, h2c: h2c}) != c {
			t.Fatalf("h2c=%v: client not shared or wrong timeout", h2c)
		}
	}
	if h.client(clientKey{timeout: 2 * time.Second, h2c: false}) == h.client(clientKey{timeout: time.Second, h2c: false}) {
		t.Fatal("clients for different timeouts must differ (dialer timeout)")
	}
}

// H3: HTTPS probes skip verification and negotiate HTTP/2 through ALPN.
func TestH3_HTTPSNegotiatesHTTP2(t *testing.T) {
	var proto string
	s := httptest.NewUnstartedServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		proto = r.Proto
		io.WriteString(w, "ok")
	}))
	s.EnableHTTP2 = true
	s.TLS = &tls.Config{Certificates: []tls.Certificate{selfSignedCert(t, "svc.example.test")}}
	s.StartTLS()
	t.Cleanup(s.Close)
	g := get(portOf(t, s), "/")
	g.Scheme = v1.URISchemeHTTPS
	got, err := run(t, g)
	wantOutcome(t, got, err, runtime.Success, "ok")
	if proto != "HTTP/2.0" {
		t.Fatalf("server saw %s, want HTTP/2.0", proto)
	}
}

// H6: a body that ends early is a read error → Failure with the error
// (errored, P5), even though the status was 200 (BR-09 a).
func TestH6_BodyReadErrorIsErrored(t *testing.T) {
	s := serve(t, func(w nethttp.ResponseWriter, r *nethttp.Request) {
		w.Header().Set("Content-Length", "1000")
		w.WriteHeader(nethttp.StatusOK)
		io.WriteString(w, "0123456789")
		conn, buf, err := nethttp.NewResponseController(w).Hijack()
		if err == nil {
			buf.Flush()
			conn.Close()
		}
	})
	got, err := run(t, get(portOf(t, s), "/"))
	if err == nil || !strings.Contains(err.Error(), "unexpected EOF") {
		t.Fatalf("error = %v, want unexpected EOF", err)
	}
	if got.Output != "" || got.StatusCode != 200 {
		t.Fatalf("outcome = %+v, want no output and status 200", got)
	}
}

// P5/BR-20: a port that does not resolve is not a Prepare error; every
// attempt reports it.
func TestH1_RequestBuildErrorsEveryAttempt(t *testing.T) {
	p := prepare(t, New(), httpSpec(get(0, "/")))
	for i := 0; i < 3; i++ {
		got, err := probeWithin(p, podIP, time.Second)
		if err == nil || err.Error() != "invalid port number: 0" || got.Result != runtime.Unknown {
			t.Fatalf("attempt %d: (%v, %v), want Unknown with `invalid port number: 0`", i, got.Result, err)
		}
	}
	if _, err := New().Prepare(&runtime.Spec{Probe: &v1.Probe{}}); err == nil {
		t.Fatal("Prepare without httpGet must fail")
	}
}

// Concurrent attempts of one prober share its header set and URL; the race
// detector proves nothing writes to them.
func TestProbeConcurrent(t *testing.T) {
	var n atomic.Int32
	s := serve(t, func(w nethttp.ResponseWriter, r *nethttp.Request) {
		n.Add(1)
		if r.URL.Path == "/" {
			w.Header().Set("Location", "/ok")
			w.WriteHeader(nethttp.StatusFound)
			return
		}
		io.WriteString(w, r.Host)
	})
	g := get(portOf(t, s), "/")
	g.HTTPHeaders = []v1.HTTPHeader{{Name: "Host", Value: "v.example.test"}, {Name: "X-A", Value: "1"}}
	p := prepare(t, New(), httpSpec(g))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 5 {
				got, err := probeWithin(p, podIP, time.Second)
				if err != nil || got.Result != runtime.Success || got.Output != "v.example.test" {
					t.Errorf("outcome (%v, %q, %v)", got.Result, got.Output, err)
				}
			}
		})
	}
	wg.Wait()
	if n.Load() != 80 {
		t.Fatalf("server saw %d requests, want 80", n.Load())
	}
}

// SC1 (scaled down; BR-17): many concurrent HTTP probes against one
// listener produce no Failure.
func TestSC1_NoFalseFailuresUnderChurn(t *testing.T) {
	s := serve(t, bodyOf("ok"))
	p := prepare(t, New(), httpSpec(get(portOf(t, s), "/")))
	var (
		wg       sync.WaitGroup
		failures atomic.Int32
	)
	for range 8 {
		wg.Go(func() {
			for range 20 {
				got, err := probeWithin(p, podIP, time.Second)
				if err != nil || got.Result != runtime.Success {
					failures.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := failures.Load(); n != 0 {
		t.Fatalf("%d of 160 probes failed", n)
	}
}

// H4 on the real clock: an attempt whose context deadline comes within the
// probe timeout (the runtime's, P3) is ended by that deadline alone: its
// client has no Timeout (no second deadline, timer and context per
// request) and shares the timed client's transport; without such a
// deadline the client's Timeout is the probe timeout.
func TestH4_OneDeadlinePerAttempt(t *testing.T) {
	p := prepare(t, New(), httpSpec(get(closedPort(t), "/"))).(*prober)
	within, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	later, cancelLater := context.WithTimeout(context.Background(), time.Hour)
	defer cancelLater()
	for _, c := range []struct {
		name        string
		ctx         context.Context
		timeout     time.Duration
		wantCtxEnds bool
	}{
		{"runtime's deadline", within, 0, true},
		{"no deadline", context.Background(), time.Second, false},
		{"later deadline", later, time.Second, false},
		{"injected clock", runtime.WithInjectedDeadline(context.Background()), 0, true},
	} {
		got, ctxEnds := p.clientFor(c.ctx)
		if got.Timeout != c.timeout || ctxEnds != c.wantCtxEnds {
			t.Errorf("%s: client Timeout %v, ctxEnds %v; want %v, %v", c.name, got.Timeout, ctxEnds, c.timeout, c.wantCtxEnds)
		}
	}
	if bound, _ := p.clientFor(within); bound.Transport != p.client.Transport {
		t.Error("the deadline-bound client must share the timed client's transport")
	}
}

// The handler adds next to nothing to the GET itself: an attempt with the
// runtime's deadline allocates no more than the bare GET with the same
// context (bareGET, the floor of the benchmark harness's HTTP saturation
// run) plus the output string and the request's context copy. A client
// Timeout on top of the attempt's deadline cost 10 more allocations.
func TestProbeAllocationsAtTheBareGETFloor(t *testing.T) {
	if testing.Short() {
		t.Skip("measures allocations over 200 real GETs")
	}
	port := okServer(t)
	p := prepare(t, New(), httpSpec(get(port, "/healthz")))
	target := runtime.Target{PodIP: podIP, Attempt: 1}
	bare := bareGET(t, port)
	withDeadline := func(f func(context.Context)) func() {
		return func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			f(ctx)
			cancel()
		}
	}
	floor := testing.AllocsPerRun(100, withDeadline(func(ctx context.Context) {
		if err := bare(ctx); err != nil {
			t.Fatal(err)
		}
	}))
	probe := testing.AllocsPerRun(100, withDeadline(func(ctx context.Context) {
		if got, err := p.Probe(ctx, target); err != nil || got.Result != runtime.Success {
			t.Fatalf("outcome (%v, %q, %v)", got.Result, got.Output, err)
		}
	}))
	if probe > floor+3 {
		t.Fatalf("Probe allocates %.1f per attempt, the bare GET %.1f: want at most 3 more", probe, floor)
	}
}
