// Package dialer holds the network dialer shared by the built-in TCP, HTTP
// and gRPC handlers.
//
// The kubelet sets SO_LINGER {on, 1 s} on probe sockets (spec H3, PR
// #115143) so that closed sockets do not pile up in TIME-WAIT. Measured on
// Linux (spec H3, BR-17), {on, 1 s} neither removes TIME-WAIT on loopback nor
// comes free: a close may block its OS thread for up to a second. probed uses
// {on, 0}: the prober's close sends an RST and leaves no TIME-WAIT socket on
// its side, whatever the probe rate, while the target still sees the same
// handshake and (for HTTP) the same request. docs/probes.md records the
// choice.
package dialer

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/probed/probed/runtime/egress"
)

// resolver resolves host names of probes (httpGet.host, tcpSocket.host);
// nil means net.DefaultResolver.
var resolver atomic.Pointer[net.Resolver]

// New returns a dialer for one probe attempt: timeout bounds the connect
// (zero: only the context does, as for an attempt whose deadline runs on
// an injected clock, runtime.OnInjectedClock), every address it connects
// to must be allowed by the egress policy of the dial's context
// (egress.Control; a refused one fails the dial with `dial tcp IP:PORT:
// refused by probed's egress policy (...)` before any packet is sent), and
// every socket it opens closes with SO_LINGER {on, 0}.
func New(timeout time.Duration) *net.Dialer {
	// KeepAlive -1: a probe connection lives for one request; TCP
	// keep-alive would cost three setsockopt calls per probe for nothing.
	return &net.Dialer{Timeout: timeout, KeepAlive: -1, ControlContext: control, Resolver: resolver.Load()}
}

// control is the dialers' ControlContext: the egress check, then
// SO_LINGER {on, 0}.
func control(ctx context.Context, network, address string, c syscall.RawConn) error {
	if err := egress.Control(ctx, network, address, c); err != nil {
		return err
	}
	return lingerZero(network, address, c)
}

// NoDNSForTests makes every name lookup of probe dialers fail at once
// without sending a query (/etc/hosts still applies), so tests of
// unresolvable names never send traffic off the machine. It returns a
// function restoring the default resolver.
func NoDNSForTests() (restore func()) {
	resolver.Store(&net.Resolver{
		PreferGo: true,
		Dial: func(context.Context, string, string) (net.Conn, error) {
			return nil, errors.New("DNS disabled in tests")
		},
	})
	return func() { resolver.Store(nil) }
}

// lingerZero is a net.Dialer Control hook setting SO_LINGER {on, 0}.
func lingerZero(network, address string, c syscall.RawConn) error {
	var sockErr error
	err := c.Control(func(fd uintptr) {
		sockErr = setLinger(int(fd))
	})
	if err != nil {
		return err
	}
	return sockErr
}
