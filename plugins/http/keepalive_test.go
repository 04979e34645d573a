package http

import (
	"context"
	nethttp "net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/probed/probed/internal/nettest"
	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/egress"
)

// Kept connections (keepalive.go).

// connServer is a loopback HTTP server that counts the connections it
// accepted and those still open, and records each request's Connection
// header. It never closes an idle connection itself (no idle timeout): a
// target that never closes.
type connServer struct {
	*httptest.Server
	nettest.ConnCount
	mu      sync.Mutex
	closes  []bool // per request: it asked to close
	hang    atomic.Bool
	release chan struct{}
}

func newConnServer(t testing.TB) *connServer {
	t.Helper()
	cs := &connServer{release: make(chan struct{})}
	cs.Server = httptest.NewUnstartedServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		cs.mu.Lock()
		cs.closes = append(cs.closes, r.Close)
		cs.mu.Unlock()
		if cs.hang.Load() {
			select {
			case <-cs.release:
			case <-r.Context().Done():
			}
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	cs.Track(cs.Config)
	cs.Start()
	t.Cleanup(func() {
		select {
		case <-cs.release:
		default:
			close(cs.release)
		}
		cs.Close()
	})
	return cs
}

func (cs *connServer) port(t testing.TB) int { return portOf(t, cs.Server) }

func (cs *connServer) requestCloses() []bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return append([]bool(nil), cs.closes...)
}

// waitOpen waits (for the server's side of the closes) until the server
// has n connections open.
func (cs *connServer) waitOpen(t testing.TB, n int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for cs.Open.Load() != n {
		if time.Now().After(deadline) {
			t.Fatalf("the server has %d connections open, want %d", cs.Open.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// annotationSpec is httpSpec with the annotation's httpGet.keepAlive.
func annotationSpec(g v1.HTTPGetAction, keepAlive *bool) *runtime.Spec {
	spec := httpSpec(g)
	spec.Probe.PeriodSeconds = 10 // idle connections close after 21 s
	spec.Extension = &runtime.Extension{KeepAlive: keepAlive}
	return spec
}

func release(p runtime.Prober) {
	if r, ok := p.(runtime.Releaser); ok {
		r.Release()
	}
}

// A probe with httpGet.keepAlive makes every run on one connection
// (without "Connection: close"), counted by KeptConnections and closed by
// Release; without it, the kubelet's way: a new connection per run, each
// request asking to close.
func TestKeepAliveOneConnectionForEveryRun(t *testing.T) {
	cs := newConnServer(t)
	base := KeptConnections()
	h := New()
	kept := prepare(t, h, annotationSpec(get(cs.port(t), "/ready"), ptr.To(true)))
	for range 5 {
		out, err := probeWithin(kept, podIP, time.Second)
		wantOutcome(t, out, err, runtime.Success, "ok")
	}
	if n := cs.Accepted.Load(); n != 1 {
		t.Fatalf("5 runs of a kept-alive probe opened %d connections, want 1", n)
	}
	for i, c := range cs.requestCloses() {
		if c {
			t.Fatalf("request %d of a kept-alive probe asked to close", i)
		}
	}
	if n := KeptConnections() - base; n != 1 {
		t.Fatalf("KeptConnections = %d more, want 1", n)
	}
	release(kept)
	release(kept) // idempotent
	cs.waitOpen(t, 0)
	if n := KeptConnections() - base; n != 0 {
		t.Fatalf("KeptConnections = %d more after Release, want 0", n)
	}

	plain := prepare(t, h, annotationSpec(get(cs.port(t), "/ready"), nil))
	for range 3 {
		out, err := probeWithin(plain, podIP, time.Second)
		wantOutcome(t, out, err, runtime.Success, "ok")
	}
	if n := cs.Accepted.Load(); n != 4 {
		t.Fatalf("3 runs without keep-alive opened %d connections, want 3 (a new one per run)", n-1)
	}
	if c := cs.requestCloses(); !c[5] || !c[6] || !c[7] {
		t.Fatalf("requests without keep-alive asked to close: %v, want true (Connection: close)", c[5:])
	}
}

// The node's default (KeepAlive(true), probed --http-keep-alive) keeps the
// connections of spec probes and of annotation probes that do not say;
// httpGet.keepAlive: false opts out.
func TestKeepAliveNodeDefaultAndOptOut(t *testing.T) {
	cs := newConnServer(t)
	h := New(KeepAlive(true))
	spec := prepare(t, h, httpSpec(get(cs.port(t), "/ready")))
	optOut := prepare(t, h, annotationSpec(get(cs.port(t), "/ready"), ptr.To(false)))
	defer release(spec)
	for range 3 {
		out, err := probeWithin(spec, podIP, time.Second)
		wantOutcome(t, out, err, runtime.Success, "ok")
	}
	if n := cs.Accepted.Load(); n != 1 {
		t.Fatalf("a spec probe under KeepAlive(true) opened %d connections in 3 runs, want 1", n)
	}
	for range 3 {
		out, err := probeWithin(optOut, podIP, time.Second)
		wantOutcome(t, out, err, runtime.Success, "ok")
	}
	if n := cs.Accepted.Load(); n != 4 {
		t.Fatalf("keepAlive false opened %d connections in 3 runs, want 3", n-1)
	}
}

// H4 holds on a kept connection: a run whose answer does not come within
// the timeout is a Failure with the kubelet's text, the connection it
// used is closed, and the next run connects anew.
func TestKeepAliveTimeoutClosesTheConnection(t *testing.T) {
	cs := newConnServer(t)
	base := KeptConnections()
	p := prepare(t, New(), annotationSpec(get(cs.port(t), "/ready"), ptr.To(true)))
	defer release(p)
	out, err := probeWithin(p, podIP, time.Second)
	wantOutcome(t, out, err, runtime.Success, "ok")
	cs.hang.Store(true)
	out, err = probeWithin(p, podIP, 100*time.Millisecond)
	if err != nil || out.Result != runtime.Failure || !strings.Contains(out.Output, "context deadline exceeded") {
		t.Fatalf("a run past its timeout on a kept connection: (%v, %q, %v), want a Failure on the deadline", out.Result, out.Output, err)
	}
	if n := KeptConnections() - base; n != 0 {
		t.Fatalf("KeptConnections = %d more after the timeout, want 0 (the connection closed)", n)
	}
	cs.hang.Store(false)
	out, err = probeWithin(p, podIP, time.Second)
	wantOutcome(t, out, err, runtime.Success, "ok")
	if n := cs.Accepted.Load(); n != 2 {
		t.Fatalf("%d connections, want 2 (a new one after the timeout)", n)
	}
}

// The egress rule holds on reuse (cluster mode): a connection kept while
// the operator allowed its address is not used by a run whose policy no
// longer allows it; the run dials anew and that dial is refused.
func TestKeepAliveEgressCheckedOnReuse(t *testing.T) {
	cs := newConnServer(t)
	g := get(cs.port(t), "/ready")
	g.Host = "127.0.0.1"
	p := prepare(t, New(), annotationSpec(g, ptr.To(true)))
	defer release(p)
	const pod = "127.0.0.3" // the pod's IP: 127.0.0.1 is reachable only through the operator's range
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	run := func(policy *egress.Policy) (runtime.Outcome, error) {
		return p.Probe(egress.WithPolicy(ctx, policy), runtime.Target{PodIP: pod, Attempt: 1})
	}
	out, err := run(egress.NewPolicy([]netip.Addr{netip.MustParseAddr(pod)}, []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}))
	wantOutcome(t, out, err, runtime.Success, "ok")
	out, err = run(egress.NewPolicy([]netip.Addr{netip.MustParseAddr(pod)}, nil)) // the operator's range is gone
	want := `Get "http://127.0.0.1:` + itoa(cs.port(t)) + `/ready": dial tcp 127.0.0.1:` + itoa(cs.port(t)) + ": " + egress.DeniedText
	wantOutcome(t, out, err, runtime.Failure, want)
	if n := len(cs.requestCloses()); n != 1 {
		t.Fatalf("the server read %d requests, want 1 (none over the kept connection once the policy refused its address)", n)
	}
	cs.waitOpen(t, 0)
}

// Hostile input (a tenant's annotation): many kept-alive probes against a
// target that never closes its connections, one of them redirected across
// several ports. The handler's probes together keep at most
// MaxKeptConnections connections; each probe at most one; every run is a
// Success (the probes beyond the bound make theirs on a new connection,
// closed after the answer); removing the probes closes every connection.
func TestKeepAliveHostileManyProbesTargetNeverCloses(t *testing.T) {
	cs := newConnServer(t)
	hops := make([]*connServer, 4)
	for i := range hops {
		hops[i] = newConnServer(t)
	}
	// The redirecting target: /hop/i redirects to the next server's
	// /hop/i+1, the last answers.
	for i := len(hops) - 2; i >= 0; i-- {
		next := hops[i+1]
		hops[i].Config.Handler = nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
			nethttp.Redirect(w, r, "http://127.0.0.1:"+itoa(next.port(t))+"/last", nethttp.StatusFound)
		})
	}
	base := KeptConnections()
	const probes, bound = 120, 40
	h := New(MaxKeptConnections(bound))
	ps := make([]runtime.Prober, probes)
	for i := range ps {
		ps[i] = prepare(t, h, annotationSpec(get(cs.port(t), "/ready"), ptr.To(true)))
	}
	redirected := prepare(t, h, annotationSpec(get(hops[0].port(t), "/first"), ptr.To(true)))
	for round := range 3 {
		out, err := probeWithin(redirected, podIP, 2*time.Second)
		wantOutcome(t, out, err, runtime.Success, "ok")
		var wg sync.WaitGroup
		for _, p := range ps {
			wg.Go(func() {
				out, err := probeWithin(p, podIP, 2*time.Second)
				if err != nil || out.Result != runtime.Success {
					t.Errorf("round %d: (%v, %q, %v), want Success", round, out.Result, out.Output, err)
				}
			})
		}
		wg.Wait()
		// Once the runs' answers are read and the connections of the
		// probes beyond the bound closed (net/http closes them after the
		// body, on its own goroutine), at most the bound stay open.
		waitKept(t, base, bound)
	}
	// The server's side: it never closes, so what is open is what the
	// probes keep — the bound, the rest closed after each answer.
	cs.waitOpen(t, bound-1) // the redirected probe, first to run, holds one slot
	var hopsOpen int64
	for _, s := range hops {
		hopsOpen += s.Open.Load()
	}
	if hopsOpen > 1 {
		t.Fatalf("the redirected probe holds %d connections over its hops, want at most 1", hopsOpen)
	}
	for _, p := range append(ps, redirected) {
		release(p)
	}
	cs.waitOpen(t, 0)
	for _, s := range hops {
		s.waitOpen(t, 0)
	}
	waitKept(t, base, 0)
	if h.(*handler).kept.Load() != 0 {
		t.Fatalf("%d slots still held after every probe was removed", h.(*handler).kept.Load())
	}
}

// waitKept waits until at most n more connections than base are open in
// kept-alive probes (KeptConnections).
func waitKept(t *testing.T, base, n int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for KeptConnections()-base > n {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections open in kept-alive probes, want at most %d", KeptConnections()-base, n)
		}
		time.Sleep(time.Millisecond)
	}
}
