package manager

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// A probe runs only when the StatusProvider reports its pod with the
// container running, carrying a container ID and, for liveness and
// readiness, Started as UpdatePodStatus sets it (W5.1, W5.3, W5.6, W5.9): the
// kubelet's status manager always does, but a status a library user writes
// by hand easily does not, and then nothing is probed and, in the kubelet's
// code, nothing says why (its lines are at V(3), here Debug). The manager
// says it once per pod, at WARN, naming what is missing.
//
// A status that says why the container does not run is not lacking: a
// waiting container (ContainerCreating, CrashLoopBackOff: W8a), a terminated
// one (W8b), and a pending pod whose containers the kubelet has not
// reported yet. A status that does neither is.

// lackStarted: a running container whose status has no Started is never
// probed for liveness or readiness (W5.9); the kubelet's status always
// has it, filled by UpdatePodStatus (M7).
const lackStarted = "the container's status has no Started, which UpdatePodStatus fills (M7): give the provider's status to UpdatePodStatus after each change"

// lackOfContainer says what status lacks for the probe of a container whose
// status is c (nil: none): "" when the status says why it does not run.
func lackOfContainer(status *v1.PodStatus, c *v1.ContainerStatus) string {
	switch {
	case c == nil && status.Phase == v1.PodPending:
		return "" // not reported yet
	case c == nil:
		return "the pod's status lists no such container (ContainerStatuses, InitContainerStatuses)"
	case c.State.Waiting != nil || c.State.Terminated != nil:
		return "" // the kubelet's reasons: waiting, terminated
	case c.ContainerID == "":
		return "the container's status has no ContainerID (e.g. \"containerd://<id>\")"
	case c.State.Running == nil:
		return "the container's status has no State: neither Running (with StartedAt), Waiting nor Terminated"
	}
	return ""
}

// noteLack logs, once per pod, that w's probe did not run because the
// status lacks what it needs, from the worker's second such run on: the
// first may be the moment between AddPod and the status owner learning of
// the pod (the agent's reconciler adds, then tells it). Only runs that
// cannot probe call it.
func (m *manager) noteLack(w *worker, lack string) {
	if !w.lackSeen {
		w.lackSeen = true
		return
	}
	uid := w.rs.Pod.UID
	m.lackMu.Lock()
	_, logged := m.lacking[uid]
	if !logged {
		m.lacking[uid] = struct{}{}
	}
	m.lackMu.Unlock()
	if logged {
		return
	}
	m.log.Warn(fmt.Sprintf("probe not run: %s; it runs once the status has it (logged once per pod)", lack),
		"pod", klogPod(w.rs.Pod), "podUID", string(uid), "containerName", w.rs.Container.Name, "probeType", w.rs.ProbeType.String())
}

// forgetLack drops a pod's entry (its last worker is gone).
func (m *manager) forgetLack(uid types.UID) {
	m.lackMu.Lock()
	delete(m.lacking, uid)
	m.lackMu.Unlock()
}
