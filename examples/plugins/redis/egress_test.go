package main

import (
	"strings"
	"testing"
	"time"

	"github.com/probed/probed/examples/plugins/internal/redistest"
	"github.com/probed/probed/internal/standin"
	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/egress"
)

// probeUnder is probe under the egress policy of a pod whose IP is podIP
// (cluster mode).
func probeUnder(t *testing.T, port int, params map[string]string, podIP string) runtime.Outcome {
	t.Helper()
	return probeIn(t, standin.PodContext(t, time.Second, podIP), port, params)
}

// TestEgress: under the agent's egress policy the plugin connects only
// where it allows, TLS included (its own dialer), and withholds the
// server's error replies; the pod's own server still answers PONG.
func TestEgress(t *testing.T) {
	t.Parallel()
	s := standin.Banner(t, "127.0.0.1:0", "+PONG\r\n")
	for _, params := range []map[string]string{nil, {"tls": "true"}} {
		out := probeUnder(t, s.Port(), params, "10.9.9.9")
		if out.Result != runtime.Failure || !strings.Contains(out.Output, egress.DeniedText) {
			t.Errorf("%v: %v %q, want refused by the egress policy", params, out.Result, out.Output)
		}
	}
	s.NoConnection(t)

	plain := redistest.Start(t, redistest.Options{})
	tlsSrv := redistest.Start(t, redistest.Options{TLS: true})
	if out := probeUnder(t, plain.Port, nil, "127.0.0.1"); out.Result != runtime.Success {
		t.Errorf("own server: %+v", out)
	}
	if out := probeUnder(t, tlsSrv.Port, map[string]string{"tls": "true"}, "127.0.0.1"); out.Result != runtime.Success {
		t.Errorf("own TLS server: %+v", out)
	}
	auth := redistest.Start(t, redistest.Options{Password: "s3cret-pw"})
	if out := probeUnder(t, auth.Port, nil, "127.0.0.1"); out.Result != runtime.Failure || strings.Contains(out.Output, "NOAUTH") || !strings.Contains(out.Output, egress.WithheldText) {
		t.Errorf("the server's error reply under a policy: %q", out.Output)
	}
}
