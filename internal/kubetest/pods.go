package kubetest

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/kubernetes"
)

// PodIP is the pod IP (and host IP) the helpers write: tests serve their
// probe targets on loopback.
const PodIP = "127.0.0.1"

// NewPod returns a minimal valid Pod ns/name bound to node (spec.nodeName:
// no scheduler runs), with one container per name (image
// registry.invalid/probed-test:1, never pulled: no kubelet runs). Callers add
// probes, annotations and readiness gates before CreatePod.
func NewPod(ns, name, node string, containers ...string) *v1.Pod {
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       v1.PodSpec{NodeName: node},
	}
	for _, c := range containers {
		pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: c, Image: "registry.invalid/probed-test:1"})
	}
	return pod
}

// SpecProbes counts the probes of the pod's containers' specs (readiness,
// liveness, startup).
func SpecProbes(pod *v1.Pod) int {
	n := 0
	for _, c := range pod.Spec.Containers {
		for _, p := range []*v1.Probe{c.ReadinessProbe, c.LivenessProbe, c.StartupProbe} {
			if p != nil {
				n++
			}
		}
	}
	return n
}

// CreatePod creates pod and returns it as the server stored it.
func CreatePod(t testing.TB, c kubernetes.Interface, pod *v1.Pod) *v1.Pod {
	t.Helper()
	created, err := c.CoreV1().Pods(pod.Namespace).Create(Context(t), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}
	return created
}

// ContainerID returns a new container ID in the runtime's form
// ("containerd://" and 64 hex digits).
func ContainerID() string {
	b := make([]byte, 32)
	rand.Read(b)
	return "containerd://" + hex.EncodeToString(b)
}

// kubeletConditions are the pod conditions the kubelet owns
// (PodConditionByKubelet, pkg/kubelet/types/pod_status.go); it keeps every
// other condition (readiness gates) when it writes the status.
var kubeletConditions = map[v1.PodConditionType]bool{
	v1.PodScheduled: true, v1.PodReady: true, v1.PodInitialized: true,
	v1.ContainersReady: true, v1.PodReadyToStartContainers: true,
}

// PatchPodStatus writes the pod's status the way the kubelet's status
// manager does: it reads the pod, lets mutate change the status, keeps every
// condition the kubelet does not own as the server has it (mergePodStatus),
// re-derives ContainersReady and Ready (GeneratePodReadyCondition: Ready is
// True only when every container is ready and every readiness gate's
// condition is True), and sends a two-way strategic-merge patch of the
// status subresource with the pod's UID as precondition
// (statusutil.PatchPodStatus). It returns the pod as the server stored it.
func PatchPodStatus(t testing.TB, c kubernetes.Interface, ns, name string, mutate func(*v1.PodStatus)) *v1.Pod {
	t.Helper()
	ctx := Context(t)
	old, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod %s/%s: %v", ns, name, err)
	}
	status := *old.Status.DeepCopy()
	mutate(&status)
	var kept []v1.PodCondition
	for _, cond := range status.Conditions {
		if kubeletConditions[cond.Type] {
			kept = append(kept, cond)
		}
	}
	for _, cond := range old.Status.Conditions {
		if !kubeletConditions[cond.Type] {
			kept = append(kept, cond)
		}
	}
	status.Conditions = kept
	deriveReady(old, &status)

	oldJSON, err := json.Marshal(v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: old.UID}, Status: old.Status})
	if err != nil {
		t.Fatal(err)
	}
	newJSON, err := json.Marshal(v1.Pod{ObjectMeta: metav1.ObjectMeta{UID: old.UID}, Status: status})
	if err != nil {
		t.Fatal(err)
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(oldJSON, newJSON, v1.Pod{})
	if err != nil {
		t.Fatalf("status patch of pod %s/%s: %v", ns, name, err)
	}
	patch, err = withUID(patch, old.UID)
	if err != nil {
		t.Fatal(err)
	}
	updated, err := c.CoreV1().Pods(ns).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		t.Fatalf("patch status of pod %s/%s: %v", ns, name, err)
	}
	return updated
}

// withUID adds metadata.uid to a patch: the server refuses it (409) when the
// pod was replaced by another of the same name.
func withUID(patch []byte, uid types.UID) ([]byte, error) {
	var m map[string]any
	if err := json.Unmarshal(patch, &m); err != nil {
		return nil, err
	}
	meta, _ := m["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		m["metadata"] = meta
	}
	meta["uid"] = string(uid)
	return json.Marshal(m)
}

// deriveReady sets ContainersReady and Ready from the container statuses and
// the readiness gates, as the kubelet's GeneratePodReadyCondition does; the
// last transition time moves only when a status flips.
func deriveReady(pod *v1.Pod, status *v1.PodStatus) {
	containersReady := len(status.ContainerStatuses) == len(pod.Spec.Containers) && len(pod.Spec.Containers) > 0
	for _, cs := range status.ContainerStatuses {
		containersReady = containersReady && cs.Ready
	}
	containersReason := ""
	if !containersReady {
		containersReason = "ContainersNotReady"
	}
	ready, reason := containersReady, containersReason
	for _, gate := range pod.Spec.ReadinessGates {
		cond := findCondition(status.Conditions, gate.ConditionType)
		if cond == nil || cond.Status != v1.ConditionTrue {
			ready = false
			if reason == "" {
				reason = "ReadinessGatesNotReady"
			}
		}
	}
	setCondition(status, v1.ContainersReady, containersReady, containersReason)
	setCondition(status, v1.PodReady, ready, reason)
}

func findCondition(conds []v1.PodCondition, t v1.PodConditionType) *v1.PodCondition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

func setCondition(status *v1.PodStatus, t v1.PodConditionType, value bool, reason string) {
	s := v1.ConditionFalse
	if value {
		s = v1.ConditionTrue
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	if cond := findCondition(status.Conditions, t); cond != nil {
		if cond.Status != s {
			cond.LastTransitionTime = now
		}
		cond.Status, cond.Reason = s, reason
		return
	}
	status.Conditions = append(status.Conditions, v1.PodCondition{Type: t, Status: s, Reason: reason, LastTransitionTime: now})
}

// SetPodRunning writes the status the kubelet reports once every container
// of the pod runs: phase Running, podIP/podIPs/hostIP PodIP, startTime, the
// PodScheduled and Initialized conditions, and per container a new container
// ID, state.running.startedAt now, started true, ready as given and
// restartCount 0 (ContainersReady and Ready derived as PatchPodStatus does).
func SetPodRunning(t testing.TB, c kubernetes.Interface, ns, name string, ready bool) *v1.Pod {
	t.Helper()
	return SetPodRunningWithIDs(t, c, ns, name, ready, nil)
}

// SetPodRunningWithIDs is SetPodRunning with the container IDs given by
// container name ("containerd://<id>" of a container the test started in a
// real runtime); a container not in ids gets a new random ID. The status is
// written once, so an agent never sees the pod running under an ID that
// names no container.
func SetPodRunningWithIDs(t testing.TB, c kubernetes.Interface, ns, name string, ready bool, ids map[string]string) *v1.Pod {
	t.Helper()
	pod, err := c.CoreV1().Pods(ns).Get(Context(t), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod %s/%s: %v", ns, name, err)
	}
	return PatchPodStatus(t, c, ns, name, func(s *v1.PodStatus) {
		now := metav1.NewTime(time.Now().Truncate(time.Second))
		s.Phase = v1.PodRunning
		s.HostIP, s.PodIP = PodIP, PodIP
		s.HostIPs, s.PodIPs = []v1.HostIP{{IP: PodIP}}, []v1.PodIP{{IP: PodIP}}
		s.StartTime = &now
		setCondition(s, v1.PodScheduled, true, "")
		setCondition(s, v1.PodInitialized, true, "")
		s.ContainerStatuses = nil
		for _, ctr := range pod.Spec.Containers {
			started := true
			id := ids[ctr.Name]
			if id == "" {
				id = ContainerID()
			}
			s.ContainerStatuses = append(s.ContainerStatuses, v1.ContainerStatus{
				Name:        ctr.Name,
				Image:       ctr.Image,
				ImageID:     "registry.invalid/probed-test@sha256:" + hex.EncodeToString(make([]byte, 32)),
				ContainerID: id,
				State:       v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: now}},
				Started:     &started,
				Ready:       ready,
			})
		}
	})
}

// RestartContainer writes what the kubelet reports after it restarted one
// container: a new container ID, restartCount + 1, state.running.startedAt
// now, lastState.terminated (exit code 137, reason Error) from the previous
// instance, started true and ready false. It returns the pod as the server
// stored it; a missing container fails the test.
func RestartContainer(t testing.TB, c kubernetes.Interface, ns, name, container string) *v1.Pod {
	t.Helper()
	found := false
	pod := PatchPodStatus(t, c, ns, name, func(s *v1.PodStatus) {
		now := metav1.NewTime(time.Now().Truncate(time.Second))
		for i := range s.ContainerStatuses {
			cs := &s.ContainerStatuses[i]
			if cs.Name != container {
				continue
			}
			found = true
			var startedAt metav1.Time
			if cs.State.Running != nil {
				startedAt = cs.State.Running.StartedAt
			}
			cs.LastTerminationState = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{
				ExitCode: 137, Reason: "Error", StartedAt: startedAt, FinishedAt: now, ContainerID: cs.ContainerID,
			}}
			cs.ContainerID = ContainerID()
			cs.RestartCount++
			cs.State = v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: now}}
			started := true
			cs.Started, cs.Ready = &started, false
		}
	})
	if !found {
		t.Fatalf("pod %s/%s has no container status %q (call SetPodRunning first)", ns, name, container)
	}
	return pod
}
