package podsource

import (
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"testing"

	"go.uber.org/goleak"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/probed/probed/agent/health"
	"github.com/probed/probed/agent/kube/evict"
	"github.com/probed/probed/agent/pods"
	"github.com/probed/probed/manager/customprobe"
	"github.com/probed/probed/runtime/tenant"
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

// lastApplied is kubectl's copy of the applied object (`kubectl apply`).
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// hostilePod is runningPod as a hostile tenant writes it (the review's
// case): 1 MB of env, a 250 KB annotation, thousands of labels, ports and
// readiness gates, a long image, command and volumes, spec probes with
// large handlers.
func hostilePod() *v1.Pod {
	p := runningPod()
	big := strings.Repeat("x", 250<<10)
	p.Annotations["tenant.example.com/blob"] = big
	p.Annotations[lastApplied] = `{"apiVersion":"v1","kind":"Pod"}`
	p.Annotations[evict.ConfigSourceAnnotation] = "api"
	for i := range 2000 {
		p.Labels[fmt.Sprintf("l%d", i)] = "v"
		p.Spec.ReadinessGates = append(p.Spec.ReadinessGates, v1.PodReadinessGate{ConditionType: v1.PodConditionType(fmt.Sprintf("example.com/g%d", i))})
	}
	p.OwnerReferences = append(p.OwnerReferences, metav1.OwnerReference{Kind: "Other", Name: big[:1000]}, metav1.OwnerReference{Kind: "DaemonSet", Name: "ds"})
	c := &p.Spec.Containers[0]
	for i := range 1000 {
		c.Env = append(c.Env, v1.EnvVar{Name: fmt.Sprintf("E%d", i), Value: strings.Repeat("v", 1000)})
		c.Ports = append(c.Ports, v1.ContainerPort{ContainerPort: int32(1000 + i)})
	}
	c.Env = append(c.Env, v1.EnvVar{Name: "TOKEN", Value: "s3cret-t0ken"}, v1.EnvVar{Name: "FROM", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}})
	c.Ports = append(c.Ports, v1.ContainerPort{Name: "http", ContainerPort: 8080})
	c.Image, c.Command, c.Args = big, []string{big}, []string{big}
	c.ReadinessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{big}}}, PeriodSeconds: 7}
	c.Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"drain"}}},
		PostStart: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{big}}}}
	p.Spec.Volumes = []v1.Volume{{Name: big[:200]}}
	p.Annotations[customprobe.Annotation] = `[{"container":"app","type":"readiness","exec":{"command":["check","$(TOKEN)","$(FROM)","$(E1)","$(NOPE)"]}}]`
	return p
}

// The transform keeps only what probing reads (Trim's doc names each
// field and its reader): a hostile pod of about 1.5 MB costs a few KB in
// the cache, and everything probed reads is there.
func TestTransformDropsWhatProbedNeverReads(t *testing.T) {
	p := hostilePod()
	before := p.Size()
	obj, err := TransformFor("probed.io/ready")(p)
	if err != nil {
		t.Fatal(err)
	}
	k := obj.(*v1.Pod)
	if after := k.Size(); after > 8<<10 {
		t.Errorf("the cached pod is %d bytes (the server's %d), want a few KB", after, before)
	}
	t.Logf("the hostile pod: %d bytes on the server, %d in the cache", before, k.Size())
	if p.Annotations[lastApplied] == "" || len(p.Spec.Containers[0].Env) < 1000 {
		t.Error("Trim changed the pod it was given")
	}
	// Dropped.
	if k.ManagedFields != nil || k.Labels != nil || len(k.Annotations) != 2 || k.Spec.Volumes != nil {
		t.Errorf("metadata or volumes kept: %+v %v", k.Annotations, k.Spec.Volumes)
	}
	c := &k.Spec.Containers[0]
	if c.Image != "" || c.Command != nil || c.Args != nil || c.Lifecycle.PostStart != nil || c.ReadinessProbe.Exec != nil {
		t.Error("a container's image, command, args, postStart or a spec probe's handler kept")
	}
	cs := k.Status.ContainerStatuses[0]
	if cs.VolumeMounts != nil || cs.Resources != nil || cs.AllocatedResources != nil || cs.User != nil {
		t.Errorf("container status kept dropped fields: %+v", cs)
	}
	// Kept: what probed reads.
	if k.Annotations[customprobe.Annotation] != p.Annotations[customprobe.Annotation] || k.Annotations[evict.ConfigSourceAnnotation] != "api" {
		t.Errorf("annotations %v", k.Annotations)
	}
	if len(k.OwnerReferences) != 2 || k.OwnerReferences[0].Kind != "ReplicaSet" || k.OwnerReferences[1].Kind != "DaemonSet" {
		t.Errorf("owner references %+v, want the controller's and the DaemonSet's", k.OwnerReferences)
	}
	if len(k.Spec.ReadinessGates) != 1 || k.Spec.ReadinessGates[0].ConditionType != "probed.io/ready" {
		t.Errorf("readiness gates %v, want the node's only", k.Spec.ReadinessGates)
	}
	if len(c.Ports) != 1 || c.Ports[0].Name != "http" {
		t.Errorf("ports %v, want the named one", c.Ports)
	}
	wantEnv := []v1.EnvVar{{Name: "E1", Value: strings.Repeat("v", 1000)}, {Name: "TOKEN", Value: "s3cret-t0ken"}, {Name: "FROM"}}
	if !reflect.DeepEqual(c.Env, wantEnv) {
		t.Errorf("env %v, want the referenced variables (E1)", c.Env)
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.PeriodSeconds != 7 || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Exec.Command[0] != "drain" {
		t.Error("the spec probe's existence and timing, or the preStop hook, lost")
	}
	if cs.ContainerID != "containerd://aaa" || cs.State.Running == nil || !*cs.Started || k.Status.PodIP != "10.0.0.7" ||
		k.UID != "uid-1" || k.ResourceVersion != "10" || k.Name != "web" || k.Namespace != "ns" || k.Spec.NodeName != "node-a" {
		t.Errorf("Trim dropped a field probed reads: %+v", k)
	}
	if StatusHash(k) != StatusHash(p) {
		t.Error("Trim changed the status hash: it keeps every status field probed reads")
	}
	// Idempotent, and other objects pass.
	again := Trim(k, "probed.io/ready")
	if !reflect.DeepEqual(again, k) {
		t.Error("Trim not idempotent")
	}
	if obj, _ := TransformFor("")("x"); obj != "x" {
		t.Error("non-pod changed")
	}
	// A changed value the cache does not keep changes nothing downstream.
	q := hostilePod()
	q.Spec.Containers[0].Env[5].Value = "changed"
	q.Labels["l1"] = "changed"
	if SpecHash(Trim(q, "probed.io/ready")) != SpecHash(k) {
		t.Error("a change of what the cache drops changed the spec hash")
	}
}

// The env the cache keeps for E1 is bounded whatever the annotation
// references: tenant.ExpandedEnvBytes for the pod, in declaration order.
func TestTransformBoundsTheReferencedEnv(t *testing.T) {
	p := runningPod()
	var refs []string
	for i := range 200 {
		name := fmt.Sprintf("V%d", i)
		p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, v1.EnvVar{Name: name, Value: strings.Repeat("v", 1000)})
		refs = append(refs, `"$(`+name+`)"`)
	}
	p.Annotations[customprobe.Annotation] = `[{"container":"app","type":"readiness","exec":{"command":[` + strings.Join(refs, ",") + `]}}]`
	k := Trim(p, "")
	size := 0
	for _, e := range k.Spec.Containers[0].Env {
		size += len(e.Name) + len(e.Value)
	}
	if size > tenant.ExpandedEnvBytes || len(k.Spec.Containers[0].Env) < 60 || k.Spec.Containers[0].Env[0].Name != "V0" {
		t.Fatalf("kept %d variables, %d bytes (bound %d), first %s", len(k.Spec.Containers[0].Env), size, tenant.ExpandedEnvBytes, k.Spec.Containers[0].Env[0].Name)
	}
}

// The kubelet's annotations the cache keeps are evict's (it reads them).
func TestTransformKeepsWhatEvictReads(t *testing.T) {
	if ConfigSourceAnnotation != evict.ConfigSourceAnnotation || ConfigMirrorAnnotation != evict.ConfigMirrorAnnotation {
		t.Fatal("the kept kubelet annotations are not evict's")
	}
}

// TestHealthzUnhealthyUntilSynced: /healthz (agent/health over the
// source's HasSynced) is unhealthy while the informer has never synced.
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
