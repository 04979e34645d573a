package builtin_test

import (
	"context"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/probed/probed/internal/standin"
	"github.com/probed/probed/runtime"
	"github.com/probed/probed/runtime/egress"
)

// TestOutOfProcessEgress: in cluster mode (a runtime with an egress rule)
// the built-in kinds served by `probed plugin serve` enforce the policy as
// in process: a host that is not the pod's is refused before connecting
// (the stand-in on 127.0.0.2 sees nothing), and a banner the target sends
// is withheld from the text — with the same outputs in and out of process.
func TestOutOfProcessEgress(t *testing.T) {
	inProc, outOfProc := runtimesWith(t, egress.NewRule(nil))

	standIn := standin.HTTP(t, "127.0.0.2:0", "metadata")
	standInPort := int32(standIn.Port())
	banner := standin.Banner(t, "127.0.0.1:0", "SSH-2.0-OpenSSH_9.2p1\r\n")

	cases := []struct {
		name  string
		probe *v1.Probe
		want  string
	}{
		{"http host", &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Host: "127.0.0.2", Path: "/computeMetadata/v1/", Port: intstr.FromInt32(standInPort)}}}, egress.DeniedText},
		{"tcp host", &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Host: "127.0.0.2", Port: intstr.FromInt32(standInPort)}}}, egress.DeniedText},
		{"http banner", httpGet(banner.Port(), "/"), egress.WithheldText},
	}
	target := runtime.Target{PodIP: "127.0.0.1", PodIPs: []v1.PodIP{{IP: "127.0.0.1"}}, ContainerID: "containerd://abc"}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := inProc.Run(context.Background(), inProc.Prepare(spec(c.probe.DeepCopy())), target)
			got := outOfProc.Run(context.Background(), outOfProc.Prepare(spec(c.probe.DeepCopy())), target)
			if got.Err != nil || want.Err != nil || got.Outcome.Result != runtime.Failure || got.Outcome.Output != want.Outcome.Output {
				t.Fatalf("in process: %+v, %v\nout of process: %+v, %v", want.Outcome, want.Err, got.Outcome, got.Err)
			}
			if !strings.Contains(got.Outcome.Output, c.want) || strings.Contains(got.Outcome.Output, "SSH-2.0") {
				t.Fatalf("output %q, want %q and no banner", got.Outcome.Output, c.want)
			}
		})
	}
	standIn.NoConnection(t)
}
