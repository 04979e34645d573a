package http

import (
	"context"
	"net"
	nethttp "net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/probed/probed/runtime/egress"
)

// Kept connections: an HTTP probe may keep its connection from
// one run to the next instead of opening one per run as the kubelet does
// (H3: keep-alives off). It is opt-in — httpGet.keepAlive in the
// probed.io/probes annotation, or KeepAlive(true) for every probe of the
// handler whose annotation does not say (probed --http-keep-alive) — and
// bounded:
//
//   - a probe keeps at most one idle connection (its own transport,
//     MaxIdleConns 1: a redirect to another address replaces it), closed
//     when the probe is removed (Release), when it idled for two of the
//     probe's longest periods plus its timeout, or when the target closes
//     it;
//   - the probes of one handler keep at most MaxKeptConnections
//     connections together: a probe beyond that makes each run on a new
//     connection, closed after the answer ("Connection: close"), as without
//     keep-alive, until a keeping probe is removed;
//   - every run is still bounded by the probe's timeout (the attempt's
//     context, H4), and a connection that timed out is closed;
//   - a kept connection speaks HTTP/1.1 (no h2 through ALPN; an
//     httpGet.protocol HTTP2 probe does not keep its connection);
//   - in cluster mode the egress rule holds for kept connections too: the
//     dial is checked as every probe's is (plugins/internal/dialer), and
//     before a run reuses a connection its address is checked against the
//     run's policy (the pod's IPs may have changed): one the policy no
//     longer allows is closed, and the run dials anew, checked.
//
// What a kept connection does not prove: that the target still accepts
// new connections (its listen queue, accept loop and connection limits),
// which the kubelet's probe does on every run (docs/probes.md).

// DefaultMaxKeptConnections is the default of MaxKeptConnections.
const DefaultMaxKeptConnections = 1024

// KeepAlive sets whether probes whose httpGet.keepAlive is not set (every
// spec probe, and annotation probes that do not say) keep their connection
// between runs; default false, the kubelet's one connection per run.
func KeepAlive(on bool) Option {
	return func(h *handler) { h.keepAlive = on }
}

// MaxKeptConnections bounds the connections the handler's probes keep
// open between runs, together (default DefaultMaxKeptConnections; n ≤ 0:
// the default).
func MaxKeptConnections(n int) Option {
	return func(h *handler) {
		if n > 0 {
			h.maxKept = int64(n)
		}
	}
}

// keptLive counts the connections of kept-alive probes that are open, in
// every handler of the process (in flight or idle).
var keptLive atomic.Int64

// KeptConnections returns the connections of kept-alive HTTP probes open
// now in this process (every handler): probed_http_kept_connections.
func KeptConnections() int64 { return keptLive.Load() }

// keptConns is what one kept-alive probe holds: its own transports (the
// real clock's and the injected clock's) with at most one idle connection
// each, and the connections they opened.
type keptConns struct {
	h                 *handler
	tr, injectedTr    *nethttp.Transport
	client, bound     *nethttp.Client
	injected          *nethttp.Client
	mu                sync.Mutex
	conns             []*keptConn // open, oldest first
	slot              bool        // holds one of h's MaxKeptConnections
	released          bool
	timeout, idleTime time.Duration
}

// newKeptConns builds the transports of one kept-alive probe: the shared
// transport's settings (newTransport, HTTP/1.1 only) with keep-alives on,
// one idle connection, closed after idle.
func newKeptConns(h *handler, timeout, idle time.Duration, redirects func(*nethttp.Request, []*nethttp.Request) error) *keptConns {
	k := &keptConns{h: h, timeout: timeout, idleTime: idle}
	k.tr = k.transport(timeout)
	k.injectedTr = k.transport(0)
	k.client = &nethttp.Client{Transport: k.tr, CheckRedirect: redirects, Timeout: timeout}
	k.bound = &nethttp.Client{Transport: k.tr, CheckRedirect: redirects}
	k.injected = &nethttp.Client{Transport: k.injectedTr, CheckRedirect: redirects}
	return k
}

func (k *keptConns) transport(timeout time.Duration) *nethttp.Transport {
	t := newTransport(timeout, false, true)
	t.DisableKeepAlives = false
	t.MaxIdleConns, t.MaxIdleConnsPerHost = 1, 1
	t.IdleConnTimeout = k.idleTime
	dial := t.DialContext
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return k.track(c), nil
	}
	return t
}

// keptConn is an open connection of a kept-alive probe: it counts itself
// out when closed.
type keptConn struct {
	net.Conn
	k    *keptConns
	ip   netip.Addr // the remote address, for the egress check on reuse
	once sync.Once
}

func (c *keptConn) Close() error {
	c.once.Do(func() {
		keptLive.Add(-1)
		c.k.forget(c)
	})
	return c.Conn.Close()
}

func (k *keptConns) track(c net.Conn) net.Conn {
	kc := &keptConn{Conn: c, k: k}
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		kc.ip = ap.Addr()
	}
	keptLive.Add(1)
	k.mu.Lock()
	k.conns = append(k.conns, kc)
	k.mu.Unlock()
	return kc
}

func (k *keptConns) forget(c *keptConn) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for i, o := range k.conns {
		if o == c {
			k.conns = append(k.conns[:i], k.conns[i+1:]...)
			return
		}
	}
}

// admit prepares one run: under an egress policy (ctx), connections whose
// address the policy does not allow are closed first (the probe has no run
// in flight: they are all idle); then the probe takes one of the handler's
// MaxKeptConnections if it holds none. It returns false when the run must
// not keep its connection (no slot free, or the probe was released): the
// caller asks to close after the answer.
func (k *keptConns) admit(ctx context.Context) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.released {
		return false
	}
	if pol := egress.FromContext(ctx); pol != nil {
		for _, c := range k.conns {
			if !pol.Allows(c.ip) {
				k.mu.Unlock()
				k.closeIdle()
				k.mu.Lock()
				break
			}
		}
	}
	if !k.slot {
		if k.h.kept.Add(1) > k.h.maxKept {
			k.h.kept.Add(-1)
			return false
		}
		k.slot = true
	}
	return true
}

func (k *keptConns) closeIdle() {
	k.tr.CloseIdleConnections()
	k.injectedTr.CloseIdleConnections()
}

// release closes the probe's connections and gives back its slot
// (runtime.Releaser, when the probe is removed). Idempotent.
func (k *keptConns) release() {
	k.mu.Lock()
	if k.released {
		k.mu.Unlock()
		return
	}
	k.released = true
	if k.slot {
		k.slot = false
		k.h.kept.Add(-1)
	}
	k.mu.Unlock()
	k.closeIdle()
}

// afterRun closes what a run left idle when the probe was released while
// it ran (a manager closing with runs in flight).
func (k *keptConns) afterRun() {
	k.mu.Lock()
	released := k.released
	k.mu.Unlock()
	if released {
		k.closeIdle()
	}
}
