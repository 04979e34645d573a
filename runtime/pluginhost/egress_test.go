package pluginhost_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/probed/probed/internal/standin"
	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/egress"
	"github.com/probed/probed/runtime/pluginhost"
)

// probeUnder is probeOnce with the egress policy of a pod whose IP is
// 10.1.2.3 and the allowed range 192.168.0.0/16 (cluster mode).
func probeUnder(t *testing.T, h *pluginhost.Host, spec *runtime.Spec) (runtime.Outcome, error) {
	t.Helper()
	pr, err := h.Handler(spec.Kind).Prepare(spec)
	if err != nil {
		return runtime.Outcome{}, err
	}
	ctx := standin.PodContext(t, spec.Timeout(), "10.1.2.3", "192.168.0.0/16")
	return pr.Probe(ctx, runtime.Target{PodIP: "10.1.2.3", ContainerID: "containerd://abc", Attempt: 1})
}

// TestEgressLevel: in cluster mode (a policy on the attempt's context) the
// host sends the policy with the request to a plugin that announces
// probeplugin v1.1, whose SDK dialer then refuses a connection the policy
// does not allow before connecting; a plugin that does not announce it is
// not called at all — its attempts are errored, naming the plugin and the
// level — unless the configuration trusts it (trustEgress). Without a
// policy (manifest mode) every plugin runs as before.
func TestEgressLevel(t *testing.T) {
	t.Parallel()
	enforcing := func(c *pluginhost.PluginConfig) {
		c.Env = map[string]string{"TESTPLUGIN_KINDS": "enforcing", "TESTPLUGIN_ENFORCES_EGRESS": "1"}
	}
	h, logs := startHost(t, pluginhost.Options{Plugins: []pluginhost.PluginConfig{
		testConfig("plain"),
		testConfig("trusted", func(c *pluginhost.PluginConfig) {
			c.Env = map[string]string{"TESTPLUGIN_KINDS": "trusted"}
			c.TrustEgress = true
		}),
		testConfig("enforcing", enforcing),
	}})
	if !strings.Contains(logs.String(), `egress="not enforced: its probes are errored in cluster mode"`) ||
		!strings.Contains(logs.String(), `egress="trusted (trustEgress)"`) || !strings.Contains(logs.String(), "egress=enforced") {
		t.Errorf("the start logs do not say how each plugin stands to the egress policy:\n%s", logs)
	}

	_, err := probeUnder(t, h, testSpec("test", 1, nil))
	pe := pluginError(t, err)
	if pe.Code != codes.FailedPrecondition || pe.Plugin != "plain" ||
		!strings.Contains(err.Error(), `plugin "plain" (kind "test"): the plugin does not announce probeplugin v1.1 (it does not enforce the egress policy): in cluster mode its probes run only when its configuration sets trustEgress: true`) {
		t.Fatalf("plain plugin under a policy: %v", err)
	}
	if out, err := probeOnce(t, h, testSpec("test", 1, nil)); err != nil || out.Result != runtime.Success || out.Details["egress"] != "" {
		t.Fatalf("plain plugin without a policy: %+v, %v", out, err)
	}

	const carried = "pod_ips=[10.1.2.3] allowed=[192.168.0.0/16]"
	out, err := probeUnder(t, h, testSpec("trusted", 1, nil))
	if err != nil || out.Result != runtime.Success || out.Details["egress"] != carried {
		t.Fatalf("trusted plugin: %+v, %v", out, err)
	}
	out, err = probeUnder(t, h, testSpec("enforcing", 1, nil))
	if err != nil || out.Result != runtime.Success || out.Details["egress"] != carried {
		t.Fatalf("enforcing plugin: %+v, %v", out, err)
	}

	// The enforcing plugin's dial to an address the policy does not allow
	// (127.0.0.1, a listener of the test) is refused before it connects.
	target := standin.HTTP(t, "127.0.0.1:0", "ok")
	addr := target.Addr()
	out, err = probeUnder(t, h, testSpec("enforcing", 1, map[string]string{"mode": "dial", "addr": addr}))
	if err != nil || out.Result != runtime.Failure || out.Output != "dial tcp "+addr+": "+egress.DeniedText {
		t.Fatalf("denied dial in the plugin: %+v, %v", out, err)
	}
	target.NoConnection(t)
	// Without a policy the same dial connects.
	if out, err := probeOnce(t, h, testSpec("enforcing", 1, map[string]string{"mode": "dial", "addr": addr})); err != nil || out.Result != runtime.Success {
		t.Fatalf("dial without a policy: %+v, %v", out, err)
	}
}
