// Package tcp is the built-in tcpSocket probe handler, kubelet-exact (spec
// §5.2, rule T1; BR-18, BR-20, BR-23).
//
// A TCP probe proves only that the handshake completes: the kernel can
// complete it from the listen backlog even when the application never
// accepts (BR-18). No data is sent or read; the connection is closed as
// soon as it is established.
package tcp

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strconv"
	"sync/atomic"

	"github.com/probed/probed/plugins/internal/dialer"
	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/egress"
	"github.com/probed/probed/runtime/expect"
)

// New returns the tcpSocket handler (runtime.KindTCP).
func New() runtime.Handler { return handler{} }

type handler struct{}

// Prepare binds spec (which must carry Probe.TCPSocket) to a Prober whose
// connections come from dialer.New(spec.Timeout()), or dialer.New(0) for an
// attempt whose deadline runs on an injected clock.
//
// Prepare fails (every run errored, P5) only when the spec has no tcpSocket
// action. A port that does not resolve (spec 1.4: `port "metrcis" not
// found`, `invalid port number: N`) is reported by the returned Prober as
// the error, with Result Unknown, of every Probe call, so each run is
// errored as upstream's is (BR-20).
func (handler) Prepare(spec *runtime.Spec) (runtime.Prober, error) {
	if spec == nil || spec.Probe == nil || spec.Probe.TCPSocket == nil {
		return nil, errors.New("tcp probe: the probe has no tcpSocket action")
	}
	a := spec.Probe.TCPSocket
	port, err := runtime.ResolvePort(a.Port, spec.Container)
	if err != nil {
		return runtime.ProberFunc(func(context.Context, runtime.Target) (runtime.Outcome, error) {
			return runtime.Outcome{Result: runtime.Unknown}, err
		}), nil
	}
	p := &prober{
		dialer:  dialer.New(spec.Timeout()),
		untimed: dialer.New(0),
		port:    strconv.Itoa(port),
		tls:     expect.WantsCertificate(runtime.ExpectOf(spec)),
	}
	if a.Host != "" {
		p.fixed = net.JoinHostPort(a.Host, p.port)
		if net.ParseIP(a.Host) == nil {
			p.serverName = a.Host
		}
	}
	return p, nil
}

// prober is one prepared tcpSocket probe. It is safe for concurrent use.
type prober struct {
	dialer *net.Dialer
	// untimed dials attempts whose deadline runs on an injected clock
	// (runtime.OnInjectedClock): the context alone bounds the connect.
	untimed *net.Dialer
	port    string
	fixed   string // host:port when tcpSocket.host is set
	last    atomic.Pointer[podAddr]
	// tls: an annotation probe's tcpSocket.expect asks for the
	// certificate (certificateExpiresAfterDays): after connecting, the
	// prober makes a TLS handshake, SNI serverName (tcpSocket.host when it
	// is a name).
	tls        bool
	serverName string
}

// podAddr caches the address built for the last pod IP seen.
type podAddr struct{ podIP, addr string }

// addr returns the dial address (T1, P7): tcpSocket.host or the pod IP,
// joined with the port IPv6-safely ("[fd00::1]:8080", BR-23).
func (p *prober) addr(podIP string) string {
	if p.fixed != "" {
		return p.fixed
	}
	if c := p.last.Load(); c != nil && c.podIP == podIP {
		return c.addr
	}
	c := &podAddr{podIP: podIP, addr: net.JoinHostPort(podIP, p.port)}
	p.last.Store(c)
	return c.addr
}

// Probe opens one TCP connection to the target and closes it at once (T1).
// The connect is bounded by the probe timeout (the dialer's) and by ctx; on
// an injected clock by ctx alone, which ends with context.DeadlineExceeded
// when that clock passes the deadline, so the output is the kubelet's
// dial timeout ("dial tcp <addr>: i/o timeout") all the same.
//
//   - connected → Success, output "";
//   - any dial error (refused, timeout, name resolution, bad address) →
//     Failure, output = the Go error string, nil error, the dial error as
//     the Outcome's Cause.
//
// The error is always nil. The runtime makes a Failure whose Cause shows
// the prober out of its own resources (socket: too many open files, no
// free local port) an errored run instead (runtime.ClassifyAttempt).
func (p *prober) Probe(ctx context.Context, t runtime.Target) (runtime.Outcome, error) {
	d := p.dialer
	if runtime.OnInjectedClock(ctx) {
		d = p.untimed
	}
	if p.tls {
		return p.handshake(ctx, d, p.addr(t.PodIP)), nil
	}
	return dial(ctx, d, p.addr(t.PodIP)), nil
}

// dial is the T1 check against addr.
func dial(ctx context.Context, d *net.Dialer, addr string) runtime.Outcome {
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return runtime.Outcome{Result: runtime.Failure, Output: err.Error(), Cause: err}
	}
	// Upstream only logs a close error; the verdict stays Success.
	_ = conn.Close()
	return runtime.Outcome{Result: runtime.Success}
}

// handshake is the check of an annotation probe whose tcpSocket.expect
// asks for the certificate: connect as T1, then a TLS
// handshake within the same deadline, without verifying the certificate
// (as the kubelet's HTTPS probes, H3), and report the leaf's NotAfter for
// the runtime's certificateExpiresAfterDays check. A failed handshake is
// a Failure naming it (under an egress policy without what the target
// sent, egress.WithholdError).
func (p *prober) handshake(ctx context.Context, d *net.Dialer, addr string) runtime.Outcome {
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return runtime.Outcome{Result: runtime.Failure, Output: err.Error(), Cause: err}
	}
	defer conn.Close()
	tc := tls.Client(conn, &tls.Config{ServerName: p.serverName, InsecureSkipVerify: true}) //nolint:gosec // H3: probes never verify certificates; only the expiry is checked.
	if err := tc.HandshakeContext(ctx); err != nil {
		return runtime.Outcome{Result: runtime.Failure, Output: "TLS handshake with " + addr + " failed: " + egress.WithholdError(ctx, err).Error()}
	}
	out := runtime.Outcome{Result: runtime.Success}
	if certs := tc.ConnectionState().PeerCertificates; len(certs) > 0 {
		out.NotAfter = certs[0].NotAfter
	}
	return out
}
