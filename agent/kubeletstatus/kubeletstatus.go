// Package kubeletstatus generates a pod's API status the way the kubelet
// does (pkg/kubelet/status/generate.go, kubelet_pods.go getPhase), for
// manifest mode, where probed plays the kubelet: the initial runtime status
// of a loaded pod, the PodScheduled, Initialized, ContainersReady and Ready
// conditions, and the phase. Pure functions: the store calls them.
package kubeletstatus

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/probed/probed/manager"
	"github.com/probed/probed/manager/results"
	"github.com/probed/probed/runtime"
)

// Initial builds the runtime status of a pod as it is loaded: the
// manifest's status when it has one, completed with a running status (since
// now, with a fresh container ID) for every container that has none.
// Regular init containers count as completed (exit 0).
func Initial(pod *v1.Pod, now metav1.Time, podIP string) v1.PodStatus {
	st := *pod.Status.DeepCopy()
	if st.PodIP == "" {
		st.PodIP = podIP
	}
	if len(st.PodIPs) == 0 {
		st.PodIPs = []v1.PodIP{{IP: st.PodIP}}
	}
	if st.Phase == "" {
		st.Phase = v1.PodRunning
	}
	if st.StartTime == nil {
		st.StartTime = &now
	}
	st.ContainerStatuses = Complete(pod.Spec.Containers, st.ContainerStatuses, now, false)
	st.InitContainerStatuses = Complete(pod.Spec.InitContainers, st.InitContainerStatuses, now, true)
	return st
}

// Complete returns one status per container in spec order, keeping
// the manifest's where present.
func Complete(specs []v1.Container, given []v1.ContainerStatus, now metav1.Time, init bool) []v1.ContainerStatus {
	if len(specs) == 0 {
		return nil
	}
	out := make([]v1.ContainerStatus, 0, len(specs))
	for i := range specs {
		c := &specs[i]
		var cs *v1.ContainerStatus
		for j := range given {
			if given[j].Name == c.Name {
				cs = given[j].DeepCopy()
				break
			}
		}
		if cs == nil {
			cs = &v1.ContainerStatus{Name: c.Name}
		}
		if cs.Image == "" {
			cs.Image = c.Image
		}
		st := &cs.State
		if st.Running == nil && st.Waiting == nil && st.Terminated == nil {
			if init && !runtime.IsRestartable(c) {
				st.Terminated = &v1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now}
			} else {
				st.Running = &v1.ContainerStateRunning{StartedAt: now}
			}
		}
		if st.Running != nil && st.Running.StartedAt.IsZero() {
			st.Running.StartedAt = now
		}
		// A container that does not run is not ready: the kubelet
		// generates its status afresh, and UpdatePodStatus leaves Ready
		// of a not-started container untouched (M7b) — except completed
		// regular init containers, which it marks Ready itself (M7h).
		if st.Running == nil {
			cs.Ready = false
		}
		if cs.ContainerID == "" && (st.Running != nil || st.Terminated != nil) {
			cs.ContainerID = NewContainerID()
		}
		// Results are keyed by the parsed ID (R2) and restarts match
		// ContainerID.String(): an ID that is not "type://id" would parse
		// to the empty ID, shared by every such container and never
		// matched. Give it the store's runtime type, or a fresh ID.
		if cs.ContainerID != "" && results.ParseContainerID(cs.ContainerID).String() != cs.ContainerID {
			if id := "probed://" + cs.ContainerID; !strings.Contains(cs.ContainerID, "://") && !strings.Contains(cs.ContainerID, "\"") {
				cs.ContainerID = id
			} else {
				cs.ContainerID = NewContainerID()
			}
		}
		out = append(out, *cs)
	}
	return out
}

// SetConditions sets PodScheduled, Initialized, ContainersReady and Ready
// the way the kubelet derives them (pkg/kubelet/status/generate.go):
//   - Initialized: every regular init container terminated with exit 0 and
//     every restartable init container (sidecar) started, or any regular
//     container already running or terminated (initialized before);
//   - ContainersReady: every sidecar and every container ready (sidecars
//     listed first in the message); False with reason PodFailed or
//     PodCompleted in a terminal phase;
//   - Ready: ContainersReady's status, reason and message when it is not
//     True, else False with reason ReadinessGatesNotReady while a readiness
//     gate's condition is missing or not True.
//
// st.Phase must already be set.
func SetConditions(pod *v1.Pod, st *v1.PodStatus, now metav1.Time) {
	setCondition(st, v1.PodScheduled, v1.ConditionTrue, "", "", now)

	// Initialized.
	var unknown, incomplete []string
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		cs := statusByName(st.InitContainerStatuses, c.Name)
		switch {
		case cs == nil:
			unknown = append(unknown, c.Name)
		case runtime.IsRestartable(c):
			if cs.Started == nil || !*cs.Started {
				incomplete = append(incomplete, c.Name)
			}
		case cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 0:
			incomplete = append(incomplete, c.Name)
		}
	}
	switch {
	case st.Phase == v1.PodSucceeded && len(unknown) == 0:
		setCondition(st, v1.PodInitialized, v1.ConditionTrue, "PodCompleted", "", now)
	case anyRegularContainerStarted(st):
		setCondition(st, v1.PodInitialized, v1.ConditionTrue, "", "", now)
	default:
		msg := joinMessages("containers with unknown status: ", unknown, "containers with incomplete status: ", incomplete)
		if msg == "" {
			setCondition(st, v1.PodInitialized, v1.ConditionTrue, "", "", now)
		} else {
			setCondition(st, v1.PodInitialized, v1.ConditionFalse, "ContainersNotInitialized", msg, now)
		}
	}

	// ContainersReady: sidecars first, then containers, in spec order.
	unknown, notReady := nil, []string(nil)
	check := func(name string, all []v1.ContainerStatus) {
		if cs := statusByName(all, name); cs == nil {
			unknown = append(unknown, name)
		} else if !cs.Ready {
			notReady = append(notReady, name)
		}
	}
	for i := range pod.Spec.InitContainers {
		if runtime.IsRestartable(&pod.Spec.InitContainers[i]) {
			check(pod.Spec.InitContainers[i].Name, st.InitContainerStatuses)
		}
	}
	for i := range pod.Spec.Containers {
		check(pod.Spec.Containers[i].Name, st.ContainerStatuses)
	}
	crStatus, crReason, crMsg := v1.ConditionTrue, "", ""
	switch {
	case st.Phase == v1.PodFailed:
		crStatus, crReason = v1.ConditionFalse, "PodFailed"
	case st.Phase == v1.PodSucceeded && len(unknown) == 0:
		crStatus, crReason = v1.ConditionFalse, "PodCompleted"
	default:
		if crMsg = joinMessages("containers with unknown status: ", unknown, "containers with unready status: ", notReady); crMsg != "" {
			crStatus, crReason = v1.ConditionFalse, "ContainersNotReady"
		}
	}
	setCondition(st, v1.ContainersReady, crStatus, crReason, crMsg, now)

	// Ready.
	if crStatus != v1.ConditionTrue {
		setCondition(st, v1.PodReady, crStatus, crReason, crMsg, now)
		return
	}
	var gates []string
	for _, gate := range pod.Spec.ReadinessGates {
		c := conditionOf(st.Conditions, gate.ConditionType)
		if c == nil {
			gates = append(gates, fmt.Sprintf("corresponding condition of pod readiness gate %q does not exist.", string(gate.ConditionType)))
		} else if c.Status != v1.ConditionTrue {
			gates = append(gates, fmt.Sprintf("the status of pod readiness gate %q is not \"True\", but %v", string(gate.ConditionType), c.Status))
		}
	}
	if len(gates) > 0 {
		setCondition(st, v1.PodReady, v1.ConditionFalse, "ReadinessGatesNotReady", strings.Join(gates, ", "), now)
		return
	}
	setCondition(st, v1.PodReady, v1.ConditionTrue, "", "", now)
}

// anyRegularContainerStarted is the kubelet's HasAnyRegularContainerStarted:
// a regular container is running or has terminated.
func anyRegularContainerStarted(st *v1.PodStatus) bool {
	for i := range st.ContainerStatuses {
		if s := st.ContainerStatuses[i].State; s.Running != nil || s.Terminated != nil {
			return true
		}
	}
	return false
}

func statusByName(all []v1.ContainerStatus, name string) *v1.ContainerStatus {
	for i := range all {
		if all[i].Name == name {
			return &all[i]
		}
	}
	return nil
}

// joinMessages formats the kubelet's condition messages:
// "<prefix1>[a b], <prefix2>[c]", leaving out empty lists.
func joinMessages(prefix1 string, list1 []string, prefix2 string, list2 []string) string {
	var parts []string
	if len(list1) > 0 {
		parts = append(parts, prefix1+bracket(list1))
	}
	if len(list2) > 0 {
		parts = append(parts, prefix2+bracket(list2))
	}
	return strings.Join(parts, ", ")
}

func bracket(names []string) string { return "[" + strings.Join(names, " ") + "]" }

func conditionOf(conds []v1.PodCondition, t v1.PodConditionType) *v1.PodCondition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}

func ConditionTrue(conds []v1.PodCondition, t v1.PodConditionType) bool {
	for _, c := range conds {
		if c.Type == t {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// setCondition sets a condition, moving LastTransitionTime only when the
// status changes.
func setCondition(st *v1.PodStatus, t v1.PodConditionType, status v1.ConditionStatus, reason, msg string, now metav1.Time) {
	for i := range st.Conditions {
		c := &st.Conditions[i]
		if c.Type != t {
			continue
		}
		if c.Status != status {
			c.LastTransitionTime = now
		}
		c.Status, c.Reason, c.Message = status, reason, msg
		return
	}
	st.Conditions = append(st.Conditions, v1.PodCondition{Type: t, Status: status, Reason: reason, Message: msg, LastTransitionTime: now})
}

// Phase is Running while any container runs or will restart; Succeeded or
// Failed once every regular container terminated and none restarts.
func Phase(pod *v1.Pod, st *v1.PodStatus) v1.PodPhase {
	if st.Phase == v1.PodFailed || st.Phase == v1.PodSucceeded {
		return st.Phase
	}
	if len(st.ContainerStatuses) == 0 {
		return st.Phase
	}
	allDone, anyFailed := true, false
	for i := range st.ContainerStatuses {
		t := st.ContainerStatuses[i].State.Terminated
		if t == nil {
			allDone = false
			break
		}
		// A terminated container that its restart policy restarts (e.g.
		// a crash under restartPolicy Always) keeps the pod Running, as
		// the kubelet's getPhase does; a terminal phase would end every
		// probe worker of the pod (W5.2).
		if spec := SpecByName(pod.Spec.Containers, st.ContainerStatuses[i].Name); spec != nil && manager.ContainerShouldRestart(spec, &pod.Spec, t.ExitCode) {
			allDone = false
			break
		}
		if t.ExitCode != 0 {
			anyFailed = true
		}
	}
	if !allDone {
		return v1.PodRunning
	}
	if anyFailed {
		return v1.PodFailed
	}
	return v1.PodSucceeded
}

// NewContainerID returns a fresh container ID of the simulated runtime,
// "probed://" and 32 hex digits.
func NewContainerID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "probed://" + hex.EncodeToString(b[:])
}

// SpecByName returns the container of cs named name, or nil.
func SpecByName(cs []v1.Container, name string) *v1.Container {
	for i := range cs {
		if cs[i].Name == name {
			return &cs[i]
		}
	}
	return nil
}

// CrashLoopBackOff is the waiting reason of a container whose restart backs
// off (the kubelet's kubecontainer.ErrCrashLoopBackOff).
const CrashLoopBackOff = "CrashLoopBackOff"

// StartAgain starts a killed or waiting container anew, as the kubelet's
// startContainer does: a fresh container ID, running since now, restart
// count + 1, not started (its startup probe pending) and not ready. The last
// termination state is kept.
func StartAgain(cs *v1.ContainerStatus, now metav1.Time) {
	notStarted := false
	cs.Ready = false
	cs.Started = &notStarted
	cs.RestartCount++
	cs.ContainerID = NewContainerID()
	cs.State = v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: now}}
}

// StartBackedOff starts every container of statuses waiting in
// CrashLoopBackOff (StartAgain): a status restored after probed restarted,
// whose back-off the restart forgot, as the kubelet's in-memory back-off is
// forgotten when the kubelet restarts (its first pod sync starts the
// container).
func StartBackedOff(statuses []v1.ContainerStatus, now metav1.Time) {
	for i := range statuses {
		if w := statuses[i].State.Waiting; w != nil && w.Reason == CrashLoopBackOff {
			StartAgain(&statuses[i], now)
		}
	}
}
