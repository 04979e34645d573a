package store

import (
	"log/slog"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// initialStatus builds the runtime status of a pod as it is loaded: the
// manifest's status when it has one, completed with a running status (since
// now, with a fresh container ID) for every container that has none.
// Regular init containers count as completed (exit 0).
func initialStatus(pod *v1.Pod, now metav1.Time, podIP string) v1.PodStatus {
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
	st.ContainerStatuses = completeStatuses(pod.Spec.Containers, st.ContainerStatuses, now, false)
	st.InitContainerStatuses = completeStatuses(pod.Spec.InitContainers, st.InitContainerStatuses, now, true)
	return st
}

// completeStatuses returns one status per container in spec order, keeping
// the manifest's where present.
func completeStatuses(specs []v1.Container, given []v1.ContainerStatus, now metav1.Time, init bool) []v1.ContainerStatus {
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
			if init && !isRestartable(c) {
				st.Terminated = &v1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now}
			} else {
				st.Running = &v1.ContainerStateRunning{StartedAt: now}
			}
		}
		if st.Running != nil && st.Running.StartedAt.IsZero() {
			st.Running.StartedAt = now
		}
		if cs.ContainerID == "" && (st.Running != nil || st.Terminated != nil) {
			cs.ContainerID = newContainerID()
		}
		out = append(out, *cs)
	}
	return out
}

func isRestartable(c *v1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways
}

// setConditions sets Initialized, ContainersReady, Ready and PodScheduled
// the way the kubelet derives them from container readiness: ContainersReady
// when every container (and restartable init container) is ready; Ready when
// ContainersReady and every readiness gate is True.
func setConditions(pod *v1.Pod, st *v1.PodStatus, now metav1.Time) {
	initialized := true
	for i := range st.InitContainerStatuses {
		cs := &st.InitContainerStatuses[i]
		spec := specByName(pod.Spec.InitContainers, cs.Name)
		if spec != nil && isRestartable(spec) {
			if cs.Started == nil || !*cs.Started {
				initialized = false
			}
			continue
		}
		if cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 0 {
			initialized = false
		}
	}
	containersReady := initialized
	var notReady []string
	for i := range st.ContainerStatuses {
		if !st.ContainerStatuses[i].Ready {
			containersReady = false
			notReady = append(notReady, st.ContainerStatuses[i].Name)
		}
	}
	for i := range st.InitContainerStatuses {
		cs := &st.InitContainerStatuses[i]
		if spec := specByName(pod.Spec.InitContainers, cs.Name); spec != nil && isRestartable(spec) && !cs.Ready {
			containersReady = false
			notReady = append(notReady, cs.Name)
		}
	}
	ready := containersReady
	for _, gate := range pod.Spec.ReadinessGates {
		if !conditionTrue(st.Conditions, gate.ConditionType) {
			ready = false
		}
	}
	setCondition(st, v1.PodScheduled, true, "", "", now)
	setCondition(st, v1.PodInitialized, initialized, "ContainersNotInitialized", "containers with incomplete status", now)
	msg := ""
	if len(notReady) > 0 {
		msg = "containers with unready status: " + bracket(notReady)
	}
	setCondition(st, v1.ContainersReady, containersReady, "ContainersNotReady", msg, now)
	setCondition(st, v1.PodReady, ready, "ContainersNotReady", msg, now)
}

func bracket(names []string) string {
	s := "["
	for i, n := range names {
		if i > 0 {
			s += " "
		}
		s += n
	}
	return s + "]"
}

func conditionTrue(conds []v1.PodCondition, t v1.PodConditionType) bool {
	for _, c := range conds {
		if c.Type == t {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// setCondition sets a condition, moving LastTransitionTime only when the
// status changes.
func setCondition(st *v1.PodStatus, t v1.PodConditionType, ok bool, reason, msg string, now metav1.Time) {
	status := v1.ConditionFalse
	if ok {
		status, reason, msg = v1.ConditionTrue, "", ""
	}
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

// phase is Running while any container runs or will restart; Succeeded or
// Failed once every regular container terminated and none restarts.
func phase(pod *v1.Pod, st *v1.PodStatus) v1.PodPhase {
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

// logChanges logs one structured line per Started or Ready change of a
// container and per pod Ready change; it reports whether anything changed.
func logChanges(log *slog.Logger, pod *v1.Pod, before, after *v1.PodStatus) bool {
	changed := false
	compare := func(old, cur []v1.ContainerStatus) {
		for i := range cur {
			c := &cur[i]
			var o *v1.ContainerStatus
			for j := range old {
				if old[j].Name == c.Name {
					o = &old[j]
					break
				}
			}
			if o == nil || boolOf(o.Started) != boolOf(c.Started) {
				changed = true
				log.Info("container started changed", "pod", klog(pod), "podUID", string(pod.UID), "container", c.Name, "containerID", c.ContainerID, "started", boolOf(c.Started))
			}
			if o == nil || o.Ready != c.Ready {
				changed = true
				log.Info("container ready changed", "pod", klog(pod), "podUID", string(pod.UID), "container", c.Name, "containerID", c.ContainerID, "ready", c.Ready)
			}
			if o != nil && (o.ContainerID != c.ContainerID || o.RestartCount != c.RestartCount) {
				changed = true
			}
		}
	}
	compare(before.ContainerStatuses, after.ContainerStatuses)
	compare(before.InitContainerStatuses, after.InitContainerStatuses)
	if conditionTrue(before.Conditions, v1.PodReady) != conditionTrue(after.Conditions, v1.PodReady) || len(before.Conditions) == 0 {
		changed = true
		log.Info("pod ready changed", "pod", klog(pod), "podUID", string(pod.UID), "ready", conditionTrue(after.Conditions, v1.PodReady))
	}
	if before.Phase != after.Phase {
		changed = true
	}
	return changed
}

func boolOf(b *bool) bool { return b != nil && *b }
