package tcp

import (
	"strconv"
	"testing"
	"time"

	"github.com/probed/probed/internal/standin"
	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/egress"
)

// TestEgressRefusesAHostThatIsNotThePod: under the egress policy of a pod
// whose IP is 127.0.0.1 (cluster mode), tcpSocket.host
// 127.0.0.2 is refused before connecting — a Failure naming the policy —
// and the stand-in there is never reached; when 127.0.0.2 is the pod's IP
// the same probe connects.
func TestEgressRefusesAHostThatIsNotThePod(t *testing.T) {
	s := standin.Banner(t, "127.0.0.2:0", "")
	policy := standin.PodContext(t, 5*time.Second, podIP)
	a := portAction(s.Port())
	a.Host = "127.0.0.2"
	p, err := New().Prepare(tcpSpec(a))
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.Probe(policy, runtime.Target{PodIP: podIP, Attempt: 1})
	addr := "127.0.0.2:" + strconv.Itoa(s.Port())
	if err != nil || out.Result != runtime.Failure || out.Output != "dial tcp "+addr+": "+egress.DeniedText || !egress.IsDenied(out.Cause) {
		t.Fatalf("outcome (%v, %q, %v), want a Failure refused by the egress policy", out.Result, out.Output, err)
	}
	s.NoConnection(t)
	own := standin.PodContext(t, 5*time.Second, "127.0.0.2")
	if out, err := p.Probe(own, runtime.Target{PodIP: "127.0.0.2", Attempt: 1}); err != nil || out.Result != runtime.Success {
		t.Fatalf("allowed: (%v, %q, %v)", out.Result, out.Output, err)
	}
}
