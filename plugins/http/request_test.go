package http

import (
	nethttp "net/http"
	"reflect"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/probed/probed/runtime"
)

// RQ1 (TestFormatURL): URL composition, query strings, IPv6 authority and a
// path that does not parse (H1).
func TestRQ1_FormatURL(t *testing.T) {
	cases := []struct {
		scheme, host string
		port         int
		path, want   string
	}{
		{"http", "localhost", 93, "", "http://localhost:93"},
		{"https", "localhost", 93, "/path", "https://localhost:93/path"},
		{"http", "localhost", 93, "?foo", "http://localhost:93?foo"},
		{"https", "localhost", 93, "/path?bar", "https://localhost:93/path?bar"},
		{"http", "10.0.0.7", 8080, "/ready?full=1&x=y", "http://10.0.0.7:8080/ready?full=1&x=y"},
		{"http", "fd00::1", 8080, "/healthz", "http://[fd00::1]:8080/healthz"},
		{"http", "::1", 80, "/", "http://[::1]:80/"},
		// Not a valid URL reference: taken verbatim as the path.
		{"http", "h", 80, "/%zz?q", "http://h:80/%25zz%3Fq"},
		// The path's own scheme and authority are replaced.
		{"http", "h", 80, "https://other:1/x", "http://h:80/x"},
	}
	for _, c := range cases {
		if got := formatURL(c.scheme, c.host, c.port, c.path).String(); got != c.want {
			t.Errorf("formatURL(%q, %q, %d, %q) = %q, want %q", c.scheme, c.host, c.port, c.path, got, c.want)
		}
	}
}

// RQ1: what goes on the wire is the re-parsed URL, so a relative path gains
// its leading slash and the query survives as the raw query.
func TestRQ1_RequestURL(t *testing.T) {
	u, err := requestURL("http", "127.0.0.1", 8080, "healthz?x=1")
	if err != nil {
		t.Fatal(err)
	}
	if u.Path != "/healthz" || u.RawQuery != "x=1" || u.RequestURI() != "/healthz?x=1" {
		t.Fatalf("requestURL = path %q query %q uri %q", u.Path, u.RawQuery, u.RequestURI())
	}
}

// RQ1 end to end: the server sees the path and the query string.
func TestRQ1_QueryReachesServer(t *testing.T) {
	var uri string
	s := serve(t, func(w nethttp.ResponseWriter, r *nethttp.Request) { uri = r.RequestURI })
	got, err := run(t, get(portOf(t, s), "/ready?full=1"))
	wantOutcome(t, got, err, runtime.Success, "")
	if uri != "/ready?full=1" {
		t.Fatalf("server saw %q, want /ready?full=1", uri)
	}
}

// RQ1 (Test_v1HeaderToHTTPHeader / TestHeaderConversion) and H2: canonical
// names, accumulating duplicates, the User-Agent and Accept defaults and
// their removal, and Host.
func TestRQ1_HeaderConversion(t *testing.T) {
	ua, accept := runtime.KubeProbeUserAgent, "*/*"
	cases := []struct {
		name     string
		in       []v1.HTTPHeader
		want     nethttp.Header
		wantHost string
	}{
		{
			name: "defaults",
			want: nethttp.Header{"User-Agent": {ua}, "Accept": {accept}},
		},
		{
			name:     "HOST canonicalised and used as Host",
			in:       []v1.HTTPHeader{{Name: "HOST", Value: "example.com"}},
			want:     nethttp.Header{"Host": {"example.com"}, "User-Agent": {ua}, "Accept": {accept}},
			wantHost: "example.com",
		},
		{
			name: "duplicates accumulate in order",
			in: []v1.HTTPHeader{
				{Name: "X-Probe", Value: "a"}, {Name: "x-probe", Value: "b"}, {Name: "X-PROBE", Value: "c"},
			},
			want: nethttp.Header{"X-Probe": {"a", "b", "c"}, "User-Agent": {ua}, "Accept": {accept}},
		},
		{
			name: "user-agent override",
			in:   []v1.HTTPHeader{{Name: "user-agent", Value: "probe-test/1"}},
			want: nethttp.Header{"User-Agent": {"probe-test/1"}, "Accept": {accept}},
		},
		{
			name: "empty user-agent kept empty",
			in:   []v1.HTTPHeader{{Name: "User-Agent", Value: ""}},
			want: nethttp.Header{"User-Agent": {""}, "Accept": {accept}},
		},
		{
			name: "accept override",
			in:   []v1.HTTPHeader{{Name: "accept", Value: "application/json"}},
			want: nethttp.Header{"User-Agent": {ua}, "Accept": {"application/json"}},
		},
		{
			name: "empty accept removes it",
			in:   []v1.HTTPHeader{{Name: "Accept", Value: ""}},
			want: nethttp.Header{"User-Agent": {ua}},
		},
		{
			name: "accept whose first value is empty removes all of it",
			in:   []v1.HTTPHeader{{Name: "Accept", Value: ""}, {Name: "Accept", Value: "text/plain"}},
			want: nethttp.Header{"User-Agent": {ua}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h, host := buildHeader(c.in)
			if !reflect.DeepEqual(h, c.want) || host != c.wantHost {
				t.Fatalf("buildHeader = %v, host %q; want %v, host %q", h, host, c.want, c.wantHost)
			}
		})
	}
}

// H2: probes without httpHeaders share one header set, the default one,
// rather than each holding its own copy; a probe with httpHeaders has its
// own.
func TestH2_DefaultHeaderShared(t *testing.T) {
	h := New()
	a := prepare(t, h, httpSpec(get(8080, "/a"))).(*prober)
	b := prepare(t, h, httpSpec(get(8081, "/b"))).(*prober)
	if reflect.ValueOf(a.header).Pointer() != reflect.ValueOf(b.header).Pointer() {
		t.Fatal("two probes without httpHeaders hold two header sets")
	}
	want := nethttp.Header{"User-Agent": {runtime.KubeProbeUserAgent}, "Accept": {"*/*"}}
	if !reflect.DeepEqual(a.header, want) {
		t.Fatalf("default header = %v, want %v", a.header, want)
	}
	g := get(8080, "/c")
	g.HTTPHeaders = []v1.HTTPHeader{{Name: "X-Probe", Value: "1"}}
	c := prepare(t, h, httpSpec(g)).(*prober)
	if reflect.ValueOf(c.header).Pointer() == reflect.ValueOf(a.header).Pointer() || c.header.Get("X-Probe") != "1" {
		t.Fatalf("a probe with httpHeaders must have its own set: %v", c.header)
	}
}

// H1: the scheme is lower-cased; an empty one (API default HTTP) is http.
func TestH1_Scheme(t *testing.T) {
	for in, want := range map[v1.URIScheme]string{"HTTP": "http", "HTTPS": "https", "": "http", "Https": "https"} {
		if got := schemeOf(&v1.HTTPGetAction{Scheme: in}); got != want {
			t.Errorf("schemeOf(%q) = %q, want %q", in, got, want)
		}
	}
}

// H1/P7: the per-attempt URL for a pod IP is exactly the URL the kubelet's
// string round trip produces, for IP literals (spliced into a template),
// an empty pod IP and zones (built the slow way), and an opaque path that
// does not depend on the pod IP at all.
func TestH1_URLForPodIP(t *testing.T) {
	paths := []string{"", "/", "healthz", "/ready?full=1", "?foo", "/%zz?q", "//user@evil/x", "/a b", "mailto:x"}
	ips := []string{"10.0.0.1", "10.0.0.1", "fd00::1", "::1", "", "fe80::1%eth0", "10.0.0.2"}
	for _, path := range paths {
		g := get(8080, path)
		p := prepare(t, New(), httpSpec(g)).(*prober)
		for _, ip := range ips {
			want, wantErr := requestURL("http", ip, 8080, path)
			got, err := p.url(ip)
			if (err != nil) != (wantErr != nil) || err == nil && !reflect.DeepEqual(got, want) {
				t.Errorf("path %q ip %q: url = %v (%v), want %v (%v)", path, ip, got, err, want, wantErr)
			}
		}
	}
	p := prepare(t, New(), httpSpec(get(8080, "mailto:x"))).(*prober)
	if p.fixed == nil || p.fixed.String() != "http:x" {
		t.Fatalf("opaque path: fixed URL %v, want http:x", p.fixed)
	}
	got, err := probeWithin(p, podIP, time.Second)
	wantOutcome(t, got, err, runtime.Failure, `Get "http:x": http: no Host in request URL`)
}

// H3: a non-empty DISABLE_HTTP2 keeps HTTPS probes on HTTP/1.1, as the
// kubelet's transport defaults do.
func TestH3_DisableHTTP2Env(t *testing.T) {
	t.Setenv("DISABLE_HTTP2", "1")
	p := New().(*handler).client(clientKey{timeout: time.Second}).Transport.(*nethttp.Transport).Protocols
	if !p.HTTP1() || p.HTTP2() {
		t.Fatalf("protocols %v, want HTTP/1 only", p)
	}
}
