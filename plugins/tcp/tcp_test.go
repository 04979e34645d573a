package tcp

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/probed/probed/plugins/internal/dialer"
	"github.com/probed/probed/runtime"
)

const podIP = "127.0.0.1"

func tcpSpec(a v1.TCPSocketAction, ports ...v1.ContainerPort) *runtime.Spec {
	return &runtime.Spec{
		Kind:      runtime.KindTCP,
		ProbeType: runtime.Liveness,
		Probe: &v1.Probe{
			ProbeHandler:   v1.ProbeHandler{TCPSocket: &a},
			TimeoutSeconds: 1,
		},
		Container: &v1.Container{Name: "app", Ports: ports},
	}
}

func portAction(port int) v1.TCPSocketAction {
	return v1.TCPSocketAction{Port: intstr.FromInt32(int32(port))}
}

// probe prepares spec and makes one attempt against ip with a 1 s deadline.
func probe(t *testing.T, spec *runtime.Spec, ip string) (runtime.Outcome, error) {
	t.Helper()
	p, err := New().Prepare(spec)
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return p.Probe(ctx, runtime.Target{PodIP: ip, Attempt: 1})
}

// listen opens a loopback listener closed at the end of the test. When
// accept is set, a goroutine accepts and immediately closes connections.
func listen(t *testing.T, network, addr string, accept bool) (net.Listener, int) {
	t.Helper()
	l, err := net.Listen(network, addr)
	if err != nil {
		t.Skipf("cannot listen on %s %s: %v", network, addr, err)
	}
	var wg sync.WaitGroup
	if accept {
		wg.Go(func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		})
	}
	t.Cleanup(func() { l.Close(); wg.Wait() })
	return l, l.Addr().(*net.TCPAddr).Port
}

// closedPort returns a loopback port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TC1 (TestTcpHealthChecker): an open listener → Success with output ""
// and a nil error; a port that cannot be dialled (-1) → Failure, nil error.
func TestTC1_TCPHealthChecker(t *testing.T) {
	_, port := listen(t, "tcp", "127.0.0.1:0", true)
	got, err := probe(t, tcpSpec(portAction(port)), podIP)
	if err != nil || got.Result != runtime.Success || got.Output != "" {
		t.Fatalf("open listener: (%v, %q, %v), want (success, \"\", nil)", got.Result, got.Output, err)
	}

	// Upstream's dial-level case: port -1 is a dial error → Failure.
	out := dial(context.Background(), dialer.New(time.Second), net.JoinHostPort(podIP, "-1"))
	if out.Result != runtime.Failure || !strings.Contains(out.Output, "invalid port") {
		t.Fatalf("port -1 at dial level: (%v, %q), want Failure with invalid port", out.Result, out.Output)
	}
	// Through the handler, -1 is first rejected by port resolution (spec
	// 1.4): errored, as in the kubelet's prober.
	got, err = probe(t, tcpSpec(portAction(-1)), podIP)
	if err == nil || err.Error() != "invalid port number: -1" || got.Result != runtime.Unknown {
		t.Fatalf("port -1 via spec: (%v, %v), want Unknown with invalid port number: -1", got.Result, err)
	}
}

// T1: tcpSocket.host replaces the pod IP as the dial target.
func TestT1_HostField(t *testing.T) {
	_, port := listen(t, "tcp", "127.0.0.1:0", true)
	a := portAction(port)
	a.Host = "127.0.0.1"
	// The pod IP is unusable, so Success proves the host was dialled.
	got, err := probe(t, tcpSpec(a), "")
	if err != nil || got.Result != runtime.Success {
		t.Fatalf("(%v, %q, %v), want Success", got.Result, got.Output, err)
	}
	if _, err := New().Prepare(&runtime.Spec{Probe: &v1.Probe{}}); err == nil {
		t.Fatal("Prepare without tcpSocket must fail")
	}
}

// BR-18: the probe proves only the handshake. (a) a listener that never
// accepts → Success; (b) accept-and-close → Success; (c) nothing
// listening → Failure, fast. (d, dropped SYNs, needs packet filtering and
// is not reproducible on loopback.)
func TestBR18_HandshakeOnly(t *testing.T) {
	t.Run("a never accepts", func(t *testing.T) {
		_, port := listen(t, "tcp", "127.0.0.1:0", false)
		// Fill part of the backlog with handshaken, never-accepted
		// connections that stay open.
		for i := 0; i < 64; i++ {
			c, err := net.Dial("tcp", net.JoinHostPort(podIP, itoa(port)))
			if err != nil {
				t.Fatalf("filling the backlog: %v", err)
			}
			t.Cleanup(func() { c.Close() })
		}
		for i := 0; i < 3; i++ {
			got, err := probe(t, tcpSpec(portAction(port)), podIP)
			if err != nil || got.Result != runtime.Success {
				t.Fatalf("attempt %d: (%v, %q, %v), want Success", i, got.Result, got.Output, err)
			}
		}
	})
	t.Run("b accept and close", func(t *testing.T) {
		_, port := listen(t, "tcp", "127.0.0.1:0", true)
		got, err := probe(t, tcpSpec(portAction(port)), podIP)
		if err != nil || got.Result != runtime.Success {
			t.Fatalf("(%v, %q, %v), want Success", got.Result, got.Output, err)
		}
	})
	t.Run("c nothing listening", func(t *testing.T) {
		port := closedPort(t)
		start := time.Now()
		got, err := probe(t, tcpSpec(portAction(port)), podIP)
		want := "dial tcp 127.0.0.1:" + itoa(port) + ": connect: connection refused"
		if err != nil || got.Result != runtime.Failure || got.Output != want {
			t.Fatalf("(%v, %q, %v), want (failure, %q, nil)", got.Result, got.Output, err, want)
		}
		if d := time.Since(start); d > 900*time.Millisecond {
			t.Fatalf("refused attempt took %v", d)
		}
	})
}

// T1: the dial honours ctx: a context already done fails the attempt at once.
func TestT1_ContextHonoured(t *testing.T) {
	_, port := listen(t, "tcp", "127.0.0.1:0", false)
	p, err := New().Prepare(tcpSpec(portAction(port)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	got, err := p.Probe(ctx, runtime.Target{PodIP: podIP})
	if err != nil || got.Result != runtime.Failure || !strings.Contains(got.Output, "canceled") {
		t.Fatalf("(%v, %q, %v), want a canceled Failure", got.Result, got.Output, err)
	}
}

// BR-20: a named port resolves to containerPort, not hostPort; an unknown
// name errors every attempt with `port "metrcis" not found`.
func TestBR20_NamedPort(t *testing.T) {
	_, port := listen(t, "tcp", "127.0.0.1:0", true)
	ports := []v1.ContainerPort{{Name: "http-alt", ContainerPort: int32(port), HostPort: int32(closedPort(t))}}
	got, err := probe(t, tcpSpec(v1.TCPSocketAction{Port: intstr.FromString("http-alt")}, ports...), podIP)
	if err != nil || got.Result != runtime.Success {
		t.Fatalf("named port: (%v, %q, %v), want Success on containerPort", got.Result, got.Output, err)
	}

	p, err := New().Prepare(tcpSpec(v1.TCPSocketAction{Port: intstr.FromString("metrcis")}, ports...))
	if err != nil {
		t.Fatalf("Prepare: %v, want the error at every attempt instead", err)
	}
	for i := 0; i < 3; i++ {
		got, err := p.Probe(context.Background(), runtime.Target{PodIP: podIP})
		if err == nil || !strings.Contains(err.Error(), `port "metrcis" not found`) || got.Result != runtime.Unknown {
			t.Fatalf("attempt %d: (%v, %v), want errored with port \"metrcis\" not found", i, got.Result, err)
		}
	}
}

// BR-23: an IPv6 pod IP is dialled as [::1]:port; an IPv4-only listener
// fails on it, with no fallback.
func TestBR23_IPv6PodIP(t *testing.T) {
	_, port := listen(t, "tcp6", "[::1]:0", true)
	got, err := probe(t, tcpSpec(portAction(port)), "::1")
	if err != nil || got.Result != runtime.Success {
		t.Fatalf("(%v, %q, %v), want Success on [::1]", got.Result, got.Output, err)
	}

	_, v4 := listen(t, "tcp", "127.0.0.1:0", true)
	got, err = probe(t, tcpSpec(portAction(v4)), "::1")
	want := "dial tcp [::1]:" + itoa(v4) + ": connect: connection refused"
	if err != nil || got.Result != runtime.Failure || got.Output != want {
		t.Fatalf("(%v, %q, %v), want (failure, %q, nil)", got.Result, got.Output, err, want)
	}
}

// The dial address is cached per pod IP and follows a change of pod IP.
func TestT1_PodIPChange(t *testing.T) {
	p, err := New().Prepare(tcpSpec(portAction(8080)))
	if err != nil {
		t.Fatal(err)
	}
	pr := p.(*prober)
	for _, c := range []struct{ ip, want string }{
		{"10.0.0.1", "10.0.0.1:8080"}, {"10.0.0.1", "10.0.0.1:8080"}, {"fd00::1", "[fd00::1]:8080"},
	} {
		if got := pr.addr(c.ip); got != c.want {
			t.Fatalf("addr(%q) = %q, want %q", c.ip, got, c.want)
		}
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// SC1 (TestTCPPortExhaustion, scaled down from 600 containers × 59 s; BR-17):
// a burst of probes against one listener produces no Failure; the prober's
// sockets close with SO_LINGER {on, 0} and leave no TIME-WAIT behind to
// exhaust ephemeral ports.
func TestSC1_NoFalseFailuresUnderChurn(t *testing.T) {
	_, port := listen(t, "tcp", "127.0.0.1:0", true)
	p, err := New().Prepare(tcpSpec(portAction(port)))
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg       sync.WaitGroup
		failures atomic.Int32
	)
	for range 8 {
		wg.Go(func() {
			for range 75 {
				got, err := p.Probe(context.Background(), runtime.Target{PodIP: podIP})
				if err != nil || got.Result != runtime.Success {
					failures.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := failures.Load(); n != 0 {
		t.Fatalf("%d of 600 probes failed", n)
	}
}
