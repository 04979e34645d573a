package podsource

import (
	"io"
	"log/slog"
	"testing"

	"go.uber.org/goleak"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/probed/probed/agent/health"
	"github.com/probed/probed/agent/pods"
	"github.com/probed/probed/manager/customprobe"
)

// IgnoreCurrent: ants starts its package-level default pool at init.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, goleak.IgnoreCurrent()) }

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func ptr[T any](v T) *T { return &v }

// runningPod is a pod as the API server returns it once the kubelet reported
// its one container running.
func runningPod() *v1.Pod {
	now := metav1.Now()
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: "web", UID: "uid-1", ResourceVersion: "10",
			Labels:          map[string]string{"app": "web"},
			Annotations:     map[string]string{customprobe.Annotation: `[{"container":"app","type":"startup","plugin":{"name":"never-served"}}]`},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", UID: "rs-1", Controller: ptr(true)}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status"}},
		},
		Spec: v1.PodSpec{
			NodeName:       "node-a",
			Containers:     []v1.Container{{Name: "app", Image: "registry.invalid/app:1"}},
			ReadinessGates: []v1.PodReadinessGate{{ConditionType: "probed.io/ready"}},
		},
		Status: v1.PodStatus{
			Phase: v1.PodRunning, PodIP: "10.0.0.7", PodIPs: []v1.PodIP{{IP: "10.0.0.7"}},
			Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}},
			ContainerStatuses: []v1.ContainerStatus{{
				Name: "app", ContainerID: "containerd://aaa", Started: ptr(true), Ready: true,
				State:              v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: now}},
				VolumeMounts:       []v1.VolumeMountStatus{{Name: "kube-api-access", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"}},
				Resources:          &v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m")}},
				AllocatedResources: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m")},
				User:               &v1.ContainerUser{Linux: &v1.LinuxContainerUser{UID: 1000, GID: 1000}},
			}},
		},
	}
}

func TestSpecHashCountsSpecAnnotationsAndDeletion(t *testing.T) {
	base := runningPod()
	h := SpecHash(base)
	if h != SpecHash(runningPod()) {
		t.Fatal("SpecHash differs for equal pods")
	}
	changes := map[string]func(p *v1.Pod){
		"spec container image": func(p *v1.Pod) { p.Spec.Containers[0].Image = "registry.invalid/app:2" },
		"probed.io/probes annotation (a changed annotation replaces the probes)": func(p *v1.Pod) {
			p.Annotations[customprobe.Annotation] = `[{"container":"app","type":"readiness","plugin":{"name":"x"}}]`
		},
		"annotation removed": func(p *v1.Pod) { delete(p.Annotations, customprobe.Annotation) },
		"probed.io/offloaded record (the offload webhook's: a changed record is read again)": func(p *v1.Pod) {
			p.Annotations[customprobe.OffloadedAnnotation] = `[{"container":"app","type":"readiness","probe":{"tcpSocket":{"port":80}}}]`
		},
		"deletion requested (W5.7: new liveness/startup workers take the shortcut)": func(p *v1.Pod) {
			p.DeletionTimestamp = ptr(metav1.Now())
		},
	}
	for name, change := range changes {
		p := runningPod()
		change(p)
		if SpecHash(p) == h {
			t.Errorf("%s: SpecHash unchanged", name)
		}
	}
	same := map[string]func(p *v1.Pod){
		"status":           func(p *v1.Pod) { p.Status.ContainerStatuses[0].ContainerID = "containerd://bbb" },
		"labels":           func(p *v1.Pod) { p.Labels["version"] = "2" },
		"other annotation": func(p *v1.Pod) { p.Annotations["example.com/x"] = "y" },
		"resourceVersion":  func(p *v1.Pod) { p.ResourceVersion = "11" },
	}
	for name, change := range same {
		p := runningPod()
		change(p)
		if SpecHash(p) != h {
			t.Errorf("%s: SpecHash changed; only spec, the probes annotation and offload record and deletion count", name)
		}
	}
}

func TestStatusHashCountsWhatProbedReads(t *testing.T) {
	h := StatusHash(runningPod())
	changes := map[string]func(s *v1.PodStatus){
		"new container ID (W6)": func(s *v1.PodStatus) { s.ContainerStatuses[0].ContainerID = "containerd://bbb" },
		"started":               func(s *v1.PodStatus) { s.ContainerStatuses[0].Started = ptr(false) },
		"restart count":         func(s *v1.PodStatus) { s.ContainerStatuses[0].RestartCount = 1 },
		"state": func(s *v1.PodStatus) {
			s.ContainerStatuses[0].State = v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
		},
		"startedAt (W5.8)":     func(s *v1.PodStatus) { s.ContainerStatuses[0].State.Running.StartedAt = metav1.Unix(1, 0) },
		"pod IP":               func(s *v1.PodStatus) { s.PodIP = "10.0.0.8" },
		"phase":                func(s *v1.PodStatus) { s.Phase = v1.PodPending },
		"Ready condition (M9)": func(s *v1.PodStatus) { s.Conditions[0].Status = v1.ConditionFalse },
		"gate condition added": func(s *v1.PodStatus) {
			s.Conditions = append(s.Conditions, v1.PodCondition{Type: "probed.io/ready", Status: v1.ConditionTrue})
		},
		"init container started": func(s *v1.PodStatus) {
			s.InitContainerStatuses = []v1.ContainerStatus{{Name: "sidecar", Started: ptr(true)}}
		},
	}
	for name, change := range changes {
		p := runningPod()
		change(&p.Status)
		if StatusHash(p) == h {
			t.Errorf("%s: StatusHash unchanged", name)
		}
	}
	same := map[string]func(p *v1.Pod){
		"resourceVersion (probed's own unchanged writes, metadata)": func(p *v1.Pod) { p.ResourceVersion = "99" },
		"condition timestamps": func(p *v1.Pod) { p.Status.Conditions[0].LastProbeTime = metav1.Unix(5, 0) },
		"container resources":  func(p *v1.Pod) { p.Status.ContainerStatuses[0].AllocatedResources = nil },
		"volume mounts":        func(p *v1.Pod) { p.Status.ContainerStatuses[0].VolumeMounts = nil },
		"QoS class":            func(p *v1.Pod) { p.Status.QOSClass = v1.PodQOSBurstable },
		"spec":                 func(p *v1.Pod) { p.Spec.Containers[0].Image = "x" },
	}
	for name, change := range same {
		p := runningPod()
		change(p)
		if StatusHash(p) != h {
			t.Errorf("%s: StatusHash changed", name)
		}
	}
}

func TestEventsMapToUpdates(t *testing.T) {
	s, err := New(Options{Client: nil, NodeName: "node-a"})
	if err == nil || s != nil {
		t.Fatal("New without a client: want an error")
	}
	s = &Source{opts: Options{NodeName: "node-a"}, log: discard()}

	running := runningPod()
	u, ok := s.updateFor(running)
	if !ok || u.Op != pods.Upsert || len(u.Pods) != 1 || u.Pods[0].Pod != running {
		t.Fatalf("add of a running pod: %v %+v, want one Upsert of the cached object", ok, u)
	}
	if p := u.Pods[0]; p.Origin != Origin || p.SpecHash != SpecHash(running) || p.StatusHash != StatusHash(running) {
		t.Fatalf("pods.Pod = %+v", p)
	}

	for _, phase := range []v1.PodPhase{v1.PodSucceeded, v1.PodFailed} {
		done := runningPod()
		done.Status.Phase = phase
		if u, ok := s.updateFor(done); !ok || u.Op != pods.Remove || u.Pods[0].Pod != done {
			t.Errorf("pod in phase %s: %+v, want Remove (its workers would end, W5.2)", phase, u)
		}
	}
	for _, phase := range []v1.PodPhase{v1.PodPending, v1.PodRunning, v1.PodUnknown, ""} {
		p := runningPod()
		p.Status.Phase = phase
		if u, _ := s.updateFor(p); u.Op != pods.Upsert {
			t.Errorf("pod in phase %q: %v, want Upsert", phase, u.Op)
		}
	}
	deleting := runningPod()
	deleting.DeletionTimestamp = ptr(metav1.Now())
	if u, _ := s.updateFor(deleting); u.Op != pods.Upsert || u.Pods[0].SpecHash == SpecHash(running) {
		t.Errorf("deleting pod: %v, want Upsert with a new SpecHash (readiness keeps probing until it is gone)", u.Op)
	}

	if u, ok := s.removalFor(running); !ok || u.Op != pods.Remove || u.Pods[0].Pod != running {
		t.Errorf("delete: %+v, want Remove", u)
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "ns/web", Obj: running}
	if u, ok := s.removalFor(tomb); !ok || u.Op != pods.Remove || u.Pods[0].Pod.UID != "uid-1" {
		t.Errorf("tombstone: %+v, want Remove of its pod", u)
	}
	if _, ok := s.removalFor(cache.DeletedFinalStateUnknown{Key: "ns/x", Obj: "not a pod"}); ok {
		t.Error("tombstone of a non-pod: want no update")
	}
	if _, ok := s.updateFor(&v1.Node{}); ok {
		t.Error("non-pod: want no update")
	}
}

func TestNewRequiresNodeName(t *testing.T) {
	_, err := New(Options{Client: unusedClient(t), NodeName: ""})
	if err == nil {
		t.Fatal("New without a node name: want an error")
	}
	t.Log(err)
}

func TestTransformDropsWhatProbedNeverReads(t *testing.T) {
	p := runningPod()
	p.Annotations[LastAppliedAnnotation] = `{"apiVersion":"v1","kind":"Pod"}`
	obj, err := Transform(p)
	if err != nil || obj != p {
		t.Fatalf("Transform = %v, %v; want the same pod", obj, err)
	}
	if p.ManagedFields != nil {
		t.Error("managedFields kept")
	}
	if _, ok := p.Annotations[LastAppliedAnnotation]; ok {
		t.Error("last-applied-configuration kept")
	}
	cs := p.Status.ContainerStatuses[0]
	if cs.VolumeMounts != nil || cs.Resources != nil || cs.AllocatedResources != nil || cs.User != nil {
		t.Errorf("container status kept dropped fields: %+v", cs)
	}
	// Kept: what probed reads.
	want := runningPod()
	want.ManagedFields = nil
	if p.Annotations[customprobe.Annotation] != want.Annotations[customprobe.Annotation] ||
		len(p.OwnerReferences) != 1 || p.Labels["app"] != "web" || len(p.Spec.ReadinessGates) != 1 ||
		cs.ContainerID != "containerd://aaa" || cs.State.Running == nil || !*cs.Started || p.Status.PodIP != "10.0.0.7" ||
		p.UID != "uid-1" || p.ResourceVersion != "10" {
		t.Errorf("Transform dropped a field probed reads: %+v", p)
	}
	if SpecHash(p) != SpecHash(want) || StatusHash(p) != StatusHash(want) {
		t.Error("Transform changed the hashes: it must drop only what probed never reads")
	}
	// Idempotent, and other objects pass.
	again, _ := Transform(p)
	if StatusHash(again.(*v1.Pod)) != StatusHash(want) {
		t.Error("Transform not idempotent")
	}
	if obj, _ := Transform("x"); obj != "x" {
		t.Error("non-pod changed")
	}
}

// TestHealthzUnhealthyUntilSynced: /healthz (agent/health over the
// source's HasSynced) is unhealthy while the informer has never synced
// (issue 10 §2.7).
func TestHealthzUnhealthyUntilSynced(t *testing.T) {
	s, err := New(Options{Client: unusedClient(t), NodeName: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	healthz := health.New(s.HasSynced, nil)
	if s.HasSynced() || healthz.Check() == nil {
		t.Fatal("a source that never ran is synced/healthy")
	}
	synced := false
	f := func() bool { return synced }
	s.synced.Store(&f)
	if healthz.Check() == nil {
		t.Fatal("healthy before the initial list")
	}
	synced = true
	if err := healthz.Check(); err != nil {
		t.Fatalf("unhealthy after sync: %v", err)
	}
}

// unusedClient is a real clientset for a server that is never contacted:
// the tests using it check what happens before any request.
func unusedClient(t *testing.T) kubernetes.Interface {
	c, err := kubernetes.NewForConfig(&rest.Config{Host: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
