package manager

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/probed/probed/manager/customprobe"
	"github.com/probed/probed/runtime"
)

// Options.Admit (cluster mode's node budget): AddPod asks it,
// with the periods of the pod's valid annotation probes, before it starts
// their workers; refused, none start and the spec's probes are untouched;
// a later AddPod that it allows starts them.
func TestAdmitGatesTheAnnotationProbes(t *testing.T) {
	var mu sync.Mutex
	allow := false
	var asked [][]time.Duration
	e := newTestEnv(t, func(o *Options) {
		o.Admit = func(pod *v1.Pod, periods []time.Duration) bool {
			mu.Lock()
			defer mu.Unlock()
			asked = append(asked, periods)
			return allow
		}
	})
	p := testPod(probeOf(runtime.Liveness, execProbe()))
	p.Annotations = map[string]string{customprobe.Annotation: fmt.Sprintf(`[
		{"container":%q,"type":"readiness","periodSeconds":2,"exec":{"command":["true"]}},
		{"container":%q,"type":"startup","periodSeconds":1,"periodMilliseconds":-500,"exec":{"command":["true"]}}]`, testContainerName, testContainerName)}
	e.m.AddPod(context.Background(), p)
	e.expectWorkers(probeKey{testPodUID, testContainerName, runtime.Liveness})

	mu.Lock()
	allow = true
	mu.Unlock()
	e.m.AddPod(context.Background(), p)
	e.expectWorkers(probeKey{testPodUID, testContainerName, runtime.Liveness},
		probeKey{testPodUID, testContainerName, runtime.Readiness}, probeKey{testPodUID, testContainerName, runtime.Startup})
	mu.Lock()
	defer mu.Unlock()
	want := []time.Duration{2 * time.Second, 500 * time.Millisecond}
	if len(asked) != 2 || !reflect.DeepEqual(asked[0], want) || !reflect.DeepEqual(asked[1], want) {
		t.Fatalf("Admit asked with %v, want twice %v", asked, want)
	}
}

// A probe with periods by state may run at the shortest of
// them for as long as it stays in that state: Admit (the node's budget of
// runs per second) is asked with that one.
func TestAdmitCountsTheShortestPeriodByState(t *testing.T) {
	var asked []time.Duration
	e := newTestEnv(t, func(o *Options) {
		o.Admit = func(_ *v1.Pod, periods []time.Duration) bool { asked = periods; return true }
	})
	p := testPod(v1.Container{Name: testContainerName})
	p.Annotations = map[string]string{customprobe.Annotation: fmt.Sprintf(`[
		{"container":%q,"type":"readiness","periodSeconds":10,"unhealthyPeriodMilliseconds":250,"exec":{"command":["true"]}},
		{"container":%q,"type":"liveness","periodSeconds":10,"transitionPeriodSeconds":2,"unhealthyPeriodSeconds":5,"exec":{"command":["true"]}}]`,
		testContainerName, testContainerName)}
	e.m.AddPod(context.Background(), p)
	if want := []time.Duration{250 * time.Millisecond, 2 * time.Second}; !reflect.DeepEqual(asked, want) {
		t.Fatalf("Admit asked with %v, want %v", asked, want)
	}
}
