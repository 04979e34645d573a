// Package http is the built-in httpGet probe handler, kubelet-exact (spec
// §5.1, rules H1–H6; BR-04–BR-08, BR-20, BR-22, BR-23, BR-26).
//
// Prepare does all the work that does not change between runs: it resolves
// the port (spec 1.4), composes the URL (H1), builds the header set (H2) and
// picks a shared client and transport (H3–H5). Probe only splices in the
// pod IP, sends one GET and maps the response to a verdict (H6).
package http

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	nethttp "net/http"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/probed/probed/plugins/internal/dialer"
	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/egress"
	"github.com/probed/probed/runtime/expect"
)

// TLSHandshakeTimeout bounds the TLS handshake of HTTPS probes (the
// apimachinery transport default the kubelet inherits, H3). The probe
// timeout still bounds the whole attempt (H4).
const TLSHandshakeTimeout = 10 * time.Second

// MaxRequests is the most requests one attempt makes: the original request
// and up to 9 followed redirects (H5). The 11th would fail the attempt with
// "stopped after 10 redirects".
const MaxRequests = 10

// Option configures the handler returned by New.
type Option func(*handler)

// FollowNonLocalRedirects makes probes follow redirects to another hostname
// too (H5, HT3 "true" mode). The kubelet runs with false, the default: a
// redirect to another hostname is not followed and its 3xx response yields a
// Warning.
func FollowNonLocalRedirects(follow bool) Option {
	return func(h *handler) { h.followNonLocal = follow }
}

// New returns the httpGet handler (runtime.KindHTTP).
//
// Like the kubelet's transport (H3), HTTPS probes negotiate HTTP/2 through
// ALPN unless the environment variable DISABLE_HTTP2 is non-empty when New
// is called.
//
// Probers of the same handler share one transport per (timeout, protocol)
// and clock kind, and its clients: keep-alives are off, so nothing idles in
// them. A probe that keeps its connection (KeepAlive, httpGet.keepAlive)
// has transports of its own (keepalive.go).
func New(opts ...Option) runtime.Handler {
	h := &handler{
		disableHTTP2: os.Getenv("DISABLE_HTTP2") != "",
		clients:      make(map[clientKey]*nethttp.Client),
		maxKept:      DefaultMaxKeptConnections,
	}
	for _, o := range opts {
		o(h)
	}
	return h
}

type clientKey struct {
	timeout time.Duration
	h2c     bool
	// onInjectedClock: the client of attempts whose deadline runs on an
	// injected clock (runtime.OnInjectedClock): no timer of its own.
	onInjectedClock bool
	// deadlineBound: the client of attempts whose context's deadline
	// bounds them at least as tightly as the probe timeout (the runtime's
	// attempt deadline on the real clock, P3). It shares the transport
	// of the client without this flag but has no Timeout: the context
	// already ends the attempt (H4), and a client Timeout would arm a
	// second deadline, a timer and a context of its own on every request.
	deadlineBound bool
}

type handler struct {
	followNonLocal bool
	disableHTTP2   bool
	keepAlive      bool         // the default of httpGet.keepAlive
	maxKept        int64        // MaxKeptConnections
	kept           atomic.Int64 // kept-alive probes holding a slot of maxKept

	mu      sync.Mutex
	clients map[clientKey]*nethttp.Client
}

// Prepare binds spec (which must carry Probe.HTTPGet) to a Prober.
//
// Errors returned by Prepare itself (every run errored, P5): the spec has no
// httpGet action, or httpGet.protocol is invalid — HTTP2 with scheme HTTPS
// or with a host (rejected at validation upstream, BR-26 c/d), or a value
// other than HTTP1/HTTP2.
//
// A port that does not resolve (spec 1.4: `port "metrcis" not found`,
// `invalid port number: N`) is not a Prepare error: the returned Prober
// reports it as the error, with Result Unknown, of every Probe call, so each
// run is errored as upstream's is (H1, BR-20). The same holds for a URL
// that cannot be parsed when httpGet.host is set.
func (h *handler) Prepare(spec *runtime.Spec) (runtime.Prober, error) {
	if spec == nil || spec.Probe == nil || spec.Probe.HTTPGet == nil {
		return nil, errors.New("http probe: the probe has no httpGet action")
	}
	g := spec.Probe.HTTPGet
	scheme := schemeOf(g)
	h2c, err := useH2C(g, scheme)
	if err != nil {
		return nil, err
	}
	port, err := runtime.ResolvePort(g.Port, spec.Container)
	if err != nil {
		return errProber{err}, nil
	}
	timeout := spec.Timeout()
	header, host := buildHeader(g.HTTPHeaders)
	var checks *expect.Body
	if ex := runtime.ExpectOf(spec); ex != nil {
		if checks, err = expect.Compile(ex); err != nil {
			return nil, fmt.Errorf("http probe: %w", err)
		}
	}
	p := &prober{
		expect:  checks,
		timeout: timeout,
		scheme:  scheme,
		port:    port,
		path:    g.Path,
		header:  header,
		host:    host,
	}
	keep := h.keepAlive
	if ka := runtime.KeepAliveOf(spec); ka != nil {
		keep = *ka
	}
	if keep && !h2c {
		// Idle for two of the probe's longest periods (and its timeout):
		// the connection is still there at the next run, and gone after
		// the probe stopped running without being removed.
		t := spec.Timing()
		idle := 2*max(t.Period, t.Unhealthy, t.Transition) + timeout
		p.keep = newKeptConns(h, timeout, idle, redirectPolicy(h.followNonLocal))
		p.client, p.boundClient, p.injectedClient = p.keep.client, p.keep.bound, p.keep.injected
	} else {
		p.client = h.client(clientKey{timeout: timeout, h2c: h2c})
		p.injectedClient = h.client(clientKey{timeout: timeout, h2c: h2c, onInjectedClock: true})
		p.boundClient = h.client(clientKey{timeout: timeout, h2c: h2c, deadlineBound: true})
	}
	if g.Host != "" {
		// The URL does not depend on the pod IP: build it once.
		u, err := requestURL(scheme, g.Host, port, g.Path)
		if err != nil {
			return errProber{err}, nil
		}
		p.fixed = u
		return p, nil
	}
	// The template is the URL for a placeholder pod IP; Probe swaps in the
	// real authority. A URL whose authority is not where the placeholder
	// put it (an opaque path such as "mailto:x") does not depend on the pod
	// IP at all.
	const placeholder = "192.0.2.1"
	u, err := requestURL(scheme, placeholder, port, g.Path)
	if err != nil {
		return errProber{err}, nil
	}
	if u.Host != formatURL(scheme, placeholder, port, "").Host {
		p.fixed = u
		return p, nil
	}
	p.template = *u
	return p, nil
}

// client returns the shared client for k, creating it on first use. The
// client of an injected clock has no timeout, and its transport neither a
// dial timeout nor a TLS handshake timeout: the attempt's context, cut
// when that clock passes the deadline, alone bounds its attempts. The
// deadline-bound client (k.deadlineBound) is the timed client's transport
// and redirect policy without a client Timeout.
func (h *handler) client(k clientKey) *nethttp.Client {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.clientLocked(k)
}

func (h *handler) clientLocked(k clientKey) *nethttp.Client {
	if c, ok := h.clients[k]; ok {
		return c
	}
	if k.deadlineBound {
		timed := k
		timed.deadlineBound = false
		t := h.clientLocked(timed)
		c := &nethttp.Client{Transport: t.Transport, CheckRedirect: t.CheckRedirect}
		h.clients[k] = c
		return c
	}
	timeout := k.timeout
	if k.onInjectedClock {
		timeout = 0
	}
	c := &nethttp.Client{
		Transport:     newTransport(timeout, k.h2c, h.disableHTTP2),
		CheckRedirect: redirectPolicy(h.followNonLocal),
		Timeout:       timeout,
	}
	h.clients[k] = c
	return c
}

// newTransport builds the probe transport (H3): certificates are not
// verified, keep-alives are off (one new connection per request, sent with
// "Connection: close" over HTTP/1.1), no proxy is consulted (HTTP_PROXY and
// friends are ignored: Proxy is nil), compression is off (no
// "Accept-Encoding: gzip"), connections come from dialer.New(timeout) and
// the TLS handshake is bounded by TLSHandshakeTimeout (a zero timeout, the
// injected clock's transport: neither is bounded but by the attempt's
// context). Response headers are
// read up to runtime.MaxResponseHeaderBytes (64 KiB; the kubelet keeps Go's
// 10 MiB): longer ones fail the attempt ("net/http: server response headers
// exceeded 65536 bytes; aborted").
//
// Protocols: HTTP/1.1, plus HTTP/2 negotiated over TLS unless disableHTTP2.
// With h2c (httpGet.protocol: HTTP2, BR-26) it speaks HTTP/2 only: with prior
// knowledge over cleartext, and through ALPN "h2" should a redirect lead to
// https.
func newTransport(timeout time.Duration, h2c, disableHTTP2 bool) *nethttp.Transport {
	var protocols nethttp.Protocols
	switch {
	case h2c:
		protocols.SetUnencryptedHTTP2(true)
		protocols.SetHTTP2(true)
	case disableHTTP2:
		protocols.SetHTTP1(true)
	default:
		protocols.SetHTTP1(true)
		protocols.SetHTTP2(true)
	}
	handshakeTimeout := TLSHandshakeTimeout
	if timeout == 0 {
		handshakeTimeout = 0
	}
	return &nethttp.Transport{
		Proxy:                  nil,
		DialContext:            dialer.New(timeout).DialContext,
		TLSClientConfig:        &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // H3: probes never verify certificates (BR-04).
		TLSHandshakeTimeout:    handshakeTimeout,
		DisableKeepAlives:      true,
		DisableCompression:     true,
		MaxResponseHeaderBytes: runtime.MaxResponseHeaderBytes,
		Protocols:              &protocols,
	}
}

// errTooManyRedirects ends an attempt whose MaxRequests-th response is a
// redirect again (H5). The client wraps it as
// `Get "<location>": stopped after 10 redirects`.
var errTooManyRedirects = errors.New("stopped after 10 redirects")

// redirectPolicy is the client's CheckRedirect (H5). req is the redirect
// about to be followed and via the requests made so far, oldest first.
//
// Without followNonLocal, a redirect whose URL hostname differs from the
// original request's hostname — a plain string comparison without port, so
// 127.0.0.1 and localhost differ — is not followed: the client returns the
// 3xx response itself (http.ErrUseLastResponse). A same-hostname redirect,
// to any port and either scheme (BR-04), is followed. In both modes the
// attempt fails once MaxRequests requests have been made.
func redirectPolicy(followNonLocal bool) func(*nethttp.Request, []*nethttp.Request) error {
	return func(req *nethttp.Request, via []*nethttp.Request) error {
		if !followNonLocal && req.URL.Hostname() != via[0].URL.Hostname() {
			return nethttp.ErrUseLastResponse
		}
		if len(via) >= MaxRequests {
			return errTooManyRedirects
		}
		return nil
	}
}

// errProber reports a preparation error as the error of every attempt
// (errored, P5).
type errProber struct{ err error }

func (p errProber) Probe(context.Context, runtime.Target) (runtime.Outcome, error) {
	return runtime.Outcome{Result: runtime.Unknown}, p.err
}

// prober is one prepared httpGet probe. It is safe for concurrent use.
type prober struct {
	// client serves attempts whose context does not bound them within
	// the probe timeout (no deadline, or a later one): its Timeout is the
	// probe timeout (H4). Shared.
	client *nethttp.Client
	// boundClient serves attempts whose context's deadline comes within
	// the probe timeout (the runtime's attempts on the real clock): the
	// same transport, no client Timeout. Shared.
	boundClient *nethttp.Client
	// injectedClient serves attempts whose deadline is on an injected
	// clock (runtime.OnInjectedClock); shared, without timeouts.
	injectedClient *nethttp.Client
	timeout        time.Duration
	scheme         string
	port           int
	path           string
	header         nethttp.Header // shared read-only by all requests
	host           string         // request Host from the Host header, or ""

	// expect is an annotation probe's httpGet.expect (runtime/expect), nil
	// for the kubelet's verdict (H6).
	expect *expect.Body
	// keep holds the probe's kept connection (keepalive.go); nil: a new
	// connection per run, the kubelet's way.
	keep *keptConns

	fixed    *url.URL // the URL when it does not depend on the pod IP
	template url.URL  // otherwise: the URL with a placeholder authority
	last     atomic.Pointer[podURL]
}

// podURL caches the URL built for the last pod IP seen, so an attempt for
// an unchanged pod IP builds no URL.
type podURL struct {
	podIP string
	url   *url.URL
	err   error
}

// url returns the request URL for podIP (H1, P7). The result is shared and
// must not be modified.
func (p *prober) url(podIP string) (*url.URL, error) {
	if p.fixed != nil {
		return p.fixed, nil
	}
	if c := p.last.Load(); c != nil && c.podIP == podIP {
		return c.url, c.err
	}
	c := &podURL{podIP: podIP}
	if ip, err := netip.ParseAddr(podIP); err == nil && ip.Zone() == "" {
		// An IP literal only changes the authority of the template.
		u := p.template
		u.Host = formatURL("", podIP, p.port, "").Host
		c.url = &u
	} else {
		// Anything else (an empty pod IP, a zone) takes the kubelet's
		// exact path, including its parse errors.
		c.url, c.err = requestURL(p.scheme, podIP, p.port, p.path)
	}
	p.last.Store(c)
	return c.url, c.err
}

// clientFor picks the client of one attempt (H4: the attempt ends at the
// probe timeout at the latest). When ctx ends the attempt by then — an
// attempt deadline on an injected clock, or a real deadline no later than
// the probe timeout from now, as the runtime sets (P3) — the client has no
// Timeout of its own and ctxEnds is true: the caller then gives the
// errors at that deadline the client timeout's texts (asClientTimeout),
// the kubelet's, whose client Timeout is the probe timeout. Otherwise the
// client's Timeout is the probe timeout and its own texts are the
// kubelet's.
func (p *prober) clientFor(ctx context.Context) (c *nethttp.Client, ctxEnds bool) {
	if runtime.OnInjectedClock(ctx) {
		return p.injectedClient, true
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= p.timeout {
		return p.boundClient, true
	}
	return p.client, false
}

// Probe sends one GET to the pod (or httpGet.host) and maps the response
// (H6):
//
//   - transport error, refused connection, timeout (H4) or too many
//     redirects (H5) → Failure, output = the Go error string, nil error
//     (the error is the Outcome's Cause: the runtime makes the run errored
//     when the prober itself is out of descriptors or ports,
//     runtime.ClassifyAttempt);
//   - the body is read up to runtime.MaxOutputBytes (10 KiB); a longer body
//     is truncated silently and the rest is never read. A read error other
//     than reaching the limit — including the timeout firing while the body
//     trickles in (BR-08 c) — returns Result Failure with that error, which
//     the runtime counts as errored (P5), whatever the status;
//   - 200–299 → Success, output = the body;
//   - 300–399 (a redirect not followed, H5) → Warning, output
//     "Probe terminated redirects". Upstream appends ", Response body:
//     <body>"; probed leaves the body out, because the output becomes the
//     ProbeWarning event and BR-22 keeps response bodies out of every
//     event, log, metric and span;
//   - anything else → Failure, output
//     "HTTP probe failed with statuscode: <code>" and never the body (BR-22).
//
// StatusCode is the final response's status, 0 when there was none.
// A URL that cannot be built for t.PodIP → Unknown with the parse error.
//
// When ctx's deadline runs on an injected clock (runtime.OnInjectedClock),
// the attempt uses a client and transport without timers of their own, so
// only that clock's deadline ends it. When ctx has a real deadline within
// the probe timeout (the runtime's attempts), the client sets no second
// deadline of its own (clientFor). Either way the texts at that deadline
// are the client timeout's (asClientTimeout), as upstream's.
//
// When ctx carries an egress policy (cluster mode, runtime/egress), every
// connection of the attempt, redirects included, goes only where it
// allows (the dialer checks the resolved address before connecting; a
// refused one is a Failure `Get "<url>": dial tcp IP:PORT: refused by
// probed's egress policy (...)`), and the texts of Failures and errors
// carry nothing the target sent (withhold).
func (p *prober) Probe(ctx context.Context, t runtime.Target) (runtime.Outcome, error) {
	u, err := p.url(t.PodIP)
	if err != nil {
		return runtime.Outcome{Result: runtime.Unknown}, err
	}
	req := (&nethttp.Request{
		Method:     nethttp.MethodGet,
		URL:        u,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     p.header,
		Host:       p.host,
	}).WithContext(ctx)

	if p.keep != nil {
		// Not admitted (the handler's kept connections are all taken):
		// this run's connection closes after the answer.
		req.Close = !p.keep.admit(ctx)
		defer p.keep.afterRun()
	}
	c, ctxEnds := p.clientFor(ctx)
	resp, err := c.Do(req)
	if err != nil {
		if ctxEnds {
			err = asClientTimeout(ctx, err, awaitingHeaders)
		}
		// With a CheckRedirect error resp is non-nil, but its body is
		// already closed.
		return runtime.Outcome{Result: runtime.Failure, Output: withhold(ctx, u, false, err).Error(), Cause: err}, nil
	}
	defer resp.Body.Close()

	code := resp.StatusCode
	body, err := readBody(resp.Body)
	if err != nil {
		if ctxEnds {
			err = asClientTimeout(ctx, err, readingBody)
		}
		redirected := resp.Request != nil && resp.Request.URL != u
		return runtime.Outcome{Result: runtime.Failure, StatusCode: code}, withhold(ctx, u, redirected, err)
	}
	if p.expect != nil {
		return expected(p.expect, resp, body), nil
	}
	switch {
	case code >= nethttp.StatusOK && code < nethttp.StatusMultipleChoices:
		return runtime.Outcome{Result: runtime.Success, Output: body, StatusCode: code}, nil
	case code >= nethttp.StatusMultipleChoices && code < nethttp.StatusBadRequest:
		return runtime.Outcome{
			Result:     runtime.Warning,
			Output:     "Probe terminated redirects",
			StatusCode: code,
		}, nil
	}
	return runtime.Outcome{
		Result:     runtime.Failure,
		Output:     "HTTP probe failed with statuscode: " + strconv.Itoa(code),
		StatusCode: code,
	}, nil
}

// Release closes the probe's kept connection, if it has one
// (runtime.Releaser: the probe was removed).
func (p *prober) Release() {
	if p.keep != nil {
		p.keep.release()
	}
}

// expected is the verdict of an annotation probe with httpGet.expect
// (runtime/expect) on a response whose body (at most
// runtime.MaxOutputBytes) was read: the status must be one of
// expect.status (default the kubelet's 200–399), then the body must match
// expect.bodyRegex and expect.jsonPath. A failed check is a Failure whose
// output names it and the status, never the body (BR-22). When every check
// holds: Success with the body as output, except that without
// expect.status a 3xx is the kubelet's Warning (H6). NotAfter is the
// leaf certificate's of an HTTPS response, for the runtime's
// certificateExpiresAfterDays check.
func expected(b *expect.Body, resp *nethttp.Response, body string) runtime.Outcome {
	code := resp.StatusCode
	out := runtime.Outcome{Result: runtime.Failure, StatusCode: code}
	if resp.TLS != nil && len(resp.TLS.PeerCertificates) > 0 {
		out.NotAfter = resp.TLS.PeerCertificates[0].NotAfter
	}
	if why := b.Status(code); why != "" {
		out.Output = why
		return out
	}
	if why := b.Check(body); why != "" {
		out.Output = why
		return out
	}
	if !b.ExplicitStatus() && code >= nethttp.StatusMultipleChoices {
		out.Result, out.Output = runtime.Warning, "Probe terminated redirects"
		return out
	}
	out.Result, out.Output = runtime.Success, body
	return out
}

// withhold returns err as a probe may show it under an egress policy
// (cluster mode, runtime/egress): with nothing in it that the target sent,
// since the text reaches Events the tenant can read. Without a
// policy err is returned as it is (the kubelet's texts, H6).
//
//   - a request error (*url.Error) names the probe's own URL, never a
//     redirect's Location: `Get "<the probe's URL>": <detail>`;
//   - the detail is egress.WithholdError's (timeouts, connection errors,
//     EOF and TLS record errors keep their texts; a malformed answer Go
//     quotes — an SSH banner read as a status line, `malformed HTTP
//     response "SSH-2.0-..."` —, a bad Location or an HTTP/2 GOAWAY's
//     debug data become egress.WithheldText), plus "stopped after 10
//     redirects"; after a redirect a connection error loses its
//     addresses, which came from the Location.
//
// redirected says that err (a body read error) is about a response to a
// redirect.
func withhold(ctx context.Context, own *url.URL, redirected bool, err error) error {
	if !egress.Restricted(ctx) {
		return err
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		ownURL := errorURL(own)
		return &url.Error{Op: ue.Op, URL: ownURL, Err: withholdDetail(ctx, ue.Err, redirected || ue.URL != ownURL)}
	}
	return withholdDetail(ctx, err, redirected)
}

// WithholdError is the rule of withhold for a plugin's own HTTP client
// (examples/plugins/http-match): err from a request to own, shown under
// the egress policy of ctx with nothing the target sent; unchanged without
// one.
func WithholdError(ctx context.Context, own *url.URL, err error) error {
	return withhold(ctx, own, false, err)
}

// withholdDetail is withhold's rule for the error under a request's URL.
func withholdDetail(ctx context.Context, err error, redirected bool) error {
	if errors.Is(err, errTooManyRedirects) {
		return err
	}
	var op *net.OpError
	if redirected && errors.As(err, &op) {
		var dns *net.DNSError
		if errors.As(op.Err, &dns) { // the name came from the Location
			return &net.OpError{Op: op.Op, Net: op.Net, Err: errors.New(egress.WithheldText)}
		}
		return &net.OpError{Op: op.Op, Net: op.Net, Err: op.Err}
	}
	return egress.WithholdError(ctx, err)
}

// errorURL is the URL net/http puts in a request's *url.Error: the URL with
// a password replaced by "***".
func errorURL(u *url.URL) string {
	if _, ok := u.User.Password(); ok {
		return strings.Replace(u.String(), u.User.String()+"@", u.User.Username()+":***@", 1)
	}
	return u.String()
}

// The texts net/http appends to an error when the client's timeout ended
// the request (net/http client.go): while the headers were awaited, and
// while the body was read.
const (
	awaitingHeaders = " (Client.Timeout exceeded while awaiting headers)"
	readingBody     = " (Client.Timeout or context cancellation while reading body)"
)

// asClientTimeout returns err as the client's timeout would have reported
// it (H4, H6), when the attempt's context deadline ended the request: the
// kubelet's client has Timeout = timeoutSeconds, and the kubelet's output
// at its timeout is that error's text (`Get "<url>": context deadline
// exceeded (Client.Timeout exceeded while awaiting headers)`). The
// attempt's context does the cutting under an injected clock, because a
// client timeout runs on the real clock, and on the real clock when it
// comes within the probe timeout, because a client timeout would be a
// second deadline (clientFor); this restores the text. Any other error is
// returned as it is.
func asClientTimeout(ctx context.Context, err error, suffix string) error {
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return err
	}
	var ue *url.Error
	if errors.As(err, &ue) && suffix == awaitingHeaders {
		return &url.Error{Op: ue.Op, URL: ue.URL, Err: &clientTimeoutError{ue.Err.Error() + suffix}}
	}
	return &clientTimeoutError{err.Error() + suffix}
}

// clientTimeoutError is net/http's timeoutError: a net.Error whose
// Timeout is true and that matches context.DeadlineExceeded.
type clientTimeoutError struct{ text string }

func (e *clientTimeoutError) Error() string   { return e.text }
func (e *clientTimeoutError) Timeout() bool   { return true }
func (e *clientTimeoutError) Temporary() bool { return true }
func (e *clientTimeoutError) Is(err error) bool {
	return err == context.DeadlineExceeded
}

// bodyBuf holds one attempt's body; pooled so an attempt allocates only the
// output string.
type bodyBuf [runtime.MaxOutputBytes]byte

var bodyPool = sync.Pool{New: func() any { return new(bodyBuf) }}

// readBody reads r up to runtime.MaxOutputBytes and stops there without
// reading further (H6). io.EOF ends the body; any other read error is
// returned, and the bytes read so far are dropped.
func readBody(r io.Reader) (string, error) {
	buf := bodyPool.Get().(*bodyBuf)
	defer bodyPool.Put(buf)
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", err
		}
	}
	return string(buf[:n]), nil
}
