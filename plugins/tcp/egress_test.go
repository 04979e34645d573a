package tcp

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/egress"
)

// TestEgressRefusesAHostThatIsNotThePod: under the egress policy of a pod
// whose IP is 127.0.0.1 (cluster mode, issue 17), tcpSocket.host
// 127.0.0.2 is refused before connecting — a Failure naming the policy —
// and the listener there never accepts; the pod's own IP connects.
func TestEgressRefusesAHostThatIsNotThePod(t *testing.T) {
	ln, port := listen(t, "tcp", "127.0.0.2:0", false)
	accepted := make(chan string, 2)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c.RemoteAddr().String()
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	policy := egress.WithPolicy(ctx, egress.NewPolicy([]netip.Addr{netip.MustParseAddr(podIP)}, nil))
	a := portAction(port)
	a.Host = "127.0.0.2"
	p, err := New().Prepare(tcpSpec(a))
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.Probe(policy, runtime.Target{PodIP: podIP, Attempt: 1})
	addr := "127.0.0.2:" + strconv.Itoa(port)
	if err != nil || out.Result != runtime.Failure || out.Output != "dial tcp "+addr+": "+egress.DeniedText || !egress.IsDenied(out.Cause) {
		t.Fatalf("outcome (%v, %q, %v), want a Failure refused by the egress policy", out.Result, out.Output, err)
	}
	// Then a connection of the test's own: it is the first the listener
	// accepts, so the refused probe never connected.
	mine, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Close()
	select {
	case from := <-accepted:
		if from != mine.LocalAddr().String() {
			t.Fatalf("the listener first accepted %s, not the test's connection from %s: the refused probe connected", from, mine.LocalAddr())
		}
	case <-ctx.Done():
		t.Fatal("the test's connection was not accepted")
	}
	// With 127.0.0.2 as the pod's IP the same probe connects.
	own := egress.WithPolicy(ctx, egress.NewPolicy([]netip.Addr{netip.MustParseAddr("127.0.0.2")}, nil))
	if out, err := p.Probe(own, runtime.Target{PodIP: "127.0.0.2", Attempt: 1}); err != nil || out.Result != runtime.Success {
		t.Fatalf("allowed: (%v, %q, %v)", out.Result, out.Output, err)
	}
}
