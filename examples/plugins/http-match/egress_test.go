package main

import (
	"strings"
	"testing"
	"time"

	"github.com/probed/probed/internal/standin"
	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/egress"
)

// TestEgress: under the agent's egress policy the plugin connects only
// where it allows (a target that is not the pod's IP is refused before
// connecting) and its outputs withhold what the target sent (a JSON
// field's value, an SSH banner).
func TestEgress(t *testing.T) {
	port := server(t)
	pr, err := Handler{}.Prepare(spec(port, map[string]string{"path": "/status", "json": "status.phase=Pending"}))
	if err != nil {
		t.Fatal(err)
	}
	out, err := pr.Probe(standin.PodContext(t, time.Second, "127.0.0.1"), runtime.Target{PodIP: "127.0.0.1"})
	if err != nil || out.Output != `json: field status.phase is `+egress.WithheldText+`, want "Pending"` {
		t.Errorf("json mismatch under a policy: %q, %v", out.Output, err)
	}

	s := standin.HTTP(t, "127.0.0.1:0", "ok")
	pr, err = Handler{}.Prepare(spec(s.Port(), map[string]string{"path": "/"}))
	if err != nil {
		t.Fatal(err)
	}
	out, err = pr.Probe(standin.PodContext(t, time.Second, "10.9.9.9"), runtime.Target{PodIP: "127.0.0.1"})
	if err != nil || out.Result != runtime.Failure || !strings.HasSuffix(out.Output, "dial tcp "+s.Addr()+": "+egress.DeniedText) {
		t.Fatalf("a target the policy does not allow: %v %q, %v", out.Result, out.Output, err)
	}
	s.NoConnection(t)

	banner := standin.Banner(t, "127.0.0.1:0", "SSH-2.0-OpenSSH_9.2p1\r\n")
	pr, err = Handler{}.Prepare(spec(banner.Port(), map[string]string{"path": "/"}))
	if err != nil {
		t.Fatal(err)
	}
	out, err = pr.Probe(standin.PodContext(t, time.Second, "127.0.0.1"), runtime.Target{PodIP: "127.0.0.1"})
	if err != nil || out.Result != runtime.Failure || strings.Contains(out.Output, "SSH-2.0") || !strings.Contains(out.Output, egress.WithheldText) {
		t.Fatalf("banner under a policy: %v %q, %v", out.Result, out.Output, err)
	}
}
