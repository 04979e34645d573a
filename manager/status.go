package manager

import (
	"context"

	v1 "k8s.io/api/core/v1"

	"github.com/probed/probed/manager/results"
	"github.com/probed/probed/runtime"
)

func (m *manager) UpdatePodStatus(_ context.Context, pod *v1.Pod, podStatus *v1.PodStatus) {
	// M7 a–e: regular containers.
	for i := range podStatus.ContainerStatuses {
		c := &podStatus.ContainerStatuses[i]
		started := m.isContainerStarted(pod, c)
		c.Started = &started
		if !started {
			continue // M7b: Ready untouched
		}
		ready := m.readiness(pod, c)
		// M7d: kubelet-restart preservation (gate disabled, the default).
		for j := range pod.Spec.Containers {
			if pod.Spec.Containers[j].Name == c.Name {
				ready = m.preserveReadiness(pod, c, &pod.Spec.Containers[j], ready)
				break
			}
		}
		c.Ready = ready
	}
	// M7 f–i: init containers.
	for i := range podStatus.InitContainerStatuses {
		c := &podStatus.InitContainerStatuses[i]
		started := m.isContainerStarted(pod, c)
		c.Started = &started
		// M7g: the spec at the same index, with the same name.
		if i >= len(pod.Spec.InitContainers) || pod.Spec.InitContainers[i].Name != c.Name {
			m.log.Debug("Mismatch between pod spec and status, likely programmer error", "pod", klogPod(pod), "containerName", c.Name)
			continue
		}
		spec := &pod.Spec.InitContainers[i]
		if !runtime.IsRestartable(spec) {
			// M7h
			if c.State.Terminated != nil && c.State.Terminated.ExitCode == 0 {
				c.Ready = true
			}
			continue
		}
		// M7i
		if !started {
			continue
		}
		c.Ready = m.preserveReadiness(pod, c, spec, m.readiness(pod, c))
	}
}

// readiness computes Ready for a started container (M7c) and, when a
// readiness worker exists without a Success result, triggers it now.
func (m *manager) readiness(pod *v1.Pod, c *v1.ContainerStatus) bool {
	if c.State.Running == nil {
		return false
	}
	if r, ok := m.results[runtime.Readiness].Get(results.ParseContainerID(c.ContainerID)); ok && r == results.Success {
		return true
	}
	w, exists := m.getWorker(pod.UID, c.Name, runtime.Readiness)
	if exists && (w.ran.Load() || m.clock.Since(m.start) >= w.period()) {
		// Non-blocking and coalescing, like the kubelet's 1-slot
		// manualTriggerCh. Within one period of the manager's start a
		// worker that has not run yet is waiting for its spread phase:
		// the kubelet's worker sleeps its start jitter before it reads
		// the trigger channel (W3). Running it now would fire every
		// readiness probe of the node at once and keep them in
		// lock-step, since a trigger re-arms the worker (BR-24).
		m.sched.Trigger(w.id)
	}
	return !exists
}

// isContainerStarted is M8.
func (m *manager) isContainerStarted(pod *v1.Pod, c *v1.ContainerStatus) bool {
	if c.State.Running == nil {
		return false
	}
	if r, ok := m.results[runtime.Startup].Get(results.ParseContainerID(c.ContainerID)); ok {
		return r == results.Success
	}
	// ChangeContainerStatusOnKubeletRestart disabled (default ≥ 1.35): a
	// container already reported started stays started.
	if c.Started != nil && *c.Started {
		return true
	}
	if _, exists := m.getWorker(pod.UID, c.Name, runtime.Startup); exists {
		return false
	}
	return true
}

// preserveReadiness is M9: after a restart of the agent, a container that
// was Ready (per the pod's published Ready condition) stays Ready until its
// first real readiness result; containers without a readiness probe are ready.
//
// The rule applies only while the container has no readiness result yet:
// the kubelet calls setReadyStateOnKubeletRestart only on the branch where
// the readiness cache holds no Success (prober_manager.go UpdatePodStatus),
// and with a cached Failure the rule can only confirm false. Once a result
// has arrived it alone decides; otherwise a pod whose Ready condition was
// False when the agent restarted would stay NotReady forever, since its
// containers could never become ready to turn the condition True.
func (m *manager) preserveReadiness(pod *v1.Pod, c *v1.ContainerStatus, spec *v1.Container, ready bool) bool {
	if !SurvivedRestart(c, m.start, m.restartWindow) {
		return ready
	}
	if _, ok := m.results[runtime.Readiness].Get(results.ParseContainerID(c.ContainerID)); ok {
		return ready
	}
	ready = true
	if spec.ReadinessProbe != nil && !podReadyConditionTrue(pod) {
		ready = false
	}
	return ready
}

func podReadyConditionTrue(pod *v1.Pod) bool {
	for _, cond := range pod.Status.Conditions {
		if cond.Type == v1.PodReady {
			return cond.Status == v1.ConditionTrue
		}
	}
	return false
}
