package http

import (
	"errors"
	"fmt"
	"net"
	nethttp "net/http"
	"net/url"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/probed/probed/runtime"
)

// formatURL composes the probe URL the way the kubelet does (spec H1):
// the path is parsed as a URL reference so that a query string survives
// ("/ready?full=1"); a path that does not parse is used verbatim as the
// URL's path. The scheme and the authority then replace whatever the path
// carried: scheme is taken as given (the caller lower-cases it) and the
// authority is host:port joined IPv6-safely ("[fd00::1]:8080").
func formatURL(scheme, host string, port int, path string) *url.URL {
	u, err := url.Parse(path)
	if err != nil {
		u = &url.URL{Path: path}
	}
	u.Scheme = scheme
	u.Host = net.JoinHostPort(host, strconv.Itoa(port))
	return u
}

// requestURL returns the URL the request is actually sent to. The kubelet
// renders the composed URL to a string and builds its request from that
// string, so the URL on the wire is the re-parsed form of formatURL's
// result (a relative path gains its leading "/", a verbatim path is
// escaped). The error is the parse error the kubelet's request construction
// would report (an errored probe, H1/P5).
func requestURL(scheme, host string, port int, path string) (*url.URL, error) {
	return url.Parse(formatURL(scheme, host, port, path).String())
}

// buildHeader turns the probe's httpHeaders into the request header set
// (spec H2):
//   - names are canonicalised ("x-probe" → "X-Probe", "HOST" → "Host") and a
//     repeated name accumulates its values in order;
//   - without a supplied User-Agent, User-Agent is runtime.KubeProbeUserAgent;
//     a supplied empty User-Agent stays in the set as "", which makes
//     net/http send no User-Agent line at all (instead of its own
//     "Go-http-client" default);
//   - without a supplied Accept, Accept is "*/*"; a supplied Accept whose
//     first value is empty removes the header;
//   - the first Host value becomes the request's Host (returned as host); the
//     TCP connection and the TLS server name still use the URL's host.
//
// The returned header is never nil and is shared read-only by every request
// of the probe; without httpHeaders it is defaultHeader, shared by every
// such probe.
func buildHeader(list []v1.HTTPHeader) (h nethttp.Header, host string) {
	if len(list) == 0 {
		return defaultHeader, ""
	}
	h = make(nethttp.Header, len(list)+2)
	for _, e := range list {
		h.Add(e.Name, e.Value)
	}
	if _, ok := h["User-Agent"]; !ok {
		h.Set("User-Agent", runtime.KubeProbeUserAgent)
	}
	if _, ok := h["Accept"]; !ok {
		h.Set("Accept", "*/*")
	} else if h.Get("Accept") == "" {
		h.Del("Accept")
	}
	return h, h.Get("Host")
}

// defaultHeader is the header set of a probe without httpHeaders (H2):
// User-Agent runtime.KubeProbeUserAgent and Accept "*/*". Read-only: net/http
// never writes a request's Header (it adds "Connection: close" on the wire,
// and redirects copy the header), and neither does the prober.
var defaultHeader = nethttp.Header{"User-Agent": {runtime.KubeProbeUserAgent}, "Accept": {"*/*"}}

// useH2C reports whether the action asks for cleartext HTTP/2 with prior
// knowledge (httpGet.protocol: HTTP2, BR-26). Nil and "HTTP1" select
// HTTP/1.1. HTTP2 is only valid with scheme HTTP and without host (the
// API server's validation of the field); those combinations, and any other
// protocol value, are errors.
func useH2C(g *v1.HTTPGetAction, scheme string) (bool, error) {
	if g.Protocol == nil {
		return false, nil
	}
	switch *g.Protocol {
	case v1.HTTPProtocolHTTP1:
		return false, nil
	case v1.HTTPProtocolHTTP2:
		if scheme != "http" {
			return false, fmt.Errorf("http probe: httpGet.protocol HTTP2 requires scheme HTTP, not %q", g.Scheme)
		}
		if g.Host != "" {
			return false, errors.New("http probe: httpGet.protocol HTTP2 may not be used with httpGet.host")
		}
		return true, nil
	}
	return false, fmt.Errorf("http probe: unsupported httpGet.protocol %q (want HTTP1 or HTTP2)", *g.Protocol)
}

// schemeOf lower-cases the action's scheme (H1); an empty scheme, which the
// API server defaults to HTTP (spec 1.2), counts as "http".
func schemeOf(g *v1.HTTPGetAction) string {
	if g.Scheme == "" {
		return "http"
	}
	return strings.ToLower(string(g.Scheme))
}
