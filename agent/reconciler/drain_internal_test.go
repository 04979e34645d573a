package reconciler

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/probed/probed/agent/pods"
	"github.com/probed/probed/manager/customprobe"
	"github.com/probed/probed/manager/podprobes"
)

// The shutdown wait (issue #5 item 5: in-flight probes finish up to their
// timeout) covers the longest timeoutSeconds of every probe the agent runs
// (the pods' views): spec probes of containers and init containers, and the
// custom probes of the probed.io/probes annotation, which a plugin may serve
// for seconds.
func TestDrainBoundCoversEveryProbe(t *testing.T) {
	probe := func(timeout int32) *v1.Probe {
		return &v1.Probe{TimeoutSeconds: timeout, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3}
	}
	pod := func(uid string, annotation string, containers, inits []v1.Container) *pods.Pod {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: uid, Namespace: "ns", UID: types.UID(uid)},
			Spec: v1.PodSpec{Containers: containers, InitContainers: inits}}
		if annotation != "" {
			p.Annotations = map[string]string{customprobe.Annotation: annotation}
		}
		return &pods.Pod{Pod: p, Probes: podprobes.Of(p, podprobes.Policy{})}
	}
	always := v1.ContainerRestartPolicyAlways
	cases := []struct {
		name string
		pods []*pods.Pod
		want time.Duration
	}{
		{"no pods", nil, 2 * time.Second},
		{"container probes", []*pods.Pod{
			pod("a", "", []v1.Container{{Name: "c", LivenessProbe: probe(3), ReadinessProbe: probe(5)}}, nil),
		}, 6 * time.Second},
		{"a sidecar's startup probe", []*pods.Pod{
			pod("a", "", []v1.Container{{Name: "c", ReadinessProbe: probe(1)}},
				[]v1.Container{{Name: "s", RestartPolicy: &always, StartupProbe: probe(7)}}),
		}, 8 * time.Second},
		{"a custom probe only", []*pods.Pod{
			pod("a", `[{"container":"c","type":"readiness","timeoutSeconds":10,"plugin":{"name":"redis","port":6379}}]`,
				[]v1.Container{{Name: "c"}}, nil),
		}, 11 * time.Second},
		{"a custom probe without timeoutSeconds takes the default 1 s", []*pods.Pod{
			pod("a", `[{"container":"c","type":"liveness","plugin":{"name":"redis","port":6379}}]`,
				[]v1.Container{{Name: "c"}}, nil),
			pod("b", "", []v1.Container{{Name: "c", LivenessProbe: probe(4)}}, nil),
		}, 5 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := New(Options{})
			for _, p := range tc.pods {
				r.current[p.Pod.UID] = p
			}
			if got := r.DrainBound(); got != tc.want {
				t.Fatalf("DrainBound = %v, want %v", got, tc.want)
			}
		})
	}
}
