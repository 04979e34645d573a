package manager

import (
	"context"
	"reflect"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/probed/probed/manager/customprobe"
	"github.com/probed/probed/manager/podprobes"
	"github.com/probed/probed/runtime"
)

// offloadedPod is a pod whose container's readiness probe the offload
// webhook moved into its probed.io/offloaded record: an exec probe,
// failureThreshold 2, period 3 s.
func offloadedPod() *v1.Pod {
	p := testPod(v1.Container{Name: testContainerName})
	p.Annotations = map[string]string{customprobe.OffloadedAnnotation: `[{"container":"` + testContainerName +
		`","type":"readiness","probe":{"exec":{"command":["true"]},"periodSeconds":3,"failureThreshold":2}}]`}
	return p
}

// An offloaded probe is a spec probe in meaning: under cluster mode's
// policy it gets a worker of origin offloaded with the kubelet's
// thresholds and the kubelet's K4 Event texts (one Unhealthy per failed
// run, no threshold counts: ProbeEvents gives those to the annotation's
// probes only), while the node's budget (Options.Admit)
// counts it as it counts the annotation's probes.
func TestOffloadedProbeIsASpecProbeInMeaning(t *testing.T) {
	e, log := execEnv(t, EventsAll)
	e.status.set(testPodUID, runningStatus(fakeNow, true))
	pod := offloadedPod()
	AddPodProbes(context.Background(), e.m, pod, podprobes.Of(pod, podprobes.Cluster(customprobe.Options{}, "")))
	w := e.worker(testPodUID, testContainerName, runtime.Readiness)
	if w.rs.Origin != runtime.OriginOffloaded || w.rs.Extension != nil {
		t.Fatalf("worker spec: origin %v, extension %v", w.rs.Origin, w.rs.Extension)
	}
	sequence(e, w, runtime.Success, runtime.Failure, runtime.Failure, runtime.Success)
	wantLines(t, filter(log.Lines(), "Unhealthy"),
		"Warning Unhealthy Readiness probe failed: fake",
		"Warning Unhealthy Readiness probe failed: fake",
	)

	var asked []time.Duration
	admit := newTestEnv(t, func(o *Options) {
		o.Probes = podprobes.Cluster(customprobe.Options{}, "")
		o.Admit = func(_ *v1.Pod, periods []time.Duration) bool { asked = periods; return false }
	})
	admit.m.AddPod(context.Background(), offloadedPod())
	if want := []time.Duration{3 * time.Second}; !reflect.DeepEqual(asked, want) {
		t.Fatalf("Admit asked with %v, want %v", asked, want)
	}
	admit.expectWorkers()
}
