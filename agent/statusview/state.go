package statusview

import (
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/probed/probed/runtime"
)

// StatusOf is the STATUS column of `kubectl get pods` as kubectl's printPod
// computes it for the regular containers (k8s.io/kubernetes
// pkg/printers/internalversion): the pod's reason, else its phase; replaced
// by the reason of the first container, in spec order, that is waiting
// (CrashLoopBackOff while a restart backs off, ContainerCreating) or
// terminated (its reason, else Signal:N or ExitCode:N). A pod whose
// containers all completed but one still runs ready shows Running (NotReady
// when the pod's Ready condition is not true); a pod being deleted whose
// phase is not terminal shows Terminating. A running pod whose containers
// are not ready stays Running: READY (0/1) says that, as with kubectl.
// kubectl's Init:N/M forms for init containers are not computed.
func StatusOf(p *v1.Pod) string {
	reason := string(p.Status.Phase)
	if p.Status.Reason != "" {
		reason = p.Status.Reason
	}
	hasRunning := false
	for i := len(p.Status.ContainerStatuses) - 1; i >= 0; i-- {
		cs := &p.Status.ContainerStatuses[i]
		st := cs.State
		switch {
		case st.Waiting != nil && st.Waiting.Reason != "":
			reason = st.Waiting.Reason
		case st.Terminated != nil && st.Terminated.Reason != "":
			reason = st.Terminated.Reason
		case st.Terminated != nil && st.Terminated.Signal != 0:
			reason = fmt.Sprintf("Signal:%d", st.Terminated.Signal)
		case st.Terminated != nil:
			reason = fmt.Sprintf("ExitCode:%d", st.Terminated.ExitCode)
		case cs.Ready && st.Running != nil:
			hasRunning = true
		}
	}
	if reason == "Completed" && hasRunning {
		reason = string(v1.PodRunning)
		if !podReady(p) {
			reason = "NotReady"
		}
	}
	if p.DeletionTimestamp != nil && p.Status.Reason == "NodeLost" {
		reason = "Unknown"
	} else if p.DeletionTimestamp != nil && p.Status.Phase != v1.PodSucceeded && p.Status.Phase != v1.PodFailed {
		reason = "Terminating"
	}
	return reason
}

// podReady reports whether the pod's Ready condition is true.
func podReady(p *v1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// The states of ContainerState.State.
const (
	StateRunning    = "running"
	StateWaiting    = "waiting"
	StateTerminated = "terminated"
	// StateUnknown: the status reports no state for the container, or
	// there is no status for it yet.
	StateUnknown = "unknown"
)

// ContainerState is one container's state as `kubectl describe pod` shows
// it: running, waiting with a reason (and, in CrashLoopBackOff, when the
// back-off ends), or terminated with a reason and exit code.
type ContainerState struct {
	Name string
	// Sidecar: a restartable init container.
	Sidecar bool
	// State is StateRunning, StateWaiting, StateTerminated or StateUnknown.
	State string
	// Reason and Message are the waiting or terminated state's.
	Reason, Message string
	// ExitCode and Signal are the terminated state's.
	ExitCode, Signal int32
	// BackOff is the crash-loop back-off of a container waiting in
	// CrashLoopBackOff, read from the kubelet's waiting message ("back-off
	// 20s restarting failed container=..."); 0 when not known.
	BackOff time.Duration
	// RestartAt is when that back-off ends: the kubelet backs off from
	// the previous instance's exit (lastState.terminated.finishedAt, its
	// doBackOff), so the container is started again at that time plus
	// BackOff. Zero when not known.
	RestartAt time.Time
	// Ready, Started and Restarts are the status's.
	Ready, Started bool
	Restarts       int32
}

// ContainerStates lists the states of p's sidecars (restartable init
// containers) and containers, in the order CountContainers counts them: the
// spec's order, then statuses of containers the spec does not list (a pod
// listed without its spec). A container without a status is StateUnknown.
func ContainerStates(p *v1.Pod) []ContainerState {
	statuses := map[string]*v1.ContainerStatus{}
	for _, list := range [][]v1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for i := range list {
			statuses[list[i].Name] = &list[i]
		}
	}
	var out []ContainerState
	seen := map[string]bool{}
	add := func(name string, sidecar bool) {
		seen[name] = true
		s := ContainerState{Name: name, Sidecar: sidecar, State: StateUnknown}
		if cs := statuses[name]; cs != nil {
			s = stateOf(cs, sidecar)
		}
		out = append(out, s)
	}
	for i := range p.Spec.InitContainers {
		if runtime.IsRestartable(&p.Spec.InitContainers[i]) {
			add(p.Spec.InitContainers[i].Name, true)
		}
	}
	for i := range p.Spec.Containers {
		add(p.Spec.Containers[i].Name, false)
	}
	for i := range p.Status.ContainerStatuses {
		if name := p.Status.ContainerStatuses[i].Name; !seen[name] {
			add(name, false)
		}
	}
	return out
}

// stateOf reads one container status.
func stateOf(cs *v1.ContainerStatus, sidecar bool) ContainerState {
	s := ContainerState{Name: cs.Name, Sidecar: sidecar, State: StateUnknown, Ready: cs.Ready,
		Started: cs.Started != nil && *cs.Started, Restarts: cs.RestartCount}
	switch st := cs.State; {
	case st.Running != nil:
		s.State = StateRunning
	case st.Waiting != nil:
		s.State, s.Reason, s.Message = StateWaiting, st.Waiting.Reason, st.Waiting.Message
		if st.Waiting.Reason == "CrashLoopBackOff" {
			s.BackOff = backOffOf(st.Waiting.Message)
			if last := cs.LastTerminationState.Terminated; s.BackOff > 0 && last != nil && !last.FinishedAt.IsZero() {
				s.RestartAt = last.FinishedAt.Add(s.BackOff)
			}
		}
	case st.Terminated != nil:
		s.State, s.Reason, s.Message = StateTerminated, st.Terminated.Reason, st.Terminated.Message
		s.ExitCode, s.Signal = st.Terminated.ExitCode, st.Terminated.Signal
	}
	return s
}

// backOffOf reads the back-off from the kubelet's CrashLoopBackOff waiting
// message, "back-off 20s restarting failed container=app pod=web_ns(uid)"
// (kuberuntime's doBackOff); 0 for any other text.
func backOffOf(message string) time.Duration {
	rest, ok := strings.CutPrefix(message, "back-off ")
	if !ok {
		return 0
	}
	word, _, _ := strings.Cut(rest, " ")
	d, err := time.ParseDuration(word)
	if err != nil || d <= 0 {
		return 0
	}
	return d
}

// Summary is the state in one short line, at now: "running"; "waiting:
// CrashLoopBackOff, restart in 12s (back-off 20s)" ("restart due" once the
// back-off has passed), "waiting: ContainerCreating"; "terminated: Error,
// exit code 137", "terminated: signal 9"; "unknown".
func (s ContainerState) Summary(now time.Time) string {
	switch s.State {
	case StateWaiting:
		text := "waiting"
		if s.Reason != "" {
			text += ": " + s.Reason
		}
		if !s.RestartAt.IsZero() {
			if left := s.RestartAt.Sub(now); left > 0 {
				text += ", restart in " + (left + time.Second - 1).Truncate(time.Second).String() // whole seconds, rounded up
			} else {
				text += ", restart due"
			}
		}
		if s.BackOff > 0 {
			text += " (back-off " + s.BackOff.String() + ")"
		}
		return text
	case StateTerminated:
		text := "terminated"
		if s.Reason != "" {
			text += ": " + s.Reason + ","
		} else {
			text += ":"
		}
		if s.Signal != 0 {
			return fmt.Sprintf("%s signal %d", text, s.Signal)
		}
		return fmt.Sprintf("%s exit code %d", text, s.ExitCode)
	}
	return s.State
}
