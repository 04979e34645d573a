package runtime

import (
	"context"
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/probed/probed/runtime/egress"
)

// TestRunCarriesTheEgressPolicy: with Options.Egress every attempt's
// context carries the policy of its target — all of the pod's IPs plus the
// operator's ranges — rebuilt when the pod's IPs change; without it the
// context carries none (manifest mode, kubelet-exact).
func TestRunCarriesTheEgressPolicy(t *testing.T) {
	rule := egress.NewRule([]netip.Prefix{netip.MustParsePrefix("192.168.0.0/16")})
	rt, err := New(Options{PoolSize: 1, ExecPoolSize: 1, Egress: rule})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	var seen []*egress.Policy
	_ = rt.Register("see", HandlerFunc(func(*Spec) (Prober, error) {
		return ProberFunc(func(ctx context.Context, _ Target) (Outcome, error) {
			seen = append(seen, egress.FromContext(ctx))
			return Outcome{Result: Success}, nil
		}), nil
	}))
	p := rt.Prepare(&Spec{Kind: "see", Probe: &v1.Probe{TimeoutSeconds: 1}})
	dual := Target{PodIP: "10.0.0.1", PodIPs: []v1.PodIP{{IP: "10.0.0.1"}, {IP: "fd00::1"}}}
	rt.Run(context.Background(), p, dual)
	rt.Run(context.Background(), p, dual)
	rt.Run(context.Background(), p, Target{PodIP: "10.0.0.9", PodIPs: []v1.PodIP{{IP: "10.0.0.9"}}})
	if len(seen) != 3 || seen[0] == nil {
		t.Fatalf("policies seen: %v", seen)
	}
	for _, c := range []struct {
		ip   string
		want bool
	}{{"10.0.0.1", true}, {"fd00::1", true}, {"192.168.3.4", true}, {"10.0.0.2", false}, {"127.0.0.1", false}} {
		if got := seen[0].Allows(netip.MustParseAddr(c.ip)); got != c.want {
			t.Errorf("first run: Allows(%s) = %v, want %v", c.ip, got, c.want)
		}
	}
	if seen[1] != seen[0] {
		t.Error("the policy was rebuilt for unchanged pod IPs")
	}
	if seen[2].Allows(netip.MustParseAddr("10.0.0.1")) || !seen[2].Allows(netip.MustParseAddr("10.0.0.9")) {
		t.Error("the policy did not follow the pod's new IP")
	}

	open, err := New(Options{PoolSize: 1, ExecPoolSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close(context.Background())
	var none *egress.Policy
	_ = open.Register("see", HandlerFunc(func(*Spec) (Prober, error) {
		return ProberFunc(func(ctx context.Context, _ Target) (Outcome, error) {
			none = egress.FromContext(ctx)
			return Outcome{Result: Success}, nil
		}), nil
	}))
	open.Run(context.Background(), open.Prepare(&Spec{Kind: "see", Probe: &v1.Probe{TimeoutSeconds: 1}}), dual)
	if none != nil {
		t.Errorf("a runtime without Egress carried a policy: %v", none)
	}
}
