package podsource

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/probed/probed/agent/pods"
	"github.com/probed/probed/agent/reconciler"
	"github.com/probed/probed/manager"
	"github.com/probed/probed/manager/podprobes"
	"github.com/probed/probed/manager/results"
	"github.com/probed/probed/runtime"
)

// overlayRig is the cluster-mode chain without the API server: a real
// manager (on a fake clock, so no worker runs by itself) whose
// StatusProvider is the Statuses, and the real reconciler feeding both.
type overlayRig struct {
	statuses *Statuses
	mgr      manager.Manager
	rec      *reconciler.Reconciler
	startup  results.Manager
}

// clusterPolicy is cluster mode's rule of a pod's probes: the kubelet runs
// the spec's, probed the annotation's.
var clusterPolicy = podprobes.Policy{Transforms: []podprobes.Transform{podprobes.LeaveSpecToKubelet}}

func newOverlayRig(t *testing.T) *overlayRig {
	t.Helper()
	clock := clocktesting.NewFakeClock(time.Now())
	r := &overlayRig{statuses: NewStatuses(), startup: results.NewManager()}
	m, err := manager.New(manager.Options{Status: r.statuses, Startup: r.startup, Clock: clock, Probes: clusterPolicy, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = m.Close(ctx)
	})
	r.mgr = m
	r.statuses.SetProber(m)
	r.rec = reconciler.New(reconciler.Options{Manager: m, Listener: r.statuses, Clock: clock, Probes: clusterPolicy, Logger: discard()})
	return r
}

// succeed records a startup Success for the container ID as the startup
// worker would and hands the results manager's update to the Statuses, as
// the verdicts Fanout does.
func (r *overlayRig) succeed(t *testing.T, pod *v1.Pod, containerID string) {
	t.Helper()
	r.startup.Set(results.ParseContainerID(containerID), results.Success, pod)
	select {
	case u := <-r.startup.Updates():
		r.statuses.ProbeResult(runtime.Startup, u)
	default:
		t.Fatal("no startup update")
	}
}

func startedOf(t *testing.T, s *Statuses, pod *v1.Pod, container string) (started, ready bool) {
	t.Helper()
	st, ok := s.GetPodStatus(pod.UID)
	if !ok {
		t.Fatalf("no status for pod %s", pod.UID)
	}
	for _, cs := range st.ContainerStatuses {
		if cs.Name == container {
			if cs.Started == nil {
				t.Fatalf("container %s: Started nil (M7a: always set)", container)
			}
			return *cs.Started, cs.Ready
		}
	}
	t.Fatalf("no status for container %s", container)
	return false, false
}

// TestOverlayStartedWaitsForAnnotationStartupProbe: the kubelet says
// started=true (it has no startup probe of its own), but the annotation's
// startup probe has no result yet: Started is false (M8 decides on a status
// whose Started was cleared), true after its Success, and false again for
// the next container instance (W6: a new container ID has no result).
func TestOverlayStartedWaitsForAnnotationStartupProbe(t *testing.T) {
	r := newOverlayRig(t)
	pod := runningPod() // annotation: startup probe on "app", kubelet: started=true, ready=true
	pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: "plain", Image: "x"})
	pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, v1.ContainerStatus{
		Name: "plain", ContainerID: "containerd://ppp", Started: ptr(false),
		State: pod.Status.ContainerStatuses[0].State,
	})
	r.rec.Apply(UpdateFor(pod))

	if started, ready := startedOf(t, r.statuses, pod, "app"); started || ready {
		t.Fatalf("app: started=%v ready=%v before the annotation startup probe succeeded, want false/false", started, ready)
	}
	if p, ok := r.statuses.KubeletPod(pod.UID); !ok || !*p.Status.ContainerStatuses[0].Started || !p.Status.ContainerStatuses[0].Ready {
		t.Fatal("KubeletPod: want the kubelet's own started and ready, without the overlay")
	}
	// No annotation startup probe: the kubelet's started decides.
	if started, _ := startedOf(t, r.statuses, pod, "plain"); started {
		t.Fatal("plain: started although the kubelet says not started")
	}

	r.succeed(t, pod, "containerd://aaa")
	started, ready := startedOf(t, r.statuses, pod, "app")
	if !started {
		t.Fatal("app: not started after the startup probe's Success")
	}
	// No annotation readiness probe: probed's readiness verdict is ready (M7c).
	if !ready {
		t.Fatal("app: not ready although started and without a readiness probe")
	}
	if p, ok := r.statuses.PodByName("ns", "web"); !ok || !*p.Status.ContainerStatuses[0].Started || p.Spec.NodeName != "node-a" {
		t.Fatalf("PodByName: %v %+v", ok, p)
	}

	// The kubelet says plain started: now it is.
	next := runningPod()
	next.Spec = pod.Spec
	next.Status.ContainerStatuses = append(next.Status.ContainerStatuses, v1.ContainerStatus{
		Name: "plain", ContainerID: "containerd://ppp", Started: ptr(true), State: pod.Status.ContainerStatuses[0].State,
	})
	r.rec.Apply(UpdateFor(next))
	if started, _ := startedOf(t, r.statuses, next, "plain"); !started {
		t.Fatal("plain: not started although the kubelet says started and probed has no startup probe")
	}
	if started, _ := startedOf(t, r.statuses, next, "app"); !started {
		t.Fatal("app: a status change of another container lost app's startup verdict")
	}

	// The kubelet restarted app: a new container ID, started=true again.
	restarted := next.DeepCopy()
	restarted.Status.ContainerStatuses[0].ContainerID = "containerd://bbb"
	restarted.Status.ContainerStatuses[0].RestartCount = 1
	r.rec.Apply(UpdateFor(restarted))
	st, _ := r.statuses.GetPodStatus(pod.UID)
	if st.ContainerStatuses[0].ContainerID != "containerd://bbb" || st.ContainerStatuses[0].RestartCount != 1 {
		t.Fatalf("the kubelet's new container ID did not reach GetPodStatus: %+v", st.ContainerStatuses[0])
	}
	if started, _ := startedOf(t, r.statuses, restarted, "app"); started {
		t.Fatal("app: new container instance started before its own startup probe succeeded (W6)")
	}

	// Removed: forgotten.
	r.rec.Apply(pods.Update{Op: pods.Remove, Pods: []*pods.Pod{podOf(restarted)}})
	if _, ok := r.statuses.GetPodStatus(pod.UID); ok {
		t.Fatal("status of a removed pod")
	}
	if _, ok := r.statuses.PodByName("ns", "web"); ok || r.statuses.Len() != 0 || len(r.statuses.Pods()) != 0 {
		t.Fatal("removed pod still listed")
	}
}

// TestOverlayWithoutProberIsTheKubeletsStatus: before SetProber, and for
// the conditions always, the status is the kubelet's.
func TestOverlayWithoutProberIsTheKubeletsStatus(t *testing.T) {
	s := NewStatuses()
	pod := runningPod()
	s.PodAdded(podOf(pod))
	st, ok := s.GetPodStatus(pod.UID)
	if !ok || !*st.ContainerStatuses[0].Started || !st.ContainerStatuses[0].Ready || st.Conditions[0].Status != v1.ConditionTrue {
		t.Fatalf("status without a prober: %+v", st)
	}
	// The cached object is not changed by the overlay.
	st.ContainerStatuses[0].Started = ptr(false)
	if !*pod.Status.ContainerStatuses[0].Started {
		t.Fatal("GetPodStatus returned the cache's own status")
	}
}

// ContainerPod finds a pod by the ID of any of its containers (regular,
// init, ephemeral), with the container's name.
func TestContainerPod(t *testing.T) {
	s := NewStatuses()
	pod := &v1.Pod{}
	pod.Namespace, pod.Name, pod.UID = "ns", "web", "uid-1"
	pod.Status.ContainerStatuses = []v1.ContainerStatus{{Name: "app", ContainerID: "containerd://a"}}
	pod.Status.InitContainerStatuses = []v1.ContainerStatus{{Name: "init", ContainerID: "containerd://i"}}
	pod.Status.EphemeralContainerStatuses = []v1.ContainerStatus{{Name: "debug", ContainerID: "containerd://e"}}
	s.PodAdded(&pods.Pod{Pod: pod})
	for id, want := range map[string]string{"containerd://a": "app", "containerd://i": "init", "containerd://e": "debug"} {
		p, name, ok := s.ContainerPod(id)
		if !ok || name != want || p.Name != "web" || p == pod {
			t.Errorf("%s: %v %q %v, want a copy of web and %q", id, p, name, ok, want)
		}
	}
	if _, _, ok := s.ContainerPod("containerd://x"); ok {
		t.Error("an unknown container ID found a pod")
	}
}
